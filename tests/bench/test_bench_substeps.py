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
