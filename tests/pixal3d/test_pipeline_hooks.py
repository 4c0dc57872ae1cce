"""The run's hooks on the stand-in port's real pipeline object are objects that install and
remove whole (``stageload.pixal3d.pipeline_hooks``): built with the run, off again after
``close()`` (the pipeline's methods are its class's once more), re-installable, and a hook
that fails half-way takes back what it had put on."""
from __future__ import annotations

import pytest

from stageload.errors import HookError
from stageload.pixal3d.pipeline_hooks import (
    SAMPLERS,
    Hook,
    Hooks,
    LatentRecorder,
    SamplerProgress,
    StageHooks,
    samplers,
)
from stageload.pixal3d.releases import PlanReleases
from tests.pixal3d.runs import new_run

STAGE_METHODS = ("preprocess_image", "get_proj_cond_ss", "get_proj_cond_shape", "decode_latent")


def _hooked(pipeline) -> dict:
    """Which methods carry an instance-level hook: the pipeline's and each sampler's."""
    out = {"pipeline": sorted(m for m in STAGE_METHODS if m in vars(pipeline))}
    for attr in SAMPLERS:
        sampler = getattr(pipeline, attr, None)
        out[attr] = sorted(m for m in ("sample", "sample_once") if m in vars(sampler))
    return out


@pytest.mark.parametrize("load", ["staged", "eager"])
def test_the_hooks_come_with_the_run_and_go_with_close(standin_dir, standin_weights, load):
    run = new_run(standin_dir, load=load)
    pipeline = run.pipeline
    assert list(samplers(pipeline)), "the stand-in has hookable samplers"
    on = _hooked(pipeline)
    assert on["pipeline"] == sorted(STAGE_METHODS)
    assert all(on[attr] == ["sample", "sample_once"] for attr in SAMPLERS)
    kinds = [type(h) for h in run.hooks.hooks]
    # a staged run also releases inside its stages: after the 512 shape sampler and, with lean
    # working memory, after both conditioning passes (three more handles)
    releases = [PlanReleases] if load == "staged" else []
    assert kinds == [StageHooks, SamplerProgress, LatentRecorder, *releases]
    # two hooks on each sampler's sample (progress, then latents outermost), one on sample_once
    assert sum(len(h.handles) for h in run.hooks.hooks) == 4 + 3 * 3 + 3 * len(releases)
    run.close()
    off = _hooked(pipeline)
    assert off["pipeline"] == [] and all(off[attr] == [] for attr in SAMPLERS)
    run.hooks.install(pipeline)  # an object: it goes back on as it was
    assert _hooked(pipeline) == on
    run.hooks.remove()
    run.hooks.remove()  # twice is fine
    assert _hooked(pipeline)["pipeline"] == []


def test_a_hook_that_fails_half_way_removes_what_it_installed(standin_dir, standin_weights):
    run = new_run(standin_dir)
    pipeline = run.pipeline
    run.close()

    class Broken(Hook):
        def targets(self, pipeline):
            return [(pipeline, "decode_latent", lambda *a, **k: None, None),
                    (pipeline, "no_such_method", lambda *a, **k: None, None)]

    first = StageHooks(run)
    with pytest.raises(HookError):
        Hooks(first, Broken()).install(pipeline)
    assert first.handles == [] and _hooked(pipeline)["pipeline"] == []
