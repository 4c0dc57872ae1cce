"""The panel's content at every event of event streams recorded from the real runner.

Fixtures (``fixtures/*.ndjson``) are stdout of ``python -m runner`` captured verbatim:
``builtin_goblin_512.ndjson``: ``typical_humanoid_goblin.png --texture-size 512 --seed 3``;
``guard_timeout.ndjson``: ``goblin.png --wait-free 99% --start-timeout 2`` (admission refused).
Expected values are derived from each event itself, independently of ``JobState``'s code.
"""
import json
from pathlib import Path

import pytest

from blender_addon.state import (CANCELLED, DONE, FAILED, IMPORTING, JobState, human_bytes,
                                 human_seconds)

FIX = Path(__file__).parent / "fixtures"


def load(name):
    return [json.loads(line) for line in (FIX / name).read_text().splitlines() if line.strip()]


def test_human_units_are_the_projects_one_byte_formatter():
    """The panel prints sizes exactly as stageload.units does (the guard, summary and chart):
    binary multiples labelled KiB/MiB/GiB, so one peak reads as one figure everywhere."""
    from stageload.units import format_size

    for n in (0, 1536, 391311360, 44.2 * 1024**3, -2 * 1024**2, 445_000_000):
        assert human_bytes(n) == format_size(n)
    assert human_bytes(None) == "unknown"
    assert human_bytes(391311360) == "373.2 MiB"
    assert human_bytes(44.2 * 1024**3) == "44.2 GiB"
    assert human_seconds(4.25) == "4.2 s"
    assert human_seconds(75.2) == "1:15"


def test_recorded_builtin_run_at_every_event():
    events = load("builtin_goblin_512.ndjson")
    hello = events[0]
    assert hello["event"] == "hello"
    names = hello["stages"]
    st = JobState()
    st.begin(hello["image"], now=hello["t"])
    stage_index, stage_frac, last_mem, seen_stage = None, 0.0, None, False
    for ev in events:
        st.apply(ev)
        view = st.view(now=ev["t"])
        kind = ev["event"]
        assert [r[0] for r in view.stage_rows] == names, kind
        if kind == "stage":
            stage_index, stage_frac, seen_stage = ev["index"], 0.0, True
            assert ev["count"] == len(names)
        elif kind == "progress":
            stage_frac = ev["fraction"]
        elif kind == "memory":
            last_mem = ev
        statuses = [r[1] for r in view.stage_rows]
        if kind == "result":
            assert statuses == ["done"] * len(names)
            assert view.progress == 1.0
            assert view.status == IMPORTING
            assert ev["output"] in view.result_text
            assert human_bytes(ev["peak"]) in view.result_text
            assert st.peak == ev["peak"]
        elif stage_index is None:
            assert statuses == ["pending"] * len(names)
            assert view.progress == 0.0
        else:
            assert statuses == (["done"] * stage_index + ["running"]
                                + ["pending"] * (len(names) - stage_index - 1)), kind
            assert view.progress == pytest.approx((stage_index + stage_frac) / len(names))
            assert f"{names[stage_index]} ({stage_index + 1}/{len(names)})" in view.progress_text
            assert f"{stage_frac * 100:.0f} %" in view.progress_text
        if last_mem is not None:
            assert f"footprint {human_bytes(last_mem['footprint'])}" in view.memory_text
            assert f"peak {human_bytes(last_mem['peak'])}" in view.memory_text
            assert f"swap {human_bytes(last_mem['swap'])}" in view.swap_text
            assert f"available {human_bytes(last_mem['available'])}" in view.swap_text
        else:
            assert view.memory_text == ""
        if kind == "guard":
            r = ev["readings"]
            assert view.guard_text == f"admitted: {100 * r['available'] / r['total']:.0f} % free"
        # Elapsed time counts from the spawn to this event.
        assert view.elapsed_text == f"elapsed {human_seconds(ev['t'] - hello['t'])}"
    assert seen_stage
    st.mark_done(now=events[-1]["t"] + 0.5)
    assert st.view().status == DONE and st.view().progress_text == "done"


def test_recorded_guard_timeout():
    events = load("guard_timeout.ndjson")
    st = JobState()
    st.begin(events[0]["image"], now=events[0]["t"])
    for ev in events:
        st.apply(ev)
        view = st.view(now=ev["t"])
        if ev["event"] == "guard" and ev["state"] == "waiting":
            r = ev["readings"]
            free = f"{100 * r['available'] / r['total']:.0f} % free"
            need = ev["reason"].split("<")[1].strip()
            assert view.guard_text == f"waiting: {free}, needs {need}"
            assert view.progress_text == "waiting for memory"
    assert view.status == FAILED
    assert view.error_text == events[-1]["message"]
    assert view.hint_text == events[-1]["hint"]
    assert all(r[1] == "pending" for r in view.stage_rows)


def test_cancel_wins_over_late_events_and_silent_death_is_reported():
    events = load("builtin_goblin_512.ndjson")
    st = JobState()
    st.begin("x.png", now=events[0]["t"])
    for ev in events[:20]:
        st.apply(ev)
    st.mark_cancelled(now=events[20]["t"])
    for ev in events[20:]:  # a result that raced the cancel is not imported
        st.apply(ev)
    view = st.view()
    assert view.status == CANCELLED and view.headline == "Cancelled"
    assert "running" not in [r[1] for r in view.stage_rows]

    st2 = JobState()
    st2.begin("x.png")
    st2.apply(events[0])
    st2.finish_process(-9, "line one\nMemoryError: boom")
    assert st2.status == FAILED
    assert "-9" in st2.view().error_text and "MemoryError: boom" in st2.view().error_text


def test_unknown_events_and_fields_are_ignored():
    st = JobState()
    st.begin("x.png")
    st.apply({"v": 2, "event": "telemetry", "t": 1.0, "x": 1})
    st.apply({"v": 1, "event": "stage", "t": 2.0, "stage": "bake", "index": 0, "count": None,
              "new_field": True})
    assert st.unknown_events == 1
    assert [r[:2] for r in st.view(now=3.0).stage_rows] == [("bake", "running")]


def test_the_bar_says_starting_until_the_first_stage():
    """No blank bar between spawn (or the guard's admission) and the first stage."""
    st = JobState()
    st.begin("a.png", now=0.0)
    assert st.view(now=0.1).progress_text == "starting…"
    st.apply({"v": 1, "event": "hello", "t": 0.2, "stages": ["matte", "shape"]})
    assert st.view(now=0.3).progress_text == "starting…"
    st.apply({"v": 1, "event": "guard", "t": 0.4, "state": "started", "reason": "room",
              "readings": {"available": 2**30, "total": 2**31}})
    assert st.status == "running" and st.view(now=0.5).progress_text == "starting…"
    st.apply({"v": 1, "event": "stage", "t": 0.6, "stage": "matte", "index": 0, "count": 2})
    assert st.view(now=0.7).progress_text == "matte (1/2) 0 %"
    assert st.history == ["starting", "running"]
