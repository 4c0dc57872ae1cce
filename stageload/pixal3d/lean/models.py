"""Pixal3D, lean working memory in the flow models and the decoders (``--working-memory lean``).

:func:`install` puts these on one port pipeline object (and the port's attention module) and
takes them off again with ``.remove()``:

(a) **Flow attention in query slices.** The port's sparse ``naive`` back end
    (``pixal3d.modules.sparse.attention.full_attn.sparse_scaled_dot_product_attention``, Pixal3D-
    mac 0be9e69a) scores ``_chunk = 2048`` queries at a time in fp32: the scores and their
    softmax, two ``[heads, 2048, N]`` matrices, 3.9 GiB at N = 21,500 tokens and 12 heads (the
    port's example at 1024). The name its callers read — the global
    ``sparse_scaled_dot_product_attention`` of ``pixal3d.modules.sparse.attention.modules``,
    which ``SparseMultiHeadAttention`` calls — is replaced for the self-attention forms
    (``(qkv)`` and ``(q, k, v)``) at batch 1 while ``config.ATTN == 'naive'`` by the same
    arithmetic (``softmax(q kᵀ · 1/√C) v`` in fp32: matmul, scale, softmax, matmul) over query
    slices sized per call so ``heads × slice × N × 4 bytes × 2 ≤ budget_bytes``, in multiples of
    64 (default 256 MiB: 128 queries at 21,500 tokens and 12 heads, 0.25 GiB of scores) through
    :func:`stageload.slice_attention`, and without the port's zero-padded copies of q, k, v.
    Every other form, batch or back end goes to the port's function unchanged. Bit-identical
    to the port's on this CPU (tested on the stand-in); on MPS a matrix product may take
    another kernel for another row count (fp32 rounding; not measured here, no Mac).
(a') **Each block's feed-forward by token ranges** (:mod:`stageload.pixal3d.lean.feedforward`):
    the port's ``SparseFeedForwardNet`` and ``FeedForwardNet`` classes run their Linear → GELU
    → Linear over ranges of tokens whose hidden rows fit the budget (capped at 64 MiB: 2,048
    tokens at the released 8,192-wide bf16 MLP), so the ``[N, 8192]`` hidden rows and their
    GELU (0.70 GB at 21,500 tokens) never exist whole. The port's output bit for bit on this
    CPU in bf16 (the released flows' dtype) and fp32 at these ranges (measured; a much smaller
    range may take another kernel and round differently: see that module).
(b) **The decoders by voxel ranges.** While ``decode_shape_slat`` / ``decode_tex_slat`` run,
    that decoder's forward computes every block, the final norm and the output layer over
    ranges of voxels (:func:`stageload.pixal3d.lean.decoders.chunk_decoder`: the sparse
    convolutions by output rows, the last up block fused with the final layers), so no
    level's widest intermediate exists whole, and the shape decoder's mesh extraction
    (:mod:`stageload.pixal3d.lean.extraction`) by voxel ranges; the port's values and mesh,
    bit for bit on this CPU.
(c) **Cache emptied** (``gc.collect()`` and :func:`stageload.empty_allocator_cache`, which
    calls ``torch.mps.empty_cache()`` on a Mac) after each conditioning pass
    (``get_proj_cond_ss``, ``get_proj_cond_shape``) and after each decoder — the port's
    ``run()`` empties only CUDA's cache.
(d) **Metal's hard limit from the budget** (``mps_limit_bytes``: available memory less the
    guard's default kill floor, ``mps_limit.budget_from_memory``): see
    :mod:`stageload.pixal3d.lean.mps_limit`; a refused allocation inside ``run()`` becomes
    :class:`stageload.pixal3d.errors.StageOutOfMemory` naming the stage (the runner's
    ``out_of_memory``). Not run here (no Mac).
(e) **Sub-steps** as ``stage`` events with a ``parent``: ``conditioning`` (0) and ``sampling``
    (1) of 2 inside ``structure``, ``shape_512``, ``shape_1024`` and ``texture`` (the stage told
    from the call, as :class:`stageload.pixal3d.pipeline_hooks.StageHooks` tells it), and
    ``decode_shape`` (0), ``mesh`` (1: the decoder's ``flexible_dual_grid_to_mesh``) and
    ``decode_texture`` (2) of 3 inside ``decode``.

Each tool sends one ``working_memory`` event (:mod:`stageload.working_memory`) through ``sink``.
Install it after the stage hooks (it reads the models through ``pipeline.models`` only inside
``decode_shape_slat`` / ``decode_tex_slat``, after the ``decode`` stage has been entered).
"""
from __future__ import annotations

import gc
import importlib
import math
from typing import Any, Callable, Optional

from stageload.events import EventSink, emit
from stageload.hooks import CallHook, on_call
from stageload.pixal3d.lean import extraction, mps_limit
from stageload.pixal3d.lean.decoders import chunk_decoder, warn_whole
from stageload.pixal3d.lean.feedforward import lean_feedforward
from stageload.pixal3d.plan import SHAPE_PASS_STAGE
from stageload.releasing import empty_allocator_cache
from stageload.working_memory import (
    WorkingMemoryHandle,
    query_chunk_for_budget,
    slice_attention,
)

ATTENTION_MODULE = "pixal3d.modules.sparse.attention.modules"
CONFIG_MODULE = "pixal3d.modules.sparse.config"
ATTENTION_NAME = "sparse_scaled_dot_product_attention"
PORT_QUERY_CHUNK = 2048
"""The port's ``naive`` back end's query chunk (``_chunk`` in ``full_attn.py``, 0be9e69a)."""
DEFAULT_BUDGET = 256 << 20
"""Bytes of attention scores (or decoder hidden rows) alive at once by default: 256 MiB. Why
not more: at 21,500 tokens (the texture and 1024 shape flows) one step of the real-width DiT
holds 1.11 GiB over its inputs at 256 MiB against 1.86 GiB at 1 GiB (``bench.pixal3d.flow_steps``,
``bench/results/2026-12-06/flow_steps_feedforward.md``), the 0.8 GB that keeps those stages
under 8 GB on a 16 GB Mac; the price measured there is CPU time, 1.14-1.32 x a step (more,
smaller matrix products; on MPS not measured, no Mac)."""
FLOW_SUBSTEPS = ("conditioning", "sampling")
DECODE_SUBSTEPS = ("decode_shape", "mesh", "decode_texture")
SOURCE = "stageload.pixal3d.lean.models (--working-memory lean)"
"""``source`` of this part's ``warning`` events."""
ATTENTION_TARGET = f"flow_models.{ATTENTION_NAME}"
"""``target`` of the flow attention's ``working_memory`` events."""
MESH_FUNCTION = "flexible_dual_grid_to_mesh"
"""The mesh extraction the shape decoder's module calls (``fdg_vae.py``), marking ``mesh``."""


def naive_attention(q, k, v):
    """``softmax(q kᵀ / √C) v`` in fp32 for q ``[L, H, C]``, k ``[S, H, C]``, v ``[S, H, Cv]``
    (tokens first, as the port's sparse tensors hold them) → ``[L, H, Cv]`` fp32: the port's
    ``naive`` arithmetic (matmul, × scale, softmax, matmul), per head."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q.float().permute(1, 0, 2).matmul(k.float().permute(1, 2, 0)) * scale
    scores = scores.softmax(dim=-1)
    return scores.matmul(v.float().permute(1, 0, 2)).permute(1, 0, 2)


class LeanAttention:
    """What :func:`install` puts in place of the port's attention function: the self-attention
    forms at batch 1 under ``naive`` go to ``self.attention`` (:func:`naive_attention`, which
    ``slice_attention`` slices); everything else to ``original``, said once per reason to
    ``sink``: a ``working_memory`` event with nothing saved where there is nothing to slice
    (another back end — ``flash_attn`` holds no score matrix —, the cross-attention forms),
    a ``warning`` where the port's own slices hold more than lean's would (a batch over 1)."""

    def __init__(self, original: Callable, config: Any, sink: Optional[EventSink] = None,
                 stage: Optional[Callable[[], Optional[str]]] = None):
        self.original = original
        self.config = config
        self.attention = naive_attention
        self.sink = sink
        self.stage = stage
        self.said: set = set()

    def __call__(self, *args, **kwargs):
        values = list(args) + list(kwargs.values())
        sparse = all(hasattr(x, "feats") and hasattr(x, "replace") for x in values)
        backend = getattr(self.config, "ATTN", None)
        if backend != "naive":
            self._nothing(("backend", backend), _nothing_to_slice(backend))
        elif not sparse or len(values) not in (1, 3):
            self._nothing(("form", len(values), sparse), f"the {_form(values)} form is the "
                          f"port's own (cross-attention: its keys are the conditioning's "
                          f"tokens, not the voxels)")
        elif values[0].shape[0] != 1:
            self._warn(values[0].shape[0])
        else:
            if len(values) == 1:
                q, k, v = values[0].feats.unbind(dim=1)
            else:
                q, k, v = (x.feats for x in values)
            out = self.attention(q, k, v)
            return values[0].replace(out.to(q.dtype))
        return self.original(*args, **kwargs)

    def announce(self) -> None:
        """The ``working_memory`` event of the installation, for the back end set now: the
        slices (each call's size from the budget; the saving is reported at the first sliced
        call) under ``naive``, else why there is nothing to slice."""
        backend = getattr(self.config, "ATTN", None)
        if backend == "naive":
            emit(self.sink, "working_memory", stage=self._where(), target=ATTENTION_TARGET,
                 tool="slice_attention", chunk=None, bytes_saved=0,
                 note="naive: self-attention in query slices sized per call from the budget "
                      "(the saving is reported at the first sliced call)")
        else:
            self._nothing(("backend", backend), _nothing_to_slice(backend))

    def _where(self) -> Optional[str]:
        return self.stage() if self.stage is not None else None

    def _nothing(self, key: tuple, note: str) -> None:
        if key not in self.said:
            self.said.add(key)
            emit(self.sink, "working_memory", stage=self._where(), target=ATTENTION_TARGET,
                 tool="slice_attention", chunk=None, bytes_saved=0, note=note)

    def _warn(self, batch: int) -> None:
        if ("batch", batch) not in self.said:
            self.said.add(("batch", batch))
            cause = f"a batch of {batch}: the lean slices take one"
            emit(self.sink, "warning", source=SOURCE, fallback="port_attention", cause=cause,
                 message=f"--working-memory lean: the flow attention runs the port's own "
                         f"chunks ({cause})",
                 differs="nothing in the output: the port's own attention runs, with its "
                         "working memory")


def _nothing_to_slice(backend) -> str:
    return (f"{backend}: nothing to slice (the back end's own kernel; only naive holds a "
            f"[heads, queries, keys] score matrix)")


def _form(values: list) -> str:
    kinds = ["sparse" if hasattr(x, "feats") else "dense" for x in values]
    return f"({', '.join(kinds)})"


class LeanModel:
    """The handle :func:`install` returns: ``remove()`` takes everything off (safe twice).
    Attributes: ``tools`` (the working-memory handles made so far), ``substeps`` (the
    ``(parent, sub-step)`` pairs sent), ``mps_limited`` (whether Metal's limit was set)."""

    def __init__(self, pipeline, sink: Optional[EventSink], budget_bytes: int,
                 stage: Optional[Callable[[], Optional[str]]]):
        self.pipeline = pipeline
        self.sink = sink
        self.budget = budget_bytes
        self.tools: list[WorkingMemoryHandle] = []
        self.substeps: list[tuple[str, str]] = []
        self.mps_limited = False
        self._stage = stage
        self._parent: Optional[str] = None
        self._hooks: list[CallHook] = []
        self._decoder_tools: list[WorkingMemoryHandle] = []
        self._undo: list[Callable[[], None]] = []

    @property
    def stage(self) -> Optional[str]:
        """The stage now: the caller's, else the last one a sub-step named."""
        return self._stage() if self._stage is not None else self._parent

    def remove(self) -> None:
        for handle in reversed(self._hooks + self.tools):
            handle.remove()
        for undo in reversed(self._undo):
            undo()
        self._hooks, self._undo, self._decoder_tools = [], [], []

    def __enter__(self) -> "LeanModel":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def substep(self, parent: str, name: str) -> None:
        """Send the ``stage`` event of sub-step ``name`` inside ``parent``."""
        names = DECODE_SUBSTEPS if parent == "decode" else FLOW_SUBSTEPS
        self._parent = parent
        self.substeps.append((parent, name))
        emit(self.sink, "stage", stage=name, index=names.index(name), count=len(names),
             parent=parent)

    def free(self, *args, **kwargs) -> None:
        """``gc.collect()`` and the allocators' caches emptied (MPS's on a Mac)."""
        gc.collect()
        empty_allocator_cache()


def install(pipeline, sink: Optional[EventSink], *, budget_bytes: Optional[int] = None,
            mps_limit_bytes: Optional[int] = None,
            stage: Optional[Callable[[], Optional[str]]] = None) -> LeanModel:
    """Install the lean working memory (a)–(e) of the module docstring on ``pipeline`` (a port
    ``Pixal3DImageTo3DPipeline``, after the stage hooks) and return the :class:`LeanModel`
    handle; ``handle.remove()`` restores the pipeline, its samplers and the port's attention
    module exactly.

    ``sink``: where the ``working_memory`` and sub-step ``stage`` events go (the run's emit).
    ``budget_bytes``: bytes of attention scores, or of a decoder chunk's or a feed-forward
    range's hidden rows (those two capped lower), alive at once (default
    :data:`DEFAULT_BUDGET`, 256 MiB). ``mps_limit_bytes``: the memory budget (the adapter's:
    ``mps_limit.budget_from_memory``), set as Metal's hard limit when MPS is available (None:
    leave it). ``stage``: a callable giving the current stage for the events
    (e.g. ``lambda: run.stage``); None: the last stage a sub-step named.

    A port whose attention module (:data:`ATTENTION_MODULE`, :data:`ATTENTION_NAME`) cannot be
    found keeps its own attention, said in a ``warning`` event; a port without a feed-forward
    class of :data:`stageload.pixal3d.lean.feedforward.CLASSES`: a ``working_memory`` event
    with nothing saved, naming it; a decoder the lean decode's
    preconditions do not hold for decodes the port's way, said in a ``warning`` (``fallback:
    port_decoder``; the results are the same either way). Raises
    ``stageload.errors.HookError`` when the pipeline lacks a method hooked here.
    """
    budget = DEFAULT_BUDGET if budget_bytes is None else int(budget_bytes)
    query_chunk_for_budget(budget, heads=1, keys=1)  # a WorkingMemoryError for a bad budget
    lean = LeanModel(pipeline, sink, budget, stage)
    try:
        _install_attention(lean)
        lean._hooks.append(lean_feedforward(budget, sink=sink, stage=lambda: lean.stage))
        _install_substeps(lean)
        _install_decoders(lean)
        _install_limit(lean, mps_limit_bytes)
        lean._hooks.append(mps_limit.name_the_stage(pipeline, lambda: lean.stage))
    except BaseException:
        lean.remove()
        raise
    return lean


def _install_limit(lean: LeanModel, budget: Optional[int]) -> None:
    """Metal's hard limit from ``budget`` (:mod:`.mps_limit`), and a ``working_memory`` event
    saying it was set or why not."""
    undo, why = (None, "no budget was given (the memory available is not known)") \
        if budget is None else mps_limit.set_limit(int(budget), reason=True)
    if undo is not None:
        lean._undo.append(undo)
        lean.mps_limited = True
    note = (f"Metal's hard limit set to {int(budget):,} bytes: an allocation past it fails "
            f"naming the stage" if undo is not None else f"Metal's hard limit not set: {why}")
    emit(lean.sink, "working_memory", stage=lean.stage, target="mps.allocator",
         tool="mps_limit", chunk=None, bytes_saved=0, note=note)


def port_attention() -> tuple:
    """The port's sparse attention module and its sparse config (:data:`ATTENTION_MODULE`,
    :data:`CONFIG_MODULE`), imported from the port on ``sys.path``. Raises ``ImportError``."""
    # the port's modules by their names, which are settings (a test points one elsewhere)
    return tuple(importlib.import_module(name) for name in (ATTENTION_MODULE, CONFIG_MODULE))


def _install_attention(lean: LeanModel) -> None:
    try:
        module, config = port_attention()
    except ImportError as exc:
        module = config = None
        cause = f"its {exc.name or ATTENTION_MODULE} cannot be imported"
    else:
        cause = (None if callable(getattr(module, ATTENTION_NAME, None))
                 else f"{ATTENTION_MODULE} has no {ATTENTION_NAME}")
    if cause is not None:
        emit(lean.sink, "warning", source=SOURCE,
             message=f"--working-memory lean: this port's flow attention runs the port's own "
                     f"way, with its full working memory ({cause})")
        return
    holder, handle = lean_attention(getattr(module, ATTENTION_NAME), config, lean.budget,
                                    sink=lean.sink, stage=lambda: lean.stage)
    holder.announce()
    lean.tools.append(handle)
    lean._hooks.append(_replace(module, ATTENTION_NAME, holder))


def lean_attention(original: Callable, config: Any, budget_bytes: int, *,
                   sink: Optional[EventSink] = None,
                   stage: Optional[Callable[[], Optional[str]]] = None
                   ) -> tuple[LeanAttention, WorkingMemoryHandle]:
    """The port's attention function ``original`` made lean (a :class:`LeanAttention` whose
    ``naive`` path runs in query slices sized per call from ``budget_bytes``), and the
    ``slice_attention`` handle on it. ``config``: the port's ``pixal3d.modules.sparse.config``
    (read at each call: its ``ATTN``). Used by :func:`install` and the benchmark."""
    holder = LeanAttention(original, config, sink=sink, stage=stage)

    def size(q, k) -> int:  # q [L, H, C], k [S, H, C]
        return query_slice(budget_bytes, heads=q.shape[1], keys=k.shape[0])

    handle = slice_attention(holder, "attention", size, query_dim=0,
                             baseline_queries=PORT_QUERY_CHUNK, sink=sink, stage=stage,
                             target=ATTENTION_TARGET)
    return holder, handle


def query_slice(budget_bytes: int, *, heads: int, keys: int) -> int:
    """Queries per slice: :func:`stageload.query_chunk_for_budget` (fp32 scores and their
    softmax) in multiples of 64, never more than the port's own :data:`PORT_QUERY_CHUNK` (a
    large budget must not hold more than the port does). Raises ``WorkingMemoryError`` for a
    budget below one query's scores."""
    chunk = query_chunk_for_budget(budget_bytes, heads=heads, keys=keys, multiple=64)
    return min(chunk, PORT_QUERY_CHUNK)


def _replace(owner: Any, attr: str, value: Any) -> CallHook:
    """``owner.attr`` answers ``value`` until the returned hook is removed (an ``on_call``-style
    handle, so it restores exactly what the owner held)."""
    from stageload.hooks import around_call
    return around_call(owner, attr, lambda call, *a, **k: value(*a, **k))


def _install_substeps(lean: LeanModel) -> None:
    pipeline = lean.pipeline

    def structure(*args, **kwargs) -> None:
        lean.substep("structure", "conditioning")

    def shape_pass(image_cond_model, *args, **kwargs) -> None:
        for attr, stage in SHAPE_PASS_STAGE.items():
            if image_cond_model is getattr(pipeline, attr, None):
                lean.substep(stage, "conditioning")

    def sampling(*args, **kwargs) -> None:
        if lean._parent is not None and lean._parent != "decode":
            lean.substep(lean._parent, "sampling")

    lean._hooks += [on_call(pipeline, "get_proj_cond_ss", before=structure, after=lean.free),
                    on_call(pipeline, "get_proj_cond_shape", before=shape_pass,
                            after=lean.free)]
    for attr in ("sparse_structure_sampler", "shape_slat_sampler", "tex_slat_sampler"):
        sampler = getattr(pipeline, attr, None)
        if sampler is not None and hasattr(sampler, "__dict__"):
            lean._hooks.append(on_call(sampler, "sample", before=sampling))


def _install_decoders(lean: LeanModel) -> None:
    pipeline = lean.pipeline

    def begin(name: str, substep: str) -> Callable:
        def before(*args, **kwargs) -> None:
            lean.substep("decode", substep)
            models = getattr(pipeline, "models", None)
            if not hasattr(models, "__contains__") or name not in models:
                warn_whole(lean.sink, name, f"pipeline.models has no {name}")
                return
            decoder = models[name]
            lean._decoder_tools = _chunk_decoder(lean, name, decoder)
            if substep == "decode_shape":
                _watch_mesh(lean, decoder)
        return before

    def end(result, *args, **kwargs) -> None:
        for handle in lean._decoder_tools:
            handle.remove()
        lean._decoder_tools = []
        lean.free()

    lean._hooks += [
        on_call(pipeline, "decode_shape_slat", before=begin("shape_slat_decoder", "decode_shape"),
                after=end),
        on_call(pipeline, "decode_tex_slat", before=begin("tex_slat_decoder", "decode_texture"),
                after=end)]


def _watch_mesh(lean: LeanModel, decoder) -> None:
    """``mesh`` begins at the decoder module's first ``flexible_dual_grid_to_mesh`` call during
    this decode, which runs by voxel ranges (:mod:`.extraction`); a decoder module without that
    name: no ``mesh`` sub-step."""
    import sys

    module = sys.modules.get(type(decoder).__module__)
    if module is None or not callable(getattr(module, MESH_FUNCTION, None)):
        return
    holder: list[CallHook] = []

    def first(*args, **kwargs) -> None:
        holder[0].remove()
        lean.substep("decode", "mesh")

    lean._decoder_tools += extraction.install(module, MESH_FUNCTION, lean.budget, sink=lean.sink,
                                              stage=lambda: lean.stage)
    holder.append(on_call(module, MESH_FUNCTION, before=first))
    lean._decoder_tools.append(_Removable(holder[0]))


class _Removable:
    """A ``CallHook`` kept with the decoder's tools (removed with them)."""

    def __init__(self, hook: CallHook):
        self.hook = hook

    def remove(self) -> None:
        self.hook.remove()


def _chunk_decoder(lean: LeanModel, name: str, decoder) -> list:
    """:func:`chunk_decoder` with the run's budget, sink and stage."""
    return chunk_decoder(decoder, name, lean.budget, sink=lean.sink, stage=lambda: lean.stage)
