"""The benchmark reads events the way the product writes them — a ``stage``
event with a ``parent`` is a sub-step inside its stage, never a stage — and a stage whose
working memory was never allocated fails the benchmark instead of shrinking its figure."""
from __future__ import annotations

import pytest

from bench.pixal3d import analysis
from bench.pixal3d.pipeline import top_stage
from bench.pixal3d.working import WorkingMemory

EXPORT_EVENTS = [
    {"event": "stage", "t": 1.0, "stage": "decode", "index": 6, "count": 8},
    {"event": "ready", "t": 1.1, "stage": "decode", "seconds": 0.1, "released_bytes": 0},
    {"event": "stage", "t": 2.0, "stage": "export", "index": 7, "count": 8},
    {"event": "ready", "t": 2.1, "stage": "export", "seconds": 0.1, "released_bytes": 0},
    {"event": "stage", "t": 2.2, "stage": "prepare", "parent": "export"},
    {"event": "stage", "t": 2.5, "stage": "write", "parent": "export"},
]


def test_sub_steps_are_not_taken_for_stages():
    current = None
    for event in EXPORT_EVENTS:
        current = top_stage(event) or current
    assert current == "export"
    windows = analysis.stage_windows(EXPORT_EVENTS, end=3.0)
    assert [w["stage"] for w in windows] == ["decode", "export"]
    assert windows[-1]["end"] == 3.0


def test_the_export_share_is_allocated_under_export_not_a_sub_step():
    working = WorkingMemory({"decode": 4096, "export": 8192}, hold=0)
    current = None
    for event in EXPORT_EVENTS:
        current = top_stage(event) or current
    assert working.allocate(current) == 8192
    working.finish()
    with pytest.raises(ValueError, match="write"):
        working.allocate("write")  # what the old reading did: silently 0 bytes


def test_a_stage_never_allocated_fails_the_check():
    working = WorkingMemory({"decode": 4096, "export": 8192, "camera": 0}, hold=0)
    working.allocate("decode")
    working.finish()
    with pytest.raises(RuntimeError, match="export"):
        working.check(["camera", "decode", "export"])
    working.allocate("export")
    working.check(["camera", "decode", "export"])  # a stage with no share needs none


def _sample(t: float, footprint: int) -> dict:
    return {"event": "sample", "t": t, "footprint": footprint, "rss": footprint, "swap": 0}


def test_compute_run_rise_is_the_peak_over_the_stage_start_less_its_loads():
    """The compute run's working memory of a stage: its peak over the least footprint sampled
    between the previous stage's ``bench_idle`` and its ``stage`` event; a load inside the
    window is weights, not computation, and is taken out; the runtime at the stage is its start
    less the weights resident then (the idle event's; unknown without it); setup (no idle
    before it) is left out, as is a stage with no idle since the previous one began (export
    here)."""
    mib = 2**20
    records = [
        {"event": "stage", "t": 0.0, "stage": "setup", "index": 0, "count": 4},
        {"event": "ready", "t": 0.1, "stage": "setup", "seconds": 0.1, "released_bytes": 0},
        {"event": "load", "t": 0.2, "model": "sparse_structure_flow_model", "stage": "setup",
         "bytes": 100 * mib, "seconds": 0.1},
        _sample(0.5, 500 * mib),
        {"event": "bench_idle", "t": 1.0, "after": "setup", "resident_bytes": 100 * mib},
        _sample(1.1, 520 * mib), _sample(1.2, 510 * mib),
        {"event": "stage", "t": 1.3, "stage": "structure", "index": 1, "count": 4},
        {"event": "ready", "t": 1.31, "stage": "structure", "seconds": 0.0, "released_bytes": 0},
        _sample(1.5, 700 * mib), _sample(1.6, 540 * mib),
        {"event": "bench_idle", "t": 2.0, "after": "structure"},  # no resident_bytes
        _sample(2.1, 515 * mib),
        {"event": "stage", "t": 2.3, "stage": "decode", "index": 2, "count": 4},
        {"event": "ready", "t": 2.31, "stage": "decode", "seconds": 0.0, "released_bytes": 0},
        {"event": "load", "t": 2.4, "model": "shape_slat_decoder", "stage": "decode",
         "bytes": 50 * mib, "seconds": 0.1},
        _sample(2.5, 665 * mib),
        {"event": "stage", "t": 3.0, "stage": "export", "index": 3, "count": 4},
        {"event": "ready", "t": 3.01, "stage": "export", "seconds": 0.0, "released_bytes": 0},
        _sample(3.2, 530 * mib),
    ]
    rise = analysis.compute_working(records)
    assert sorted(rise) == ["decode", "structure"]
    assert rise["structure"] == {"start": 510 * mib, "weights": 100 * mib, "runtime": 410 * mib,
                                 "peak": 700 * mib, "loaded": 0, "working": 190 * mib}
    assert rise["decode"]["loaded"] == 50 * mib
    assert rise["decode"]["weights"] is None and rise["decode"]["runtime"] is None
    assert rise["decode"]["working"] == (665 - 515 - 50) * mib
