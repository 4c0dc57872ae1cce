"""Releases inside a stage: a model goes as soon as the last call of the port's ``run()`` that
reads it returns, not when the next stage begins. Both are exact (no computation changes; a
model read again later is loaded again from the same files, the generators restored around the
load) and both show in the trace as ``release`` events with a ``reason``.

- **After its sampler** (:data:`plan.RELEASE_AFTER_SAMPLER`, staged mode always): the 512
  shape flow is read by ``sample_shape_slat`` only, yet the plan keeps ``shape_512``'s models
  until ``shape_1024`` begins, so it stayed loaded while the shape decoder loaded and ran its
  ``upsample``. It is released when ``shape_slat_sampler.sample`` returns in ``shape_512``
  (the same sampler object serves ``shape_1024``: the stage decides). It costs nothing: no
  later stage of the run lists it. The port's ``sample_shape_slat`` touches the flow after
  its sampler only under ``low_vram`` (``flow_model.cpu()``), which staged mode turns off.
- **After each conditioning pass** (:data:`plan.CONDITIONING_MODELS`: DINOv3 and NAF) when
  ``conditioning`` is on: released when ``get_proj_cond_ss`` / ``get_proj_cond_shape``
  returns, loaded again (``reload``) by the next stage's pass, where
  :class:`.pipeline_hooks.StageHooks` loads them before it runs. This takes their bytes (1.2 GB
  of DINOv3 on the real weights, SPEC §1) out of every phase after a conditioning pass: the
  flows' steps, the shape decoder's ``upsample``. It costs reading them again at ``shape_512``,
  ``shape_1024`` and ``texture`` (3 × 1.2 GB per image; from the file cache when it still
  holds the file; the prefetch does not read them ahead, since the stage that releases them
  lists them), said in each such ``release`` event.

  **On under ``--working-memory lean`` (the default), not an option of its own**, because:
  lean's contract is the port's output with each stage's memory held down, which this keeps
  (the bit-identity tests of ``tests/pixal3d/test_staged_run.py`` run with it on); its one
  cost, a second read of a 1.2 GB file three times per image (seconds on a Mac's SSD),
  is small against the minutes of sampling, while the 1.2 GB it frees is what keeps a stage
  of a 16 GB Mac's run out of swap (docs/pixal3d.md, "Projected per-stage peaks"); and the
  product already has the knob that trades memory for reads, ``--keep-resident``: a budget
  that still covers the conditioning models (beyond what it keeps across stage gaps now)
  keeps them loaded through sampling, with no ``release``. A third knob for the same trade
  would only let the two disagree. ``--working-memory port`` installs nothing of lean and
  keeps them too.

Installed by ``adapter.Pixal3DRun`` in staged mode, after the working-memory parts (its
releases come after the lean conditioning pass and its cache emptying have returned).
"""
from __future__ import annotations

from typing import Callable

from meshfacts.units import format_size

from ..releasing import module_bytes
from .pipeline_hooks import Hook, Target
from .plan import CONDITIONING_MODELS, RELEASE_AFTER_SAMPLER

CONDITIONING_PASSES = ("get_proj_cond_ss", "get_proj_cond_shape")
"""The pipeline's conditioning passes, after each of which the conditioning models go."""


def after_sampler_reason(model: str, stage: str) -> str:
    """The ``reason`` of the ``release`` of ``model`` when ``stage``'s sampler returns."""
    return (f"{model} is read by nothing after its sampler: released as the sampler returns, "
            f"before the rest of {stage} (the shape decoder's load and upsample); not read "
            f"again in this run")


def conditioning_reason(size: int) -> str:
    """The ``reason`` of a conditioning model's ``release`` after a pass; ``size``: the bytes
    of the conditioning models released (read again at the next stage's pass)."""
    return (f"read by the conditioning pass only: released while the flow samples "
            f"(--working-memory lean); costs reading the conditioning models again "
            f"({format_size(size)}) at the next stage's conditioning pass; a --keep-resident "
            f"budget that covers them keeps them loaded")


class PlanReleases(Hook):
    """The in-stage releases of the module docstring on one staged run's pipeline.

    ``run``: the ``adapter.Pixal3DRun`` (reads ``models``, ``stage``, ``keep_resident``,
    ``kept``); ``conditioning``: release the conditioning models after each pass (the
    adapter: ``--working-memory lean``). Does nothing in a run without ``StagedModels``.
    Attribute ``released``: ``(stage, model)`` of each release it made, in order.
    """

    def __init__(self, run, *, conditioning: bool):
        super().__init__()
        self.run = run
        self.conditioning = bool(conditioning)
        self.released: list[tuple[str, str]] = []

    def targets(self, pipeline) -> list[Target]:
        out: list[Target] = []
        for stage, (attr, model) in RELEASE_AFTER_SAMPLER.items():
            sampler = getattr(pipeline, attr, None)
            if sampler is not None and hasattr(sampler, "__dict__"):
                out.append((sampler, "sample", None, self._after_sampler(stage, model)))
        if self.conditioning:
            out += [(pipeline, name, None, self.after_conditioning)
                    for name in CONDITIONING_PASSES]
        return out

    def _after_sampler(self, stage: str, model: str) -> Callable:
        def after(result, *args, **kwargs) -> None:
            models = self.run.models
            if models is not None and self.run.stage == stage:
                self._release(model, after_sampler_reason(model, stage))
        return after

    def after_conditioning(self, result, *args, **kwargs) -> None:
        """Release the conditioning models loaded now, unless the keep-resident budget left
        covers them (:meth:`budget_left`)."""
        models = self.run.models
        if models is None:
            return
        loaded = dict(models.items())
        size = sum(module_bytes(loaded[n]) for n in CONDITIONING_MODELS if n in loaded)
        if size == 0 or size <= self.budget_left():
            return
        for name in CONDITIONING_MODELS:
            if name in loaded:
                self._release(name, conditioning_reason(size))

    def budget_left(self) -> int:
        """Bytes of ``--keep-resident`` not taken by the models kept across a gap now."""
        run = self.run
        loaded = dict(run.models.items())
        kept = sum(module_bytes(loaded[n]) for n in run.kept.get(run.stage, ()) if n in loaded)
        return int(run.keep_resident) - kept

    def _release(self, model: str, reason: str) -> None:
        if self.run.models.release(model, reason=reason):
            self.released.append((self.run.stage, model))
