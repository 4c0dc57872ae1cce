"""The deep self-check's three parts: each lean part and the port's own path on the same inputs,
at :mod:`.sizes`' reduced sizes, each measured (:mod:`.measure`) and compared
(:mod:`.compare`). Written against the port's names — the pipeline's ``get_proj_cond_shape`` and
``decode_shape_slat``, its ``pipeline.models``, the sparse attention function the flow models
call, the ``SparseTensor`` of its pipeline module — never against the stand-in's internals.

Each part returns a record (the ``self_check`` event's fields, runner/PROTOCOL.md): ``part``,
``size`` (what was computed, in words), ``status`` (``agrees``, ``differs``, ``failed``,
``skipped``), ``ok`` (True, False; None when skipped: not checked), ``agreement`` (max |lean −
port| ÷ max |port|, or None), ``bound``, ``port`` and ``lean`` (each ``{"seconds", "memory":
{name: bytes}}``), ``note`` and ``said`` (what the lean part said: its ``working_memory`` notes
and ``warning`` messages).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from stageload.hooks import on_call
from stageload.patching import patched
from stageload.pixal3d.lean import checks
from stageload.pixal3d.lean import conditioning as lean_conditioning
from stageload.pixal3d.lean import decoders as lean_decoders
from stageload.pixal3d.lean import models as lean_models
from stageload.pixal3d.selfcheck import inputs, sizes
from stageload.pixal3d.selfcheck.compare import agreement
from stageload.pixal3d.selfcheck.measure import measure

STAGE = "self_check"
"""The ``stage`` the lean parts' own events name during the check."""


@dataclass
class Context:
    """What the parts share: ``run`` (a staged ``Pixal3DRun`` with nothing installed, its
    hooks off), its ``pipeline`` and ``device``, the port folder ``root``, the
    ``pipeline_type``."""
    run: Any
    device: torch.device
    root: Any
    pipeline_type: str = "1024_cascade"
    heard: list = field(default_factory=list)

    @property
    def pipeline(self):
        return self.run.pipeline

    def sparse_tensor(self):
        """The ``SparseTensor`` class of the port's pipeline module."""
        return sys.modules[type(self.pipeline).__module__].SparseTensor

    def sink(self, event: dict) -> None:
        """Where the lean parts' events go while a part runs (kept for its record)."""
        self.heard.append(event)


def _said(events: list) -> list[str]:
    out = []
    for ev in events:
        if ev.get("event") == "working_memory":
            out.append(f"{ev.get('tool')} on {ev.get('target')}: " + (ev.get("note") or
                       f"{ev.get('bytes_saved', 0):,} bytes saved (estimated)"))
        elif ev.get("event") == "warning":
            out.append(f"warning: {ev.get('message')}")
    return out


def compare_paths(ctx: Context, part: str, size: str, port: Callable[[], Any],
                  lean: Callable[[], Any], note: Optional[str] = None) -> dict:
    """Run ``lean()`` then ``port()`` (lean first: memory the port's path freed cannot hide
    lean's peak), measured, and compare their results; the part's record."""
    ctx.heard = []
    lean_out, lean_m = measure(lean, ctx.device)
    said = _said(ctx.heard)
    port_out, port_m = measure(port, ctx.device)
    rel, problem = agreement(lean_out, port_out)
    ok = problem is None and rel is not None and rel <= sizes.BOUND
    if problem is not None:
        note = "; ".join(x for x in (note, f"the results differ in form: {problem}") if x)
    return {"part": part, "size": size, "status": "agrees" if ok else "differs", "ok": ok,
            "agreement": rel, "bound": sizes.BOUND, "port": port_m, "lean": lean_m,
            "note": note, "said": said}


def conditioning(ctx: Context) -> dict:
    """The texture pass's conditioning (``image_cond_model_tex_1024``) at NAF output
    :data:`sizes.CONDITIONING_SIDE`² (the extractor's own when smaller), on a shell of active
    voxels: the port's ``get_proj_cond_shape`` against it with the lean conditioning
    installed."""
    ctx.run.models["naf"]  # the extractors, their backbone and NAF, as a texture stage loads
    extractor = getattr(ctx.pipeline, "image_cond_model_tex_1024", None)
    if not isinstance(extractor, torch.nn.Module):
        return skipped("conditioning", "the pipeline has no image_cond_model_tex_1024")
    target, patches = checks.naf_sizes(extractor)
    side = sizes.CONDITIONING_SIDE
    if target is None or patches is None:
        return skipped("conditioning", "the extractor's naf_target_size or patch_number is "
                                       "missing")
    if target[0] < side or side % patches:
        side = target[0]
    coords = inputs.shell(int(extractor.grid_resolution),
                          sizes.CONDITIONING_VOXELS).to(ctx.device)
    picture = inputs.picture()

    def port():
        return ctx.pipeline.get_proj_cond_shape(extractor, [picture], coords)

    def lean():
        handle = lean_conditioning.install(ctx.pipeline, ctx.sink, stage=lambda: STAGE)
        try:
            return port()
        finally:
            handle.remove()

    size = (f"texture pass, NAF output {side}x{side} (a real run: {target[0]}x{target[1]}), "
            f"{len(coords):,} active voxels on its {extractor.grid_resolution}^3 grid")
    with patched(extractor, "naf_target_size", (side, side)):
        return compare_paths(ctx, "conditioning", size, port, lean)


def attention(ctx: Context) -> dict:
    """One flow step's self-attention: the port's sparse attention function (as the flow
    models call it, with the back end the port chose) against lean's, on
    :data:`sizes.ATTENTION_TOKENS` tokens shaped as the texture flow model's heads."""
    try:
        module, config = lean_models.port_attention()
    except ImportError as exc:
        return skipped("attention", f"the port's attention module cannot be imported ({exc})")
    original = getattr(module, lean_models.ATTENTION_NAME, None)
    if not callable(original):
        return skipped("attention", f"{lean_models.ATTENTION_MODULE} has no "
                                    f"{lean_models.ATTENTION_NAME}")
    heads, width, source = inputs.attention_shape(
        inputs.model_args(ctx.root, sizes.ATTENTION_MODEL, ctx.pipeline_type))
    n = sizes.ATTENTION_TOKENS
    qkv = inputs.normal(n, 3, heads, width).to(ctx.device)
    coords = inputs.block(16, 64).to(ctx.device)[:n]
    tokens = ctx.sparse_tensor()(feats=qkv, coords=coords)
    budget = heads * (n // sizes.ATTENTION_SLICES) * n * 4 * 2  # so the slices run
    holder, handle = lean_models.lean_attention(original, config, budget, sink=ctx.sink,
                                                stage=lambda: STAGE)
    backend = getattr(config, "ATTN", None)
    size = (f"{n:,} tokens, {heads} head{'s' if heads != 1 else ''} x {width} ({source}), "
            f"back end {backend} "
            f"(a real texture step: about 21,500 tokens)")
    try:
        holder.announce()
        record = compare_paths(ctx, "attention", size, lambda: original(tokens),
                               lambda: holder(tokens))
        if backend != "naive":  # lean passes it through: how its slices compare, for the record
            q, k, v = qkv.unbind(dim=1)
            sliced = holder.attention(q, k, v)
            rel, _ = agreement(sliced.to(q.dtype), original(tokens).feats)
            record["note"] = (f"{backend}: lean passes it through (nothing to slice); lean's "
                              f"naive slices against it: {rel:.2e}" if rel is not None
                              else f"{backend}: lean passes it through (nothing to slice)")
    finally:
        handle.remove()
    return record


def decoder(ctx: Context) -> dict:
    """A decoder pass on a small latent: the pipeline's ``decode_shape_slat`` on a cube of
    :data:`sizes.DECODER_SIDE`³ latent voxels, with and without lean's row chunks. Compared:
    what the decoder hands its mesh extraction (``flexible_dual_grid_to_mesh``'s inputs, where
    its module has it: features, before thresholds that may round either way) and the decoded
    sub-grids; else everything it returns."""
    decoder_model = ctx.run.models[sizes.DECODER_MODEL]
    channels = _latent_channels(ctx.pipeline, decoder_model)
    if channels is None:
        return skipped("decoder", f"{sizes.DECODER_MODEL}'s latent channels are not known "
                                  f"(no latent_channels, no shape_slat_normalization)")
    coords = inputs.block(sizes.DECODER_SIDE, sizes.DECODER_RESOLUTION // 16).to(ctx.device)
    latent = inputs.normal(len(coords), channels, seed=inputs.SEED + 1)
    norm = getattr(ctx.pipeline, "shape_slat_normalization", None)
    if isinstance(norm, dict) and len(norm.get("mean") or ()) == channels:
        latent = latent * torch.tensor(norm["std"]) + torch.tensor(norm["mean"])
    slat = ctx.sparse_tensor()(feats=latent.to(ctx.device), coords=coords)
    module = sys.modules.get(type(decoder_model).__module__)
    watch = callable(getattr(module, lean_models.MESH_FUNCTION, None))

    def port():
        seen: list = []
        hook = on_call(module, lean_models.MESH_FUNCTION,
                       before=lambda *a, **k: seen.append((a, k))) if watch else None
        try:
            out = ctx.pipeline.decode_shape_slat(slat, sizes.DECODER_RESOLUTION)
        finally:
            if hook is not None:
                hook.remove()
        subs = out[1] if isinstance(out, tuple) and len(out) == 2 else None
        return (seen, subs) if watch else out

    budget = lean_decoders.budget_for_rows(decoder_model, sizes.DECODER_CHUNK_ROWS)

    def lean():
        tools = lean_models.chunk_decoder(decoder_model, sizes.DECODER_MODEL, budget,
                                          sink=ctx.sink, stage=lambda: STAGE)
        try:
            return port()
        finally:
            for tool in tools:
                tool.remove()

    size = (f"{sizes.DECODER_MODEL} to {sizes.DECODER_RESOLUTION}, {len(coords):,} latent "
            f"voxels x {channels} channels, its widest rows {sizes.DECODER_CHUNK_ROWS} a chunk "
            f"(a real run: about 20,000 voxels)")
    note = ("compared: the mesh extraction's inputs and the sub-grids" if watch else
            "compared: everything the decoder returns")
    return compare_paths(ctx, "decoder", size, port, lean, note)


def _latent_channels(pipeline, decoder_model) -> Optional[int]:
    channels = getattr(decoder_model, "latent_channels", None)
    if isinstance(channels, int) and channels > 0:
        return channels
    norm = getattr(pipeline, "shape_slat_normalization", None)
    mean = norm.get("mean") if isinstance(norm, dict) else None
    return len(mean) if isinstance(mean, (list, tuple)) and mean else None


def skipped(part: str, why: str) -> dict:
    """The record of a part that could not be checked, and why (``ok`` None: nothing was
    compared)."""
    return {"part": part, "size": None, "status": "skipped", "ok": None, "agreement": None,
            "bound": sizes.BOUND, "port": None, "lean": None, "note": why, "said": []}


def failed(part: str, exc: BaseException) -> dict:
    """The record of a part that raised: the exception in words."""
    record = skipped(part, f"{type(exc).__name__}: {exc}")
    record.update(status="failed", ok=False)
    return record


#: The parts, in order: name → (function, what it checks, in words).
PARTS = {
    "conditioning": (conditioning, "the conditioning: a texture pass at 256x256 (NAF and the "
                                   "projection), lean against the port's get_proj_cond_shape"),
    "attention": (attention, "one flow step's attention (4,096 tokens), lean's query slices "
                             "against the port's back end"),
    "decoder": (decoder, "a shape decoder pass on a 512-voxel latent, lean's row chunks against "
                         "the port's decode_shape_slat"),
}
