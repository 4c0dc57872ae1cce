"""The real 1024_cascade's sizes, the stage plan, and the per-stage working memory derived from
them.

Every figure here is in bytes (1 GB = 1e9 bytes) unless a name says otherwise.

Sources:
- Weight sizes: the stand-in port's ``make_weights.REAL_BYTES`` (standin/port),
  which writes the files the benchmark loads: the flows and decoders computed from their
  released configs (texture flow 2.81 GB, shape decoder 0.95 GB, 14.14 GB over the eight loads
  of a staged run: SPEC §1's 2.6, 0.9 and 13.2, which are GiB), DINOv3 ViT-L fp32 1.2 GB from
  SPEC §1; the other hub models' sizes are that module's stated assumption. Names are mapped
  to the adapter's plan names (``stageload.pixal3d.plan``): ``rembg_model`` = BiRefNet,
  ``camera_estimator`` = MoGe-2, ``image_cond_backbone`` = DINOv3, ``naf`` = NAF.
- The plan: ``stageload.pixal3d.plan.PLAN_1024`` (SPEC §2.5).
- Staged peaks per stage: SPEC §1 (48 GB M5 Pro, Activity Monitor's footprint).

Working memory of a stage (the memory the stage needs besides its weights: activations, the
sampler's latents, the mesh) is derived from SPEC §1's staged column:

    working(stage) = staged_peak(stage) - staged_peak(setup) - weights the plan lists for stage

``staged_peak(setup)`` (2.9 GB, nothing loaded yet) is the port's runtime on the Mac (Python,
torch, Metal); it is not a stage's working memory and is not scaled: the benchmark measures this
machine's own runtime baseline instead. Ranges in SPEC §1 (e.g. 11.4–11.5 GB) use their midpoint.
``preprocess`` has no row in SPEC §1; its working memory (0.5 GB) is an assumption.
"""
from __future__ import annotations

from stageload.pixal3d.plan import PLAN_1024
from standin import weights_module

make_weights = weights_module()  # the stand-in's weights writer (sizes and files)

GB = 10**9

#: Adapter plan name -> stand-in ``make_weights.REAL_BYTES`` key, where they differ.
STANDIN_KEY = {"rembg_model": "birefnet", "camera_estimator": "moge",
               "image_cond_backbone": "dinov3", "naf": "naf"}

#: Weight bytes of each model of the plan in the real pipeline (adapter names).
REAL_WEIGHT_BYTES: dict[str, int] = {
    name: make_weights.REAL_BYTES[STANDIN_KEY.get(name, name)]
    for name in sorted({m for models in PLAN_1024.values() for m in models})
}

#: The seven pipeline models of 1024_cascade (SPEC §2.5).
SEVEN_MODELS = (
    "sparse_structure_flow_model", "sparse_structure_decoder", "shape_slat_flow_model_512",
    "shape_slat_flow_model_1024", "shape_slat_decoder", "tex_slat_flow_model_1024",
    "tex_slat_decoder",
)

#: The stage plan of SPEC §2.5, in run order: stage -> models it lists.
REAL_PLAN: dict[str, tuple[str, ...]] = dict(PLAN_1024)

#: SPEC §1 table, bytes: stage -> (eager text, staged peak bytes as (low, high)).
SPEC_TABLE: dict[str, tuple[str, tuple[int, int] | None]] = {
    "setup": ("20.4 GB", (int(2.9 * GB), int(2.9 * GB))),
    "camera": ("23.2 GB", (int(6.7 * GB), int(6.7 * GB))),
    "structure": ("22.2 GB", (int(10.9 * GB), int(10.9 * GB))),
    "shape_512": ("26.6 GB", (int(11.4 * GB), int(11.5 * GB))),
    "shape_1024": ("30.5 GB", (int(13.1 * GB), int(13.1 * GB))),
    "texture": ("stopped by the guard at 44.2 GB", (int(30.1 * GB), int(30.1 * GB))),
    "decode": ("not reached", (int(17.9 * GB), int(18.4 * GB))),
    "export": ("not reached", (int(69.6 * GB), int(70.2 * GB))),
}

#: Working memory assumed where SPEC §1 has no row (bytes, real scale).
ASSUMED_WORKING_BYTES = {"preprocess": int(0.5 * GB)}

#: The bounded export engine's peak at its defaults on the full-size 7.9 M-face asset
#: (``python -m runner export``, 2.8 GiB: bench/results/2026-12-01/export_engine/
#: export_engine.json run ``defaults``; docs/pixal3d.md "The bounded export engine"). The
#: export stage's working memory with the product's default engine (it holds no weights).
BOUNDED_EXPORT_PEAK = int(2.8 * 2**30)

#: SPEC §1: eight loads read this many bytes in 24 s.
SPEC_LOADED_BYTES = int(13.2 * GB)


def plan_weight_bytes(stage: str, sizes: dict[str, int] | None = None) -> int:
    """Bytes of the weights ``REAL_PLAN`` lists for ``stage`` (real sizes unless ``sizes`` given).

    Raises ``KeyError`` naming the stage or model when either is unknown.
    """
    sizes = REAL_WEIGHT_BYTES if sizes is None else sizes
    return sum(sizes[m] for m in REAL_PLAN[stage])


def real_working_bytes(export: str = "port") -> dict[str, dict]:
    """Per-stage working memory of the real run, derived from SPEC §1 (bytes, real scale).

    ``export``: the engine whose working memory the ``export`` stage holds — ``port`` (the
    port's ``to_glb``: SPEC §1's 69.6–70.2 GB) or ``bounded`` (the product's default engine:
    :data:`BOUNDED_EXPORT_PEAK`, measured). The compute stages' figures are SPEC §1's, measured
    with the port's own computations: a formula here, the same for ``lean`` (its savings are
    measured by the working-memory benches, docs/pixal3d.md "Working memory").

    Returns ``{stage: {"working": int, "staged_peak": int | None, "weights": int,
    "runtime": int, "source": str}}`` for every stage of ``REAL_PLAN``; ``working`` is never
    negative (``setup`` is 0 by definition). Raises ``ValueError`` for another ``export``.
    """
    if export not in ("port", "bounded"):
        raise ValueError(f"export must be port or bounded, got {export!r}")
    runtime = SPEC_TABLE["setup"][1][0]
    out = {}
    for stage in REAL_PLAN:
        weights = plan_weight_bytes(stage)
        row = SPEC_TABLE.get(stage)
        if stage == "setup":
            working, source, peak = 0, "runtime baseline, not a stage's working memory", runtime
        elif stage == "export" and export == "bounded":
            working, peak = BOUNDED_EXPORT_PEAK, None
            source = "the bounded export engine's measured peak at its defaults (full size)"
        elif row is None:
            working, peak = ASSUMED_WORKING_BYTES[stage], None
            source = "assumed (no row in SPEC §1)"
        else:
            low, high = row[1]
            peak = (low + high) // 2
            working = max(0, peak - runtime - weights)
            source = "SPEC §1 staged peak - setup peak - plan weights"
        out[stage] = {"working": working, "staged_peak": peak, "weights": weights,
                      "runtime": runtime, "source": source}
    return out


def scaled_working_bytes(scale: float, export: str = "port") -> dict[str, int]:
    """Working memory per stage at ``scale`` (e.g. 1/8), bytes, rounded down to 4 KiB pages;
    ``export`` as :func:`real_working_bytes`.

    Raises ``ValueError`` when ``scale`` is not in (0, 1] or ``export`` is unknown.
    """
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}; e.g. 0.125 for 1/8")
    return {s: int(v["working"] * scale) // 4096 * 4096
            for s, v in real_working_bytes(export).items()}


def check_totals() -> dict:
    """The totals SPEC §1 fixes, recomputed from ``REAL_WEIGHT_BYTES`` (bytes)."""
    seven = sum(REAL_WEIGHT_BYTES[m] for m in SEVEN_MODELS)
    return {"seven_models": seven,
            "eight_loads": seven + REAL_WEIGHT_BYTES["shape_slat_decoder"],
            "spec_eight_loads": SPEC_LOADED_BYTES}
