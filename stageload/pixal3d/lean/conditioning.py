"""Lean conditioning: NAF's upsampling from the low-resolution keys and values, and the view
projection only where the active voxels sample it — the same numbers as the port's path, to
fp32 rounding, without its working memory.

What the port does (read in ``valeoai/NAF`` ``src/layers/attentions.py``/``src/model/naf.py``
and Pixal3D-mac's ``image_conditioned_proj.py`` and ``generate_mps.py``): NAF resizes its keys
and the 1024-channel DINOv3 values to the output size (1024x1024 for the texture pass) and runs
9x9 neighbourhood attention with dilation output / input; on a Mac the port's ``_torch_na2d``
runs it with flat copies of q, k, v and the output (about 20 GiB at 1024x1024). ``ProjGrid``
then samples every one of the 64^3 grid points from both maps (``[1, 262144, 2048]``) before
``get_proj_cond_shape`` keeps the active voxels.

Two tools, each announced by a ``working_memory`` event (fields: ``stage``, ``target``,
``tool``, ``chunk``, ``bytes_saved`` as estimated, ``note``):

- :func:`banded_upsampler` (``tool="banded_upsampler"``): any NAF-like ``CrossAttention``
  (``forward(q, k, v)``, ``num_heads``, ``kernel_size``, ``_resize``) computes its whole output
  in bands of low-resolution rows (``attention.upsample_banded``).
- :func:`install` (``tool="sampled_projection"``): the pipeline's ``get_proj_cond_shape`` runs
  the extractor's own ``forward`` with its ``proj_grid`` restricted to the active voxels' grid
  points and NAF's output computed only at the pixels those points' bilinear samples read
  (``attention.upsample_at``).

Preconditions (:mod:`.checks`) are checked at install and again when a pass runs (NAF is
loaded lazily in staged mode). Each pass takes the leanest path whose preconditions hold, and
every path but the first sends a ``warning`` naming the one that failed:

1. the sampled pass (above);
2. where only the sampled pass's own preconditions fail (more than one image, arguments it
   does not know, a projection it cannot restrict), the port's pass with
   :func:`banded_upsampler` on NAF's upsampler for the call: NAF's output whole, in bands
   (4 GiB at 1024², against the port's ≈ 20 GiB of attention temporaries), the projection over
   the whole grid as the port computes it (``fallback: banded_upsampler``);
3. where NAF itself is not what lean reads (its layers, its resize, an output that is not an
   integer multiple of the patch grid, a kernel that does not fit), the port's own pass
   (``fallback: port_conditioning``).

Where the port uses NAF's output as a tensor in the sampled pass (its ``PIXAL3D_NAF_DEVICE`` /
``PIXAL3D_PROJ_GRID_DEVICE`` switches move it), the map is made whole in bands at that point
(:class:`.sampled.LazyMap`, a ``warning``). NAF's image encoder runs layer by layer in row bands
(:mod:`.encoder`: two 128-channel maps per stack instead of several; its pooled, rotated map is
never made whole). What stays as in the port: DINOv3 and the low-resolution projection.
"""
from __future__ import annotations

from typing import Callable, Optional

from torch import nn

from stageload.hooks import around_call
from stageload.pixal3d.lean import attention as la
from stageload.pixal3d.lean import checks
from stageload.pixal3d.lean.cond_pass import lean_cond_shape
from stageload.pixal3d.lean.report import DIFFERS_WHOLE, Handle, announce, fallback
from stageload.pixal3d.lean.sampled import kernel_of

EXTRACTORS = ("image_cond_model_shape_512", "image_cond_model_shape_1024",
              "image_cond_model_tex_1024")


def banded_upsampler(upsampler: nn.Module, sink=None, stage: Optional[str] = None,
                     band_bytes: int = la.BAND_BYTES) -> Handle:
    """Make ``upsampler`` (NAF's ``CrossAttention``) compute its output in bands.

    Its ``forward(q, k, v, image=None, return_weights=False)`` is replaced on the instance
    (``stageload.hooks.around_call``: stacks and comes off like the other hooks):
    q ``[B, heads * dq, H, W]``, k ``[B, heads * dq, h, w]``, v ``[B, heads * dv, h, w]`` ->
    ``[B, heads * dv, H, W]``, equal to the original's to fp32 rounding, without the resized
    k and v or the flat copies. A call it cannot take (``return_weights``, a ratio that is not
    an integer, a kernel that does not fit) runs the original ``forward`` and emits a
    ``warning`` (once per shape). ``sink`` gets a ``working_memory`` event at the first call of
    each output size (``bytes_saved``: the port's resized maps, flat copies and output copy,
    less one band). Preconditions checked now (:func:`.lean_checks.upsampler_problem`): when one
    fails, nothing is changed, a ``warning`` names it and the returned handle is inactive.
    Returns a :class:`Handle`; ``remove()`` restores the original ``forward``."""
    problem = checks.upsampler_problem(upsampler)
    if problem:
        fallback(sink, f"NAF upsampling stays as the port computes it: {problem}", problem)
        return Handle(None, False)
    seen: set = set()

    def forward(call, q, k, v, image=None, return_weights=False, **kwargs):
        shape = (tuple(q.shape), tuple(k.shape), tuple(v.shape))
        problem = "return_weights" if return_weights else checks.shape_problem(
            q, k, v, upsampler.kernel_size)
        if problem:
            if shape not in seen:
                seen.add(shape)
                fallback(sink, f"NAF upsampling of {shape[0]} ran as the port computes it: "
                                f"{problem}", problem)
            return call(q, k, v, image, return_weights=return_weights, **kwargs)
        hq, wq = q.shape[-2:]
        hk, wk = k.shape[-2:]
        upsampler.dilation = (hq // hk, wq // wk)
        if shape not in seen:
            seen.add(shape)
            announce(sink, stage, "naf.upsampler", "banded_upsampler", None,
                   checks.port_upsample_bytes(q, k, v) - band_bytes,
                   f"{hq}x{wq} from {hk}x{wk}, bands of at most {band_bytes} bytes")
        return la.upsample_banded(q, k, v, upsampler.num_heads, kernel_of(upsampler),
                                  band_bytes=band_bytes)

    hook = around_call(upsampler, "forward", forward)
    return Handle(hook.remove, True)


def install(pipeline, sink=None, stage: Optional[Callable[[], Optional[str]]] = None) -> Handle:
    """Lean shape and texture conditioning on ``pipeline`` (the port's
    ``Pixal3DImageTo3DPipeline``): its ``get_proj_cond_shape`` (``stageload.hooks.around_call``
    on the instance; install it before the stage hooks, which must run around it) computes the
    projected features only at the active voxels and NAF's output only at the pixels their
    bilinear samples read (or, where a precondition fails, the next path of the module
    docstring's list). The result dict has the port's
    structure (``cond``/``neg_cond``, ``global`` and a ``SparseTensor`` ``proj`` of the port's
    class) with features equal to the port's to fp32 rounding.

    ``sink``: ``working_memory`` events (one per extractor the first time its pass runs lean)
    and ``warning`` events (a pass that runs the port's path, and why). ``stage``: a callable
    giving the current stage name for the events (or None). Preconditions
    (:mod:`.checks`) are checked now — the pipeline's (when one fails nothing is installed
    and the handle is inactive) and each extractor's (a ``warning`` per failing one) — and again
    when each pass runs, NAF included (staged runs load it late). Returns a :class:`Handle`
    whose ``remove()`` restores ``get_proj_cond_shape``."""
    import inspect

    problem = checks.pipeline_problem(pipeline)
    if problem:
        fallback(sink, f"conditioning runs as the port computes it: {problem}", problem)
        return Handle(None, False)
    _check_extractors(pipeline, sink)
    defaults = {name: p.default for name, p in
                inspect.signature(pipeline.get_proj_cond_shape).parameters.items()
                if name in checks.PASS_ARGS and p.default is not inspect.Parameter.empty}
    announced: set = set()

    def get_proj_cond_shape(call, image_cond_model, image, coords, *args, **kwargs):
        given = {**defaults, **dict(zip(checks.PASS_ARGS, args, strict=False)), **kwargs}
        name = _name(pipeline, image_cond_model)
        problem = _load_naf(image_cond_model) or checks.banded_problem(image_cond_model)
        if problem:
            fallback(sink, f"{name} runs as the port computes it: {problem}", problem)
            return call(image_cond_model, image, coords, *args, **kwargs)
        problem = (f"{len(args)} positional arguments after coords" if len(args) > 4
                   else checks.pass_problem(pipeline, image_cond_model, image, coords, given))
        if problem:
            return _banded_pass(call, name, image_cond_model, (image, coords) + args, kwargs,
                                problem, sink, stage)
        if id(image_cond_model) not in announced:
            announced.add(id(image_cond_model))
            _announce(sink, stage, name, image_cond_model, given, coords)
        return lean_cond_shape(pipeline, image_cond_model, image, coords, **given, sink=sink)

    hook = around_call(pipeline, "get_proj_cond_shape", get_proj_cond_shape)
    return Handle(hook.remove, True)


def _announce(sink, stage, name: str, extractor, given: dict, coords) -> None:
    """The ``working_memory`` event of an extractor's first sampled pass; with the port's
    device switches set, NAF's whole output (which the port moves) is taken off the saving."""
    resolution = int(given.get("grid_resolution_override") or extractor.grid_resolution)
    saved = checks.port_pass_bytes(extractor, resolution, coords)
    note = "projection at the active voxels; NAF at the pixels their samples read"
    switches = checks.device_switches()
    target, _ = checks.naf_sizes(extractor)
    if switches and getattr(extractor, "use_naf_upsample", False) and target is not None:
        saved -= 4 * int(getattr(extractor, "embed_dim", 0) or 0) * target[0] * target[1]
        note = (f"projection at the active voxels; NAF's whole output in bands, which "
                f"{' and '.join(switches)} moves between devices")
    announce(sink, stage() if stage is not None else None, f"{name}.conditioning",
             "sampled_projection", int(coords.shape[0]), saved, note)


def _load_naf(extractor) -> Optional[str]:
    """Load the extractor's NAF the port's way (its ``_load_naf``, which its ``forward`` calls
    first) when it upsamples with one and has none yet; why that cannot be done, or None."""
    if not getattr(extractor, "use_naf_upsample", False) \
            or getattr(extractor, "naf_model", None) is not None:
        return None
    load = getattr(extractor, "_load_naf", None)
    if not callable(load):
        return "the extractor has no _load_naf to load NAF the port's way"
    load()
    return None


def _banded_pass(call, name: str, extractor, args: tuple, kwargs: dict, problem: str, sink,
                 stage) -> dict:
    """The port's own pass with :func:`banded_upsampler` on NAF's upsampler for its duration
    (the port's pass without NAF where the extractor has none), and the ``warning`` that
    says so."""
    naf = getattr(extractor, "naf_model", None) \
        if getattr(extractor, "use_naf_upsample", False) else None
    if naf is None:
        fallback(sink, f"{name} runs as the port computes it: {problem}", problem)
        return call(extractor, *args, **kwargs)
    fallback(sink, f"{name} runs the port's pass with NAF's upsampling in bands (NAF's whole "
                   f"output and the projection over the whole grid, not only the active "
                   f"voxels): {problem}", problem, kind="banded_upsampler",
             differs=DIFFERS_WHOLE)
    handle = banded_upsampler(naf.upsampler, sink, stage() if stage is not None else None)
    try:
        return call(extractor, *args, **kwargs)
    finally:
        handle.remove()


def _check_extractors(pipeline, sink) -> None:
    """A ``warning`` for each of the pipeline's NAF extractors that cannot run lean as it is
    (one not built yet — a staged run builds them when the structure stage begins — is checked
    when its pass runs)."""
    for attr in EXTRACTORS:
        extractor = vars(pipeline).get(attr)
        if not isinstance(extractor, nn.Module):
            continue
        problem = checks.banded_problem(extractor)
        if problem:
            fallback(sink, f"{attr} will run as the port computes it: {problem}", problem)
            continue
        problem = checks.sampled_problem(extractor)
        if problem and getattr(extractor, "use_naf_upsample", False):
            fallback(sink, f"{attr} will run the port's pass with NAF's upsampling in bands: "
                           f"{problem}", problem, kind="banded_upsampler", differs=DIFFERS_WHOLE)
        elif problem:
            fallback(sink, f"{attr} will run as the port computes it: {problem}", problem)


def _name(pipeline, extractor) -> str:
    return next((attr for attr in EXTRACTORS if getattr(pipeline, attr, None) is extractor),
                "image_cond_model")
