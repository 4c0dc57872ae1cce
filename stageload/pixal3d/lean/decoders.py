"""Install the lean decode (:mod:`.decoder_rows`) on one port decoder while it decodes.

:func:`chunk_decoder` replaces, for the one decoder given, the forward of the port's
``SparseUnetVaeDecoder`` class (``pixal3d.models.sc_vaes.sparse_unet_vae``; found in the
decoder's class hierarchy, so ``FlexiDualGridVaeDecoder.forward``'s ``super().forward`` reaches
it too and the mesh extraction stays the port's) by the same steps computed in voxel ranges:
``from_latent``, each ``SparseConvNeXtBlock3d`` and ``SparseResBlockC2S3d`` by rows, the final
``F.layer_norm`` and ``output_layer`` by rows — fused into the last up block where the finest
level has no block (the released configs). Other decoders, training mode and anything the
lean forward does not know go to the port's forward unchanged.

Preconditions, checked when installed (each failure: a ``warning`` with ``fallback:
port_decoder`` and its ``cause``, and the port's forward runs — with its working memory):
the port's sparse convolution back end is ``none`` (``config.CONV``; under ``flex_gemm`` the
back end's own kernel builds its map and output, which lean does not reproduce), the decoder
has the port's attributes, and a probe of its smallest convolution and of its skip connection
on a few voxels gives the port's values bit for bit. A block of another type runs the port's
way (a ``warning`` names it); an up block whose children the port orders otherwise (checked at
every call) too. One ``working_memory`` event per decoder (``tool: decoder_rows``) after its
first lean pass: rows per range and ``bytes_saved``, the largest intermediate the port's path
makes that lean never holds whole (its tensors' bytes: a lower bound on the saving).

Agreement: the port's arithmetic row by row in its dtypes; on this CPU (torch 2.13) the lean
decode equals the port's bit for bit at the test sizes (``tests/pixal3d/test_lean_decode.py``).
Not run on MPS (no Mac here), where a matrix product may pick another kernel for another row
count (fp16 rounding, not measured).
"""
from __future__ import annotations

import importlib
from typing import Callable, Optional

import torch

from stageload.events import EventSink, emit
from stageload.pixal3d.lean import decoder_rows as rows_mod
from stageload.pixal3d.lean.rowconv import conv_index, conv_rows

BASE_CLASS = "SparseUnetVaeDecoder"
CONV_BLOCK, UP_BLOCK = "SparseConvNeXtBlock3d", "SparseResBlockC2S3d"
CONFIG_MODULE = "pixal3d.modules.sparse.config"
SPARSE_MODULE = "pixal3d.modules.sparse"
DECODER_BUDGET = 64 << 20
"""At most this many bytes of a range's temporaries (the budget given is capped to it)."""
SOURCE = "stageload.pixal3d.lean.decoders (--working-memory lean)"
ATTRS = {CONV_BLOCK: ("conv", "norm", "mlp"),
         UP_BLOCK: ("norm1", "norm2", "conv1", "conv2", "updown", "pred_subdiv")}


class Unsupported(Exception):
    """A precondition of the lean decode fails; the message is the ``cause``."""


class LeanDecoder:
    """What :func:`chunk_decoder` returns (in a list): ``remove()`` restores the port's
    class ``forward`` exactly (safe twice). ``saved`` / ``event``: the first pass's figures."""

    def __init__(self, decoder, name: str, budget: int, sink, stage):
        self.decoder, self.name, self.budget = decoder, name, budget
        self.sink, self.stage = sink, stage
        self.event: Optional[dict] = None
        self.said: set = set()
        self._base = self._original = self._patch = None

    def install(self, base: type) -> None:
        self._base, self._original = base, vars(base)["forward"]
        original, decoder = self._original, self.decoder

        def forward(this, *args, **kwargs):
            if this is decoder and not this.training and self._base is not None:
                return self.forward(original, *args, **kwargs)
            return original(this, *args, **kwargs)

        forward.__doc__ = original.__doc__
        self._patch = forward
        base.forward = forward

    def remove(self) -> None:
        """Off: the class's forward restored when this patch is the outermost (remove stacked
        ones in reverse order to restore it exactly); else this patch passes every call on."""
        if self._base is not None:
            if vars(self._base).get("forward") is self._patch:
                self._base.forward = self._original
            self._base = None

    def _where(self):
        return self.stage() if callable(self.stage) else self.stage

    def warn(self, key, cause: str) -> None:
        if key not in self.said:
            self.said.add(key)
            _warn(self.sink, self.name, cause)

    def forward(self, original: Callable, x, guide_subs=None, return_subs: bool = False):
        """The port's ``SparseUnetVaeDecoder.forward`` (eval), by voxel ranges."""
        d = self.decoder
        if (guide_subs is not None and d.pred_subdiv) or (return_subs and not d.pred_subdiv) \
                or (guide_subs is None and not d.pred_subdiv):
            return original(d, x, guide_subs=guide_subs, return_subs=return_subs)
        saved = [0]
        h = d.from_latent(x).type(d.dtype)
        subs, fused = [], False
        levels = len(d.blocks)
        for i, res in enumerate(d.blocks):
            for j, block in enumerate(res):
                if i < levels - 1 and j == len(res) - 1:
                    fused = i == levels - 2 and len(d.blocks[-1]) == 0
                    guide = None if d.pred_subdiv else guide_subs[i]
                    final = rows_mod.tail(d, x.dtype) if fused else None
                    box = [h]
                    del h  # the up block drops its input once the fine level exists
                    h, sub = self._up(block, f"blocks.{i}.{j}", box, guide, final, saved)
                    if d.pred_subdiv:
                        subs.append(sub)
                else:
                    h = self._block(block, f"blocks.{i}.{j}", h, saved)
        if not fused:
            saved[0] = max(saved[0], h.feats.shape[0] * h.feats.shape[1] * 8)
            h = rows_mod.map_rows(rows_mod.tail(d, x.dtype), h,
                                  block_rows(self.budget, h.feats.shape[1], 8))
        self._report(saved[0])
        return (h, subs) if return_subs else h

    def _block(self, block, path: str, h, saved: list):
        kind = type(block).__name__
        if kind != CONV_BLOCK or not _has(block, ATTRS[CONV_BLOCK]):
            self.warn(("block", kind), f"{path} is a {kind}, which lean does not "
                                       f"compute by rows: it runs the port's way")
            return block(h)
        width = block.conv.weight.shape[0]
        saved[0] = max(saved[0], h.feats.shape[0] * 4 * width * h.feats.element_size() * 2)
        return rows_mod.convnext_rows(block, h, block_rows(self.budget, width, 28))

    def _up(self, block, path: str, box: list, guide, final, saved: list):
        kind = type(block).__name__
        if kind != UP_BLOCK or not _has(block, ATTRS[UP_BLOCK]):
            self.warn(("block", kind), f"{path} is a {kind}, which lean does not "
                                       f"compute by rows: it runs the port's way")
            return self._port_up(block, box.pop(), guide, final)
        width = block.conv1.weight.shape[0]
        feats = box[0].feats
        saved[0] = max(saved[0], feats.shape[0] * width * feats.element_size())
        del feats
        try:
            return rows_mod.up_rows(block, box, guide, block_rows(self.budget, width, 9),
                                    final=final)
        except rows_mod.OrderMismatch as exc:
            self.warn(("order", path), f"{path}: the port's channel-to-space "
                                       f"orders the children otherwise ({exc}): the port's "
                                       f"block runs")
            return self._port_up(block, box.pop(), guide, final)

    def _port_up(self, block, h, guide, final):
        """The port's up block (as the port's forward calls it), then ``final`` by rows."""
        h, sub = block(h) if self.decoder.pred_subdiv else (block(h, subdiv=guide), None)
        if final is not None:
            h = rows_mod.map_rows(final, h, block_rows(self.budget, h.feats.shape[1], 8))
        return h, sub

    def _report(self, saved: int) -> None:
        if self.event is not None:
            return
        rows = block_rows(self.budget, 1, 28)
        self.event = emit(self.sink, "working_memory", stage=self._where(), target=self.name,
                          tool="decoder_rows", chunk=rows, bytes_saved=int(saved),
                          note=None) or {}


def block_rows(budget: int, width: int, factor: int) -> int:
    """Rows per range so a range's temporaries, about ``factor × width`` bytes a row plus the
    neighbour search's 27 × 17 bytes, fit ``budget`` (capped at :data:`DECODER_BUDGET`); a
    multiple of 64, at least 64."""
    per_row = factor * max(int(width), 1) + 27 * 17
    rows = min(int(budget), DECODER_BUDGET) // per_row
    return max(64, rows // 64 * 64)


def budget_for_rows(decoder, rows: int) -> int:
    """The budget under which no block of ``decoder`` takes more than ``rows`` rows a range
    (at least 64: :func:`block_rows`' floor), from its widths and the factors the lean forward
    uses."""
    per_row = [28 * m.conv.weight.shape[0] for m in decoder.modules()
               if type(m).__name__ == CONV_BLOCK and hasattr(m, "conv")]
    per_row += [9 * m.conv1.weight.shape[0] for m in decoder.modules()
                if type(m).__name__ == UP_BLOCK and hasattr(m, "conv1")]
    return int(rows) * (min(per_row + [8]) + 27 * 17)


def _has(obj, names) -> bool:
    return all(hasattr(obj, n) for n in names)


def _warn(sink, name: str, cause: str) -> None:
    warn_whole(sink, name, f"{name}: {cause}")


def warn_whole(sink, name: str, cause: str) -> None:
    """The ``warning`` (``fallback: port_decoder``, ``cause`` as given) of a decoder that lean
    leaves to the port: it decodes in one piece, with the port's working memory."""
    emit(sink, "warning", source=SOURCE, fallback="port_decoder", cause=cause,
         message=f"--working-memory lean: {name} decodes the port's way, in one piece, with its "
                 f"working memory ({cause})",
         differs="nothing in the output: the port's own decode runs")


def chunk_decoder(decoder, name: str, budget_bytes: int, *, sink: Optional[EventSink] = None,
                  stage=None) -> list:
    """Install the lean decode on ``decoder`` (see the module docstring); returns the handles
    to ``remove()`` (one :class:`LeanDecoder`, or none when a precondition fails — then a
    ``warning`` names the cause and the port's forward runs). ``budget_bytes``: bytes a range's
    temporaries may hold (capped at :data:`DECODER_BUDGET`)."""
    try:
        base = check(decoder)
    except Unsupported as exc:
        _warn(sink, name, str(exc))
        return []
    handle = LeanDecoder(decoder, name, int(budget_bytes), sink, stage)
    handle.install(base)
    return [handle]


def check(decoder) -> type:
    """The port's decoder class whose ``forward`` lean replaces, after the install-time
    preconditions; raises :class:`Unsupported` with the cause."""
    try:
        # the port's modules by their names: the port is on sys.path only at run time
        config, sparse = (importlib.import_module(n) for n in (CONFIG_MODULE, SPARSE_MODULE))
    except ImportError as exc:
        raise Unsupported(f"the port's {exc.name or CONFIG_MODULE} cannot be imported") from exc
    backend = getattr(config, "CONV", None)
    if backend != "none":
        raise Unsupported(f"config.CONV is {backend!r}: that back end's kernel builds its own "
                          f"neighbour map and output, which lean does not reproduce")
    base = next((c for c in type(decoder).__mro__ if c.__name__ == BASE_CLASS
                 and "forward" in vars(c)), None)
    if base is None:
        raise Unsupported(f"{type(decoder).__name__} is not a {BASE_CLASS}")
    missing = [a for a in ("from_latent", "blocks", "output_layer", "dtype", "pred_subdiv")
               if not hasattr(decoder, a)]
    if missing or not isinstance(getattr(decoder, "output_layer", None), torch.nn.Linear):
        raise Unsupported(f"the decoder lacks {missing or ['a Linear output_layer']}")
    probe(decoder, getattr(sparse, "SparseTensor", None))
    return base


def probe(decoder, tensor_cls) -> None:
    """Raise :class:`Unsupported` unless lean's convolution rows and skip connection give the
    port's values bit for bit on a few voxels (the decoder's smallest ``SparseConv3d``, its
    first up block's ``skip_connection``)."""
    if tensor_cls is None:
        raise Unsupported(f"{SPARSE_MODULE} has no SparseTensor")
    convs = [(p, m) for p, m in decoder.named_modules() if type(m).__name__ == "SparseConv3d"
             and isinstance(getattr(m, "weight", None), torch.Tensor) and m.weight.dim() == 5]
    if not convs:
        raise Unsupported("it has no SparseConv3d with a [Co, Kd, Kh, Kw, Ci] weight")
    path, conv = min(convs, key=lambda c: c[1].weight.numel())
    with torch.no_grad():
        x = _probe_tensor(tensor_cls, conv.weight.shape[-1], conv.weight)
        port = conv(x).feats
        index = conv_index(x, conv)
        n = x.feats.shape[0]
        mine = torch.cat([conv_rows(conv, x.feats, x.coords, index, 0, n // 2),
                          conv_rows(conv, x.feats, x.coords, index, n // 2, n)])
        if mine.shape != port.shape or not torch.equal(mine, port):
            raise Unsupported(f"a probe of {path} by rows differs from the port's convolution")
        up = next((m for m in decoder.modules() if type(m).__name__ == UP_BLOCK), None)
        if up is not None and hasattr(up, "skip_connection"):
            width = up.conv1.weight.shape[-1] // 8
            t = _probe_tensor(tensor_cls, width, up.conv2.weight)
            repeat = up.conv2.weight.shape[0] // width
            if not torch.equal(up.skip_connection(t).feats,
                               t.feats.repeat_interleave(repeat, dim=1)):
                raise Unsupported("its up blocks' skip connection is not a repeat_interleave "
                                  "of the channels")


def _probe_tensor(tensor_cls, channels: int, like: torch.Tensor):
    """A sparse tensor of 40 voxels of a 4³ box (a fixed pattern), seeded features."""
    r = torch.arange(4)
    xyz = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3)
    xyz = xyz[(xyz.sum(1) * 7 + xyz[:, 0]) % 8 < 5][:40].int()
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz], 1)
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(len(xyz), channels, generator=gen).to(like.dtype)
    return tensor_cls(feats=feats.to(like.device), coords=coords.to(like.device))
