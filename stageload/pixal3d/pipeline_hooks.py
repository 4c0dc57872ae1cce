"""The hooks a Pixal3D run puts on the port's pipeline object, as small objects that are
installed and removed whole (the way ``accelerate.hooks.ModelHook`` / ``SequentialHook``
compose), each made of ``stageload.on_call`` handles on that one instance:

- :class:`StageHooks`: the stage boundaries — ``preprocess_image`` (enters ``preprocess``; on
  return enters ``camera``, which releases the background remover), ``get_proj_cond_ss``
  (``structure``), ``get_proj_cond_shape`` (``shape_512``, ``shape_1024`` or ``texture``, told
  apart by which extractor object is passed), ``decode_latent`` (``decode``);
- :class:`SamplerProgress`: ``progress`` events from each sampler's ``sample`` (0, with its
  number of steps) and ``sample_once`` (one step done);
- :class:`LatentRecorder`: each sampler's output, kept in ``run.last_latents`` and written to
  the run's fingerprint recorder;
- :class:`Hooks`: several hooks as one (installed in order, removed in reverse).

The hooks call ``run.enter`` / ``run.emit`` when they fire (not bound methods taken at install
time), so a hook put on the run itself (the benchmark hooks ``enter``) sees every stage.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator, Optional

from ..hooks import CallHook, on_call
from .errors import PortVersionError
from .plan import SHAPE_PASS_STAGE

SAMPLERS = ("sparse_structure_sampler", "shape_slat_sampler", "tex_slat_sampler")
"""The pipeline attributes holding the port's flow samplers."""

SAMPLER_STAGE_KEY = {"structure": "sparse_structure", "shape_512": "shape_512",
                     "shape_1024": "shape_1024", "texture": "texture"}
"""Stage → the key its sampler output is kept under in ``last_latents`` and the fingerprint."""

Target = tuple[Any, str, Optional[Callable], Optional[Callable]]
"""``(object, method name, before, after)``: one ``on_call`` to make."""


class Hook:
    """A set of ``on_call`` handles on the objects of one pipeline, installed and removed
    together. Subclasses say what to hook in :meth:`targets`. ``install`` raises
    ``stageload.errors.HookError`` when a target cannot be hooked (handles already made are
    removed again)."""

    def __init__(self):
        self.handles: list[CallHook] = []

    def targets(self, pipeline) -> list[Target]:
        """The calls to hook on ``pipeline`` (and objects it holds)."""
        raise NotImplementedError

    def install(self, pipeline) -> Hook:
        """Hook ``pipeline``; returns ``self``."""
        try:
            for obj, method, before, after in self.targets(pipeline):
                self.handles.append(on_call(obj, method, before=before, after=after))
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Take every handle off (last installed first); safe to call twice."""
        for handle in reversed(self.handles):
            handle.remove()
        self.handles = []


class Hooks(Hook):
    """Several hooks as one: installed in the order given, removed in reverse."""

    def __init__(self, *hooks: Hook):
        super().__init__()
        self.hooks = list(hooks)

    def install(self, pipeline) -> Hooks:
        done: list[Hook] = []
        try:
            for hook in self.hooks:
                done.append(hook.install(pipeline))
        except BaseException:
            for hook in reversed(done):
                hook.remove()
            raise
        return self

    def remove(self) -> None:
        for hook in reversed(self.hooks):
            hook.remove()


def samplers(pipeline) -> Iterator[Any]:
    """The pipeline's samplers that can carry a per-instance hook (they have a ``__dict__``)."""
    for attr in SAMPLERS:
        sampler = getattr(pipeline, attr, None)
        if sampler is not None and hasattr(sampler, "__dict__"):
            yield sampler


class StageHooks(Hook):
    """The stage boundaries of the port's ``run()`` → ``run.enter(stage)``; in staged mode
    (``run.models`` set) each pass also loads what it uses up front (the backbone; the NAF for
    a shape or texture pass). Raises ``PortVersionError`` when ``get_proj_cond_shape`` gets an
    extractor that is none of the pipeline's three."""

    def __init__(self, run):
        super().__init__()
        self.run = run

    def targets(self, pipeline) -> list[Target]:
        run = self.run

        def enter(stage: str) -> Callable:
            return lambda *a, **k: run.enter(stage)

        def structure(*args, **kwargs) -> None:
            run.enter("structure")
            if run.models is not None:
                run.models["image_cond_backbone"]

        def shape_pass(image_cond_model, *args, **kwargs) -> None:
            for attr, stage in SHAPE_PASS_STAGE.items():
                if image_cond_model is getattr(pipeline, attr):
                    run.enter(stage)
                    if run.models is not None:
                        run.models["image_cond_backbone"]
                        run.models["naf"]
                    return
            raise PortVersionError("get_proj_cond_shape was called with an extractor that is "
                                   "none of image_cond_model_shape_512/_shape_1024/_tex_1024.",
                                   "This port version calls it differently; use --load eager.",
                                   ("get_proj_cond_shape",))

        return [(pipeline, "preprocess_image", enter("preprocess"), enter("camera")),
                (pipeline, "get_proj_cond_ss", structure, None),
                (pipeline, "get_proj_cond_shape", shape_pass, None),
                (pipeline, "decode_latent", enter("decode"), None)]


class SamplerProgress(Hook):
    """``progress`` events (``stage``, ``fraction`` 0..1, ``step``, ``steps``) through
    ``run.emit``: 0 when a sampler's ``sample`` begins (its number of steps: the ``steps`` it
    is given, else the default of its class's ``sample``), then one per ``sample_once`` (one
    step of its loop) where the sampler has it."""

    def __init__(self, run):
        super().__init__()
        self.run = run
        self.total = 0
        self.done = 0

    def targets(self, pipeline) -> list[Target]:
        out: list[Target] = []
        for sampler in samplers(pipeline):
            out.append((sampler, "sample", self._begins(sampler), None))
            if callable(getattr(sampler, "sample_once", None)):
                out.append((sampler, "sample_once", None, self._step_done))
        return out

    def _begins(self, sampler) -> Callable:
        default = inspect.signature(type(sampler).sample).parameters.get("steps")

        def before(*args, **kwargs) -> None:
            steps = kwargs.get("steps", getattr(default, "default", None))
            self.total = int(steps) if isinstance(steps, int) and steps > 0 else 0
            self.done = 0
            self.run.emit("progress", stage=self.run.stage, fraction=0.0, step=0,
                          steps=self.total)
        return before

    def _step_done(self, result, *args, **kwargs) -> None:
        self.done += 1
        fraction = min(1.0, self.done / self.total) if self.total else 0.0
        self.run.emit("progress", stage=self.run.stage, fraction=fraction, step=self.done,
                      steps=self.total)


class LatentRecorder(Hook):
    """After each sampler's ``sample``: its ``samples`` kept in ``run.last_latents`` under the
    stage's key (``SAMPLER_STAGE_KEY``; a key seen again gets ``_N``) and recorded by
    ``run.recorder`` (a ``fingerprint.FingerprintRecorder``) when the run has one. Output that
    holds NaN or infinite values is said at once — a ``warning`` event, and ``run.nonfinite``
    (key → "N of M values are NaN or infinite") for the error an empty mesh then gets — since
    nothing downstream can make a surface of it (damaged weights, or a numerical failure)."""

    def __init__(self, run):
        super().__init__()
        self.run = run

    def targets(self, pipeline) -> list[Target]:
        return [(sampler, "sample", None, self._record) for sampler in samplers(pipeline)]

    def _record(self, result, *args, **kwargs) -> None:
        run = self.run
        samples = getattr(result, "samples", None)
        key = SAMPLER_STAGE_KEY.get(run.stage or "", run.stage or "unknown")
        if samples is None:
            return
        name = key if key not in run.last_latents else f"{key}_{len(run.last_latents)}"
        run.last_latents[name] = samples
        if run.recorder is not None:
            run.recorder.record(key, samples)
        said = nonfinite_values(samples)
        if said is not None:
            run.nonfinite[name] = said
            run.emit("warning", message=f"The {key} sampler's output is not finite: {said}; "
                     "the mesh made from it will be empty or wrong (the weights may be "
                     "damaged).", source="stageload.pixal3d (sampler output check)")


def nonfinite_values(value) -> str | None:
    """"N of M values are NaN or infinite" for the floating tensors of a sampler output (a
    tensor, or a sparse tensor's ``feats``; ``fingerprint.tensor_parts``), None when all are
    finite or there is nothing to look at."""
    import torch

    from .fingerprint import tensor_parts
    try:
        parts = tensor_parts(value)
    except TypeError:
        return None
    bad = total = 0
    for tensor in parts.values():
        if tensor.is_floating_point() and tensor.numel():
            bad += int((~torch.isfinite(tensor.detach())).sum())
            total += tensor.numel()
    return f"{bad:,} of {total:,} values are NaN or infinite" if bad else None
