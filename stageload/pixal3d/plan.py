"""Stage plans for Pixal3D's cascades, and the keep-resident policy.

A plan maps each stage, in run order, to the models it needs (SPEC §2.5). Model names are the
port's ``pipeline.models`` keys plus four the adapter adds for weights the port keeps outside
that dict:

- ``rembg_model``: the background remover's network (``pipeline.rembg_model.model``),
- ``camera_estimator``: MoGe-2 (``generate_mps.load_moge_model``),
- ``image_cond_backbone``: the one DINOv3 backbone the four extractors share,
- ``naf``: the one NAF upsampler the three NAF extractors share.

``1536_cascade`` has the same plan: in the port's ``run()`` it differs from ``1024_cascade``
only in the target resolution (1536, lowered in steps of 128 while the token count is over
``max_num_tokens``), which changes ``grid_resolution_override`` for the 1024/texture
extractor passes, not which models run or in which order.
"""
from __future__ import annotations

from typing import Mapping, Optional

from meshfacts.choices import PIPELINE_TYPES

STAGES = ("setup", "preprocess", "camera", "structure", "shape_512", "shape_1024", "texture",
          "decode", "export")

#: The models of each stage of ``1024_cascade`` (SPEC §2.5).
PLAN_1024 = {
    "setup": (),
    "preprocess": ("rembg_model",),
    "camera": ("camera_estimator",),
    "structure": ("image_cond_backbone", "sparse_structure_flow_model", "sparse_structure_decoder"),
    "shape_512": ("image_cond_backbone", "naf", "shape_slat_flow_model_512", "shape_slat_decoder"),
    "shape_1024": ("image_cond_backbone", "naf", "shape_slat_flow_model_1024"),
    "texture": ("image_cond_backbone", "naf", "tex_slat_flow_model_1024"),
    "decode": ("shape_slat_decoder", "tex_slat_decoder"),
    "export": (),
}

#: One plan per pipeline type (``choices.PIPELINE_TYPES``); the cascades share one.
PLANS = {pipeline_type: PLAN_1024 for pipeline_type in PIPELINE_TYPES}

#: Models a stage releases when one of its samplers returns, because nothing after that sampler
#: in the port's ``run()`` reads them: stage → ``(sampler attribute, model)``. The 512 shape flow
#: is read by ``sample_shape_slat`` only; the rest of ``shape_512`` (the shape decoder's load and
#: its ``upsample``) runs without it.
RELEASE_AFTER_SAMPLER = {"shape_512": ("shape_slat_sampler", "shape_slat_flow_model_512")}

#: The conditioning models: read by a stage's conditioning pass (``get_proj_cond_ss``,
#: ``get_proj_cond_shape``) and by nothing while its flow samples or its decoder runs.
CONDITIONING_MODELS = ("image_cond_backbone", "naf")

#: Which ``get_proj_cond_shape`` pass begins which stage: extractor attribute → stage.
SHAPE_PASS_STAGE = {
    "image_cond_model_shape_512": "shape_512",
    "image_cond_model_shape_1024": "shape_1024",
    "image_cond_model_tex_1024": "texture",
}


def plan_for(pipeline_type: str) -> dict[str, tuple[str, ...]]:
    """The plan (stage → model names, in run order) of ``pipeline_type``.
    Raises ``ValueError`` naming the known types."""
    try:
        return dict(PLANS[pipeline_type])
    except KeyError:
        raise ValueError(f"unknown pipeline type {pipeline_type!r}; known: "
                         f"{', '.join(PLANS)}") from None


def keep_across_gap(plan: Mapping[str, tuple[str, ...]], entering: str, loaded: Mapping[str, int],
                    budget: int) -> list[str]:
    """Models to keep loaded on entering ``entering`` although it does not list them.

    A candidate is loaded now, not listed by ``entering``, and listed by a later stage of this
    run. Candidates are taken soonest-needed first while their total size stays within
    ``budget`` (bytes; 0 keeps nothing). ``loaded``: name → bytes of the models loaded now.
    Returns the names to keep (the caller pins them until a stage lists them).
    """
    order = list(plan)
    if entering not in plan:
        raise ValueError(f"stage {entering!r} is not in the plan")
    later = order[order.index(entering) + 1:]
    candidates = []
    for name, size in loaded.items():
        if name in plan[entering]:
            continue
        next_use: Optional[int] = next((i for i, stage in enumerate(later) if name in plan[stage]),
                                       None)
        if next_use is not None:
            candidates.append((next_use, size, name))
    keep, total = [], 0
    for _, size, name in sorted(candidates):
        if total + size <= budget:
            keep.append(name)
            total += size
    return keep
