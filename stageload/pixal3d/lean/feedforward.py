"""Pixal3D, lean flow feed-forward: each transformer block's MLP over token ranges.

Every block of the flow DiTs ends in a feed-forward net — the sparse flows' (shape, texture)
``SparseFeedForwardNet`` (``pixal3d.modules.sparse.transformer.blocks``) and the structure
flow's dense ``FeedForwardNet`` (``pixal3d.modules.transformer.blocks``), TRELLIS.2's classes:
``mlp = Sequential(Linear(C, H), GELU(approximate="tanh"), Linear(H, C))`` over every token's
row (the sparse one on a sparse tensor's ``feats``, each layer calling its ``torch.nn`` base
class's ``forward`` there). At the released widths H = 8,192 (C = 1,536, MLP ratio 5.3334) in
bf16, so the port holds the hidden rows and their GELU together: 2 × N × 8,192 × 2 bytes,
0.70 GB at N = 21,500 tokens (a character at 1024: the texture and ``shape_1024`` flows).

:func:`lean_feedforward` replaces the ``forward`` of both classes (found by those module and
class names, so every instance the port builds is covered) by the same three layers run over
ranges of ``rows`` tokens into one preallocated output: each range through the first
``Linear``'s, the ``GELU``'s and the second ``Linear``'s own ``torch.nn`` ``forward`` (the call
the port's layers make on the whole ``feats``), so the hidden rows exist for one range only.
Each row's arithmetic does not depend on the other rows; a short last range is computed as the
last full range (overlapping the one before), so every matrix product has the same row count
and takes the same kernel. Measured on this CPU (torch 2.13, MKL/oneDNN): the port's output
bit for bit in bf16 (the released flows' dtype) at the tests' widths
(``tests/pixal3d/test_lean_feedforward.py``) and at the released widths in ranges of 2,048
(``bench.pixal3d.flow_steps``: one step at 21,500 and 4,000 tokens, same sha256); in fp32
identical at the tests' widths and at the released widths in ranges of 2,048. A matrix
product picks its kernel by row count, so much smaller ranges can round differently (released
widths: 64-row ranges in bf16 and 1,024-row ranges in fp32 differed by ≤ 5e-7, measured); on
MPS likewise (not run here, no Mac).

``rows`` per call from the budget (:func:`rows_for_budget`): the hidden rows and their GELU of
one range within ``min(budget_bytes, FEEDFORWARD_BUDGET)`` — 2,048 tokens at H = 8,192 in bf16
(64 MiB). A matrix product of 2,048 × 1,536 rows keeps the CPU's kernels busy, so a larger
range buys no speed, only memory.

Said, never silent (``working_memory`` events through ``sink``, one per class and reason): at
the first call that runs in ranges, ``chunk`` (rows) and ``bytes_saved`` = the hidden rows and
their GELU the port would hold beyond one range ((N − rows) × H × element size × 2); an input
that fits one range, nothing saved; a port without one of the classes, nothing saved at
install. A net whose layers are not ``Linear``, ``GELU``, ``Linear`` runs the port's own way,
said in a ``warning`` (``fallback: port_feedforward``; the output is the port's either way).
Training mode runs the port's forward (chunking saves nothing while autograd keeps each range).
Hand-written: the loop is a few lines over someone else's classes, which no library hooks.
"""
from __future__ import annotations

import importlib
from typing import Callable, Optional

import torch

from stageload.errors import WorkingMemoryError
from stageload.events import EventSink, emit

CLASSES = (("pixal3d.modules.sparse.transformer.blocks", "SparseFeedForwardNet"),
           ("pixal3d.modules.transformer.blocks", "FeedForwardNet"))
"""(module, class) of the port's feed-forward nets: sparse (shape, texture), dense (structure)."""
FEEDFORWARD_BUDGET = 64 << 20
"""At most this many bytes of one range's hidden rows and their GELU (a budget given is capped
to it): 2,048 tokens at the released widths."""
LIVE_COPIES = 2
"""Hidden-width rows alive at once in the port's forward: the first Linear's output and its GELU."""
ROW_MULTIPLE = 64
TARGET = "flow_models.feedforward"
"""``target`` of this tool's events (the class name follows after a colon)."""
TOOL = "feedforward_rows"
SOURCE = "stageload.pixal3d.lean.feedforward (--working-memory lean)"


def rows_for_budget(budget_bytes: int, hidden: int, element_size: int) -> int:
    """Tokens per range so that one range's hidden rows and their GELU (``LIVE_COPIES`` rows of
    ``hidden`` values of ``element_size`` bytes per token) fit ``min(budget_bytes,
    FEEDFORWARD_BUDGET)``, rounded down to a multiple of 64 when that leaves one. Example: 1 GiB,
    H = 8,192, bf16 → 2,048. Raises ``WorkingMemoryError`` when not even one token fits or an
    argument is not a positive whole number."""
    for name, value in (("budget_bytes", budget_bytes), ("hidden", hidden),
                        ("element_size", element_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkingMemoryError(f"{name} must be a whole number ≥ 1, got {value!r}")
    per_row = hidden * element_size * LIVE_COPIES
    rows = min(budget_bytes, FEEDFORWARD_BUDGET) // per_row
    if rows < 1:
        raise WorkingMemoryError(f"a working-memory budget of {budget_bytes:,} bytes holds not "
                                 f"one token's feed-forward rows ({per_row:,} bytes): give at "
                                 f"least that much")
    return rows - rows % ROW_MULTIPLE if rows >= ROW_MULTIPLE else rows


def feedforward_rows(layers: tuple, feats: torch.Tensor, rows: int) -> torch.Tensor:
    """``layers`` = (Linear, GELU, Linear) applied to ``feats`` ``[N, C]`` over ranges of
    ``rows`` rows (a short tail computed as the last ``rows`` rows), through each layer's
    ``torch.nn`` base-class ``forward``; returns ``[N, C_out]`` in the layers' dtype. ``rows ≥
    N``: one call over all of it."""
    first, act, second = layers

    def run(piece: torch.Tensor) -> torch.Tensor:
        piece = torch.nn.Linear.forward(first, piece)
        return torch.nn.Linear.forward(second, torch.nn.GELU.forward(act, piece))

    total = feats.shape[0]
    if rows >= total:
        return run(feats)
    out: Optional[torch.Tensor] = None
    for start in range(0, total, rows):
        begin = min(start, total - rows)
        piece = run(feats[begin:begin + rows])
        if out is None:
            out = piece.new_empty((total,) + tuple(piece.shape[1:]))
        out[start:begin + rows] = piece[start - begin:]
        del piece
    return out


def net_layers(net) -> Optional[tuple]:
    """The (Linear, GELU, Linear) of a port feed-forward net's ``mlp``, or None when it holds
    anything else (then lean does not know its arithmetic)."""
    mlp = getattr(net, "mlp", None)
    layers = tuple(mlp) if isinstance(mlp, torch.nn.Sequential) else ()
    kinds = (torch.nn.Linear, torch.nn.GELU, torch.nn.Linear)
    if len(layers) != 3 or not all(isinstance(m, k) for m, k in zip(layers, kinds, strict=True)):
        return None
    return layers


class LeanFeedForward:
    """What :func:`lean_feedforward` returns: ``remove()`` restores each class's ``forward``
    exactly (safe twice). ``classes``: the classes patched; ``events``: the ``working_memory``
    events sent so far."""

    def __init__(self, budget: int, sink: Optional[EventSink],
                 stage: Optional[Callable[[], Optional[str]]]):
        self.budget, self.sink, self.stage = budget, sink, stage
        self.classes: list[type] = []
        self.events: list[dict] = []
        self._patches: list[tuple[type, Callable, Callable]] = []
        self._said: set = set()

    def patch(self, cls: type) -> None:
        original = vars(cls)["forward"]
        tool = self

        def forward(this, x, *args, **kwargs):
            if args or kwargs or this.training:
                return original(this, x, *args, **kwargs)
            return tool.forward(cls, original, this, x)

        forward.__doc__ = original.__doc__
        cls.forward = forward
        self.classes.append(cls)
        self._patches.append((cls, original, forward))

    def remove(self) -> None:
        """Off: each class's forward restored where this patch is the outermost (else it passes
        every call on to the port's)."""
        for cls, original, patch in reversed(self._patches):
            if vars(cls).get("forward") is patch:
                cls.forward = original
        self._patches = []

    def forward(self, cls: type, original: Callable, net, x):
        """``net``'s forward on ``x`` (a sparse tensor, or a dense ``[..., C]`` tensor) by token
        ranges; the port's own ``original`` where lean does not know the net or the input."""
        if not any(vars(c).get("forward") is p for c, _, p in self._patches if c is cls):
            return original(net, x)  # removed while an outer patch still calls us
        layers = net_layers(net)
        sparse = hasattr(x, "feats") and hasattr(x, "replace")
        feats = x.feats if sparse else x
        if layers is None or not isinstance(feats, torch.Tensor) or feats.dim() < 2:
            self._warn(cls, "its mlp is not Linear, GELU, Linear" if layers is None
                       else "its input is not a tensor of token rows")
            return original(net, x)
        hidden = layers[0].out_features
        rows = rows_for_budget(self.budget, hidden, layers[0].weight.element_size())
        flat = feats.reshape(-1, feats.shape[-1])
        total = flat.shape[0]
        if total <= rows:
            self._say(cls, ("fits",), rows, 0, f"{total} tokens fit one range of {rows}")
            return original(net, x)
        out = feedforward_rows(layers, flat, rows)
        saved = (total - rows) * hidden * layers[0].weight.element_size() * LIVE_COPIES
        self._say(cls, ("ranges",), rows, saved, None)
        out = out.reshape(*feats.shape[:-1], out.shape[-1])
        return x.replace(out) if sparse else out

    def _where(self) -> Optional[str]:
        return self.stage() if callable(self.stage) else None

    def _say(self, cls: type, key: tuple, chunk: Optional[int], saved: int,
             note: Optional[str]) -> None:
        if (cls, key) in self._said:
            return
        self._said.add((cls, key))
        event = {"stage": self._where(), "target": f"{TARGET}:{cls.__name__}", "tool": TOOL,
                 "chunk": chunk, "bytes_saved": int(saved), "note": note}
        self.events.append(event)
        emit(self.sink, "working_memory", **event)

    def _warn(self, cls: type, cause: str) -> None:
        if (cls, "warn", cause) in self._said:
            return
        self._said.add((cls, "warn", cause))
        emit(self.sink, "warning", source=SOURCE, fallback="port_feedforward", cause=cause,
             message=f"--working-memory lean: a {cls.__name__} runs the port's own way, its "
                     f"hidden rows whole ({cause})",
             differs="nothing in the output: the port's own feed-forward runs, with its "
                     "working memory")


def lean_feedforward(budget_bytes: int, *, sink: Optional[EventSink] = None,
                     stage: Optional[Callable[[], Optional[str]]] = None) -> LeanFeedForward:
    """Patch the port's feed-forward classes (:data:`CLASSES`, imported by name from the port
    on ``sys.path``) to run by token ranges sized from ``budget_bytes`` (bytes of one range's
    hidden rows; capped to :data:`FEEDFORWARD_BUDGET`); returns the :class:`LeanFeedForward`
    handle (``remove()`` restores them). A class the port lacks: a ``working_memory`` event
    with nothing saved, saying so. Raises ``WorkingMemoryError`` for a budget below one
    byte. Used by :func:`stageload.pixal3d.lean.models.install` and the benchmark."""
    rows_for_budget(budget_bytes, 1, 1)
    tool = LeanFeedForward(budget_bytes, sink, stage)
    for module_name, class_name in CLASSES:
        try:  # the port's modules by their names, which are settings (a test adds a missing one)
            cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            cls = None
        if not isinstance(cls, type) or "forward" not in vars(cls):
            event = {"stage": tool._where(), "target": f"{TARGET}:{class_name}", "tool": TOOL,
                     "chunk": None, "bytes_saved": 0,
                     "note": f"the port has no {module_name}.{class_name}: nothing to chunk"}
            tool.events.append(event)
            emit(sink, "working_memory", **event)
            continue
        tool.patch(cls)
    return tool
