"""The sparse U-Net decoders' blocks computed in ranges of voxels (the lean decode).

The decoders Pixal3D runs (TRELLIS.2's ``SparseUnetVaeDecoder`` and its subclass
``FlexiDualGridVaeDecoder``, configs ``{shape,tex}_vae_next_dc_f16c32_fp16_ft_512.json``):
``from_latent``, per level ``SparseConvNeXtBlock3d``s (3³ conv → ``LayerNorm32`` → MLP C → 4C
→ C, + input), between levels a ``SparseResBlockC2S3d`` (``norm1`` → SiLU → ``conv1`` to 8C'
at the coarse level → channel-to-space ×2 keeping the children the subdivision marks →
``norm2`` → SiLU → ``conv2`` at the fine level → + the input moved to space and
``repeat_interleave``'d), then fp32, ``F.layer_norm`` and ``output_layer`` over every fine voxel.
At 1024 the last up block takes ~1.4 M voxels × 128 channels to ~5.5 M × 64 and the level
after it has no ConvNeXt block: the port's peak is there (its 8C' conv output, the fine
level's fp32 norms and neighbour map, the final norm in fp32 — bench/pixal3d/decode_memory.py).

Every one of those steps is per voxel (norms, activations, linear layers, channel-to-space: a
child's channels are a slice of its parent's) or, for the sparse convolutions, per output row
given the neighbours (:mod:`.rowconv`). So each block here runs over ranges of ``rows`` voxels
into one output: ConvNeXt rows (conv rows → norm → MLP → + input), the up block in two passes
(coarse ranges: conv1 rows over ``silu(norm1(·))`` of the rows they read → children → norm2 →
SiLU into the fine level's conv2 input, the one fine tensor held whole; then fine ranges:
conv2 rows + skip), and the last up block fused with the final norm and output layer where
the finest level has no block, so its 64-channel output never exists whole. The arithmetic is
the port's, row by row, in the port's dtypes (fp16 torso, fp32 norms and tail); the port's own
channel-to-space makes the fine coordinates, and the order lean assumes for the children is
checked against it at every call.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from stageload.pixal3d.lean.rowconv import conv_index, conv_rows


class OrderMismatch(RuntimeError):
    """The port's channel-to-space put the children in another order than lean assumes."""


def ranges(total: int, rows: int):
    """``(start, stop)`` pairs covering ``[0, total)`` in steps of ``rows``."""
    for start in range(0, total, rows):
        yield start, min(total, start + rows)


def convnext_rows(block, x, rows: int):
    """``SparseConvNeXtBlock3d`` ``block`` on sparse tensor ``x`` [N, C], ``rows`` voxels at a
    time: ``x.replace(out)`` with ``out`` [N, C] in ``x``'s dtype, the port's values."""
    feats = x.feats
    out = torch.empty_like(feats)
    index = conv_index(x, block.conv)
    for start, stop in ranges(feats.shape[0], rows):
        h = conv_rows(block.conv, feats, x.coords, index, start, stop)
        h = block.mlp(block.norm(h))
        out[start:stop] = h + feats[start:stop]
        del h
    return x.replace(out)


def children(feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Channel-to-space ×2 of rows ``feats`` [n, 8·c] under ``mask`` bool [n, 8]: the kept
    children [m, c], parent by parent, children ascending; child ``s`` takes channels
    ``[s·c, (s+1)·c)`` of its parent (the port's ``SparseChannel2Spatial``)."""
    return feats.reshape(-1, feats.shape[1] // 8)[mask.reshape(-1)]


def check_order(x_feats: torch.Tensor, up_feats: torch.Tensor, mask: torch.Tensor,
                ends: torch.Tensor, rows: int) -> None:
    """Raise :class:`OrderMismatch` unless the port's channel-to-space of ``x_feats``
    (``up_feats``) is :func:`children`'s, range by range (no whole copy made)."""
    expected = int(ends[-1]) if len(ends) else 0
    if up_feats.shape[0] != expected:
        raise OrderMismatch(f"{up_feats.shape[0]} children where the subdivision marks "
                            f"{expected}")
    for start, stop in ranges(x_feats.shape[0], rows):
        lo = int(ends[start - 1]) if start else 0
        mine = children(x_feats[start:stop], mask[start:stop])
        if not torch.equal(mine, up_feats[lo:int(ends[stop - 1])]):
            raise OrderMismatch(f"the children of voxels {start}–{stop} differ")


def up_rows(block, box: list, subdiv, rows: int,
            final: Optional[Callable[[torch.Tensor], torch.Tensor]] = None):
    """``SparseResBlockC2S3d`` ``block`` on the sparse tensor in ``box`` (a one-item list, so
    the caller's reference is given up: its features are dropped once the fine level's conv2
    input exists). ``subdiv``: the guide (sparse [N, 8] logits) when the block does not predict
    its own. Returns ``(h, subdiv)`` as the port's block does (``subdiv`` None for a guided
    block); with ``final`` (a per-row function: the decoder's fp32 norm and output layer), ``h``
    holds ``final`` of the block's output rows instead of the rows themselves.
    Raises :class:`OrderMismatch` before anything is computed when the port's children are in
    another order (the caller then runs the port's block)."""
    x = box.pop()
    if block.pred_subdiv:
        subdiv = block.to_subdiv(x)
    mask = subdiv.feats > 0
    up = block.updown(x, subdiv.replace(mask))  # the port's own: fine coords, scale, cache
    ends = mask.sum(dim=1).cumsum(0)
    try:
        check_order(x.feats, up.feats, mask, ends, rows)
    except OrderMismatch:
        box.append(x)
        raise
    fine = _fine_input(block, x, mask, ends, up, rows)
    del x
    out = _fine_rows(block, fine, up, rows, final)
    return (out, subdiv) if block.pred_subdiv else (out, None)


def _fine_input(block, x, mask: torch.Tensor, ends: torch.Tensor, up, rows: int):
    """conv2's input ``silu(norm2(children(conv1(silu(norm1(x))))))`` [M, C'] fp16, filled
    coarse range by coarse range; the only fine tensor the block holds whole."""
    width = block.conv1.weight.shape[0] // 8
    h2 = x.feats.new_empty((up.feats.shape[0], width))
    index = conv_index(x, block.conv1)

    def pre(r: torch.Tensor) -> torch.Tensor:
        return F.silu(block.norm1(r))

    for start, stop in ranges(x.feats.shape[0], rows):
        lo = int(ends[start - 1]) if start else 0
        h = conv_rows(block.conv1, x.feats, x.coords, index, start, stop, pre=pre)
        h = children(h, mask[start:stop])
        h2[lo:int(ends[stop - 1])] = F.silu(block.norm2(h))
        del h
    return up.replace(h2)


def _fine_rows(block, fine, up, rows: int, final):
    """conv2 rows + the skip, range by range, into the block's output (or ``final``'s)."""
    repeat = block.conv2.weight.shape[0] // up.feats.shape[1]
    index = conv_index(fine, block.conv2)
    out = None
    for start, stop in ranges(fine.feats.shape[0], rows):
        h = conv_rows(block.conv2, fine.feats, fine.coords, index, start, stop)
        h = h + up.feats[start:stop].repeat_interleave(repeat, dim=1)
        if final is not None:
            h = final(h)
        if out is None:
            out = h.new_empty((fine.feats.shape[0], h.shape[1]))
        out[start:stop] = h
        del h
    if out is None:
        width = block.conv2.weight.shape[0]
        out = fine.feats.new_empty((0, width))
        if final is not None:
            out = final(out)
    return fine.replace(out)


def tail(decoder, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """The decoder's last rows as a per-row function: to ``dtype`` (the latent's), then
    ``F.layer_norm`` over the channels (no affine, default eps) and ``output_layer`` (an
    ``nn.Linear``)."""
    layer = decoder.output_layer

    def rows(h: torch.Tensor) -> torch.Tensor:
        h = h.type(dtype)
        h = F.layer_norm(h, h.shape[-1:])
        return F.linear(h, layer.weight, layer.bias)

    return rows


def map_rows(fn: Callable[[torch.Tensor], torch.Tensor], h, rows: int):
    """Per-row function ``fn`` over sparse tensor ``h``'s rows, ``rows`` at a time, into one
    output: ``h.replace(out)``."""
    out = None
    for start, stop in ranges(h.feats.shape[0], rows):
        piece = fn(h.feats[start:stop])
        if out is None:
            out = piece.new_empty((h.feats.shape[0], piece.shape[1]))
        out[start:stop] = piece
        del piece
    if out is None:
        out = fn(h.feats[:0])
    return h.replace(out)
