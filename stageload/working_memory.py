"""Working memory: run a layer over chunks of its input instead of all of it at once.

A stage's peak is its weights plus what its forward holds alive (SPEC §1: activations, not only
weights, make peaks). Two tools from OnnxStream's playbook (attention slicing, tiled decoding),
installed on one existing object and taken off again like :func:`stageload.on_call` (they are
:func:`stageload.hooks.around_call` hooks, so they stack with other hooks the same way):

- :func:`chunk_rows` — a per-row layer (LayerNorm, a Linear/MLP stack: every output row depends
  on its input row alone) runs over ``rows`` rows of its input at a time and writes into ONE
  preallocated output, so the transients of the forward (an MLP's hidden rows) exist for one
  chunk only.
- :func:`slice_attention` — an attention function ``(q, k, v, ...) -> out`` runs over slices of
  ``queries`` queries, so its ``[..., queries, keys]`` score matrices exist for one slice only;
  :func:`query_chunk_for_budget` sizes the slice from a byte budget.

Each installed tool reports what it changed in ONE ``working_memory`` event, sent to ``sink`` at
its first call (sizes are known only then): ``stage`` (str or None), ``target`` (what was
changed), ``tool`` (``"chunk_rows"`` / ``"slice_attention"``), ``chunk`` (rows or queries per
chunk), ``bytes_saved`` (an estimate, bytes; how it is estimated is said per tool) and ``note``
(None, or why nothing was saved).

Exactness, measured on this project's Linux CPU (torch 2.13, fp32, no autograd;
``tests/stageload/test_working_memory.py`` checks it): with chunks of 8 rows or queries and
more, LayerNorm, a Linear → SiLU → Linear MLP, matmul → softmax → matmul attention and
``torch.nn.functional.scaled_dot_product_attention`` are bit-identical to the unchunked call
(each row's arithmetic does not depend on the other rows, and a short tail is computed as a
full chunk that overlaps the one before). With chunks of 1–7 rows the matrix product takes
another kernel: max |Δ| ≤ 2e-6 on outputs of order 1 (measured; the tests allow 1e-5 × max
|output|). On other back ends (MPS, CUDA) a matrix product may also pick a different
kernel for a different row count; there the bound is fp32 rounding, not measured here (no GPU,
no Mac).

Hand-written: the chunk loop is a few lines, and the libraries that chunk (``accelerate``'s
``find_executable_batch_size``, diffusers' ``enable_attention_slicing``) work on whole pipelines
of their own, not on one layer of someone else's model.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch

from .errors import WorkingMemoryError
from .events import EventSink, emit
from .hooks import CallHook, around_call

#: a stage name, None, or a zero-argument callable giving the current one when the event is sent
StageLike = Union[str, None, Callable[[], Optional[str]]]


class WorkingMemoryHandle:
    """What :func:`chunk_rows` and :func:`slice_attention` return. ``remove()`` takes the tool
    off (restores the attribute exactly as :class:`stageload.CallHook` does; safe twice); also a
    context manager. Attributes: ``target``, ``tool``, ``chunk``, ``calls`` (chunked calls
    run), ``event`` (the ``working_memory`` event sent, or None before the first call)."""

    def __init__(self, target: str, tool: str, chunk: Optional[int], sink: Optional[EventSink],
                 stage: StageLike):
        self.target = target
        self.tool = tool
        self.chunk = chunk
        self.calls = 0
        self.event: Optional[dict] = None
        self._sink = sink
        self._stage = stage
        self._hook: Optional[CallHook] = None

    @property
    def active(self) -> bool:
        return self._hook is not None and self._hook.active

    def remove(self) -> None:
        if self._hook is not None:
            self._hook.remove()

    def __enter__(self) -> "WorkingMemoryHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def _report(self, bytes_saved: int, note: Optional[str]) -> None:
        if self.event is not None:
            return
        stage = self._stage() if callable(self._stage) else self._stage
        self.event = {"stage": stage, "target": self.target, "tool": self.tool,
                      "chunk": self.chunk, "bytes_saved": max(0, int(bytes_saved)), "note": note}
        emit(self._sink, "working_memory", **self.event)

    def __repr__(self) -> str:
        state = "active" if self.active else "removed"
        return f"<{self.tool} {self.target} chunk={self.chunk} {state}>"


def _check_chunk(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkingMemoryError(f"{what} must be a whole number ≥ 1, got {value!r}")
    return value


def chunk_rows(module: torch.nn.Module, rows: int, *, sink: Optional[EventSink] = None,
               stage: StageLike = None, target: Optional[str] = None) -> WorkingMemoryHandle:
    """Run ``module``'s forward over ``rows`` rows of its input at a time, into one output.

    The input ``x`` (first argument, shape ``[..., C]``) is seen as ``[R, C]`` rows (leading
    dims flattened, a view when ``x`` is contiguous); the forward runs on ``[rows, C]`` slices
    (a short tail is computed as the last ``rows`` rows, overlapping the slice before, so every
    call has the same row count), each result is copied into one output allocated after the
    first chunk, reshaped back to ``[..., C_out]``. Other arguments are passed unchanged to
    every chunk. Only for per-row layers (LayerNorm, Linear/MLP stacks): a chunk whose output
    has a different number of rows raises. Hooks installed on ``forward`` before this one see
    each chunk; hooks installed after see the whole call. An input of at most ``rows`` rows,
    or a non-tensor input, runs unchunked.

    ``bytes_saved`` (in the one ``working_memory`` event, sent at the first call) is measured
    on the first chunk: the bytes per row of every leaf sub-module's output except the last
    one's (the hidden activations the forward holds), times the rows not in that chunk. A
    module without sub-modules (e.g. a LayerNorm) reports 0 with a note: chunking it saves only
    its per-row statistics (and an fp32 copy when its input is half precision).

    Returns a :class:`WorkingMemoryHandle`. Raises :class:`stageload.errors.WorkingMemoryError`
    for ``rows`` that is not a whole number ≥ 1, ``HookError`` when ``module`` has no
    ``forward`` to hook.
    """
    rows = _check_chunk(rows, "rows")
    handle = WorkingMemoryHandle(target or type(module).__name__, "chunk_rows", rows, sink,
                                 stage)

    def around(call: Callable, x: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            handle._report(0, "input is not a tensor of rows: ran unchunked")
            return call(x, *args, **kwargs)
        total = x.shape[:-1].numel()
        if total <= rows:
            handle._report(0, f"{total} rows fit in one chunk")
            return call(x, *args, **kwargs)
        handle.calls += 1
        flat = x.reshape(total, x.shape[-1])
        first, hidden_per_row = _first_chunk(module, call, flat[:rows], args, kwargs)
        out = first.new_empty((total,) + tuple(first.shape[1:]))
        out[:rows] = first
        del first
        for start in range(rows, total, rows):
            begin = _full_chunk(start, rows, total)
            piece = call(flat[begin:begin + rows], *args, **kwargs)
            _check_rows(piece, rows, handle.target)
            out[start:begin + rows] = piece[start - begin:]
            del piece
        note = None if hidden_per_row else "no hidden activations measured (a single layer)"
        handle._report(hidden_per_row * (total - rows), note)
        return out.reshape(tuple(x.shape[:-1]) + tuple(out.shape[1:]))

    handle._hook = around_call(module, "forward", around)
    return handle


def _full_chunk(start: int, size: int, total: int) -> int:
    """Where the chunk that covers ``[start, start + size)`` begins: ``start``, except for a
    short tail, which is computed as the last ``size`` rows (overlapping the chunk before) so
    every call sees the same row count. A matrix product picks its kernel by row count, and a
    tail of 1–7 rows would take another one and round differently (measured)."""
    return min(start, total - size)


def _first_chunk(module: torch.nn.Module, call: Callable, chunk: torch.Tensor, args: tuple,
                 kwargs: dict) -> tuple[torch.Tensor, int]:
    """Run the first chunk with forward hooks on the leaf sub-modules; return its output and
    the bytes per row their outputs held beyond the last one (the estimate's basis)."""
    sizes: list[int] = []

    def record(_module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            sizes.append(output.numel() * output.element_size())

    leaves = [m for m in module.modules() if m is not module and not any(m.children())]
    hooks = [leaf.register_forward_hook(record) for leaf in leaves]
    try:
        first = call(chunk, *args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    _check_rows(first, chunk.shape[0], type(module).__name__)
    hidden = sum(sizes[:-1]) if sizes else 0
    return first, hidden // max(1, chunk.shape[0])


def _check_rows(piece: Any, expected: int, target: str) -> None:
    if not isinstance(piece, torch.Tensor) or piece.dim() == 0 or piece.shape[0] != expected:
        shape = tuple(piece.shape) if isinstance(piece, torch.Tensor) else type(piece).__name__
        raise WorkingMemoryError(f"chunk_rows on {target}: {expected} input rows gave {shape}; "
                                 f"only a per-row layer (one output row per input row) can run "
                                 f"in row chunks — remove chunk_rows from this module")


def slice_attention(owner: Any, attr: str, queries: Union[int, Callable[[Any, Any], int]], *,
                    query_dim: int = -2, live_copies: int = 2, score_bytes: int = 4,
                    baseline_queries: Optional[int] = None, sink: Optional[EventSink] = None,
                    stage: StageLike = None, target: Optional[str] = None) -> WorkingMemoryHandle:
    """Run the attention function ``owner.attr(q, k, v, *rest, **kw)`` over slices of
    ``queries`` queries (OnnxStream's attention slicing), into one output.

    ``q`` is ``[..., L, E]``, ``k`` ``[..., S, E]``, ``v`` ``[..., S, Ev]`` (the layout of
    ``torch.nn.functional.scaled_dot_product_attention``; ``query_dim`` names the query axis
    of ``q`` and the key axis of ``k`` when it is not -2); the result ``[..., L, Ev]`` is
    allocated after the first slice and each slice's result copied in (a short tail is computed
    as the last ``queries`` queries, overlapping the slice before, so every call has the same
    size). ``attn_mask`` (keyword or the fourth positional argument) is sliced along the same
    axis when it spans ``L`` queries there. ``owner`` is any object with a ``__dict__`` (a
    module object, a model, a namespace): the attribute is replaced for that owner only, as
    :func:`stageload.on_call` does, so call sites that look it up on ``owner`` are sliced.

    ``bytes_saved`` (one ``working_memory`` event, at the first call):
    ``batch·heads × (min(L, baseline_queries) − queries) × S × score_bytes × live_copies`` —
    the score matrices no longer alive; ``baseline_queries`` is the slice the function already
    uses inside (None: all ``L``), ``live_copies`` how many ``[.., slice, S]`` matrices it
    holds at once (2 for a score matrix and its softmax).

    ``queries`` may also be a callable ``(q, k) -> int`` sizing each call's slice from its
    tensors (e.g. ``query_chunk_for_budget``); the event's ``chunk`` is then the first call's.

    Raises :class:`stageload.errors.WorkingMemoryError` for a ``queries``/``live_copies`` that
    is not a whole number ≥ 1 (a callable's answer is checked at each call), and at call time
    for ``is_causal=True`` (a causal mask depends on the query's position: pass an explicit
    ``attn_mask`` instead). ``HookError`` when ``owner.attr`` is not a callable that can be
    hooked.
    """
    sizer = queries if callable(queries) else None
    fixed = None if sizer is not None else _check_chunk(queries, "queries")
    _check_chunk(live_copies, "live_copies")
    handle = WorkingMemoryHandle(target or attr, "slice_attention", fixed, sink, stage)

    def around(call: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               *rest: Any, **kwargs: Any) -> Any:
        queries = fixed if sizer is None else _check_chunk(sizer(q, k), "queries")
        if handle.chunk is None:
            handle.chunk = queries
        if kwargs.get("is_causal"):  # a causal mask depends on each query's position
            raise WorkingMemoryError(f"slice_attention on {handle.target}: is_causal=True cannot "
                                     f"be sliced by queries; pass an explicit attn_mask")
        length = q.shape[query_dim]
        rows = q.numel() // max(1, length * q.shape[-1])  # batch × heads
        before = min(length, baseline_queries or length)
        saved = rows * max(0, before - queries) * k.shape[query_dim] * score_bytes * live_copies
        if length <= queries:
            handle._report(0, f"{length} queries fit in one slice")
            return call(q, k, v, *rest, **kwargs)
        handle.calls += 1
        out = _in_slices(call, q, k, v, rest, kwargs, query_dim, queries)
        handle._report(saved, None)
        return out

    handle._hook = around_call(owner, attr, around)
    return handle


def _in_slices(call: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rest: tuple,
               kwargs: dict, query_dim: int, queries: int) -> torch.Tensor:
    """``call(q, k, v, *rest, **kwargs)`` over slices of ``queries`` queries of ``q`` (a short
    tail computed as the last full slice), each slice's rows copied into one output."""
    length = q.shape[query_dim]
    out = None
    for start in range(0, length, queries):
        begin = _full_chunk(start, queries, length)
        args, kw = _slice_mask(rest, kwargs, query_dim, length, begin, queries)
        piece = call(q.narrow(query_dim, begin, queries), k, v, *args, **kw)
        if out is None:
            shape = list(piece.shape)
            shape[query_dim] = length
            out = piece.new_empty(shape)
        count = min(queries, length - start)
        out.narrow(query_dim, start, count).copy_(piece.narrow(query_dim, start - begin, count))
        del piece
    return out


def _slice_mask(rest: tuple, kwargs: dict, dim: int, length: int, start: int,
                count: int) -> tuple[tuple, dict]:
    def cut(mask: Any) -> Any:
        if isinstance(mask, torch.Tensor) and mask.dim() >= -dim and mask.shape[dim] == length:
            return mask.narrow(dim, start, count)
        return mask

    if "attn_mask" in kwargs:
        kwargs = dict(kwargs, attn_mask=cut(kwargs["attn_mask"]))
    elif rest:
        rest = (cut(rest[0]),) + tuple(rest[1:])
    return rest, kwargs


def query_chunk_for_budget(budget_bytes: int, *, heads: int, keys: int, batch: int = 1,
                           score_bytes: int = 4, live_copies: int = 2,
                           multiple: int = 1) -> int:
    """The largest query slice whose score matrices fit ``budget_bytes``:

        chunk = ⌊budget_bytes / (batch × heads × keys × score_bytes × live_copies)⌋,

    rounded down to a multiple of ``multiple`` (when that leaves at least one multiple).
    ``keys`` is the key count S (the token count N for self-attention), ``score_bytes`` 4 for
    fp32 scores, ``live_copies`` 2 for a score matrix and its softmax alive together (the
    naive matmul → softmax → matmul). Example: 1 GiB, 12 heads, 21,500 keys, fp32, 2 copies →
    520 (512 with ``multiple=64``): 0.98 GiB of scores where 2,048 queries hold 3.9 GiB.

    Raises :class:`stageload.errors.WorkingMemoryError` when an argument is not a whole number
    ≥ 1 or the budget cannot hold one query's scores (it names the minimum).
    """
    for name, value in (("budget_bytes", budget_bytes), ("heads", heads), ("keys", keys),
                        ("batch", batch), ("score_bytes", score_bytes),
                        ("live_copies", live_copies), ("multiple", multiple)):
        _check_chunk(value, name)
    per_query = batch * heads * keys * score_bytes * live_copies
    chunk = budget_bytes // per_query
    if chunk < 1:
        raise WorkingMemoryError(f"a budget of {budget_bytes} bytes cannot hold one query's "
                                 f"scores ({per_query} bytes for {heads} heads × {keys} keys); "
                                 f"give at least {per_query} bytes")
    return chunk - chunk % multiple if chunk >= multiple else chunk
