"""The panel's content at every event of event streams recorded from the real runner.

Fixtures (``fixtures/*.ndjson``) are stdout of ``python -m runner`` captured verbatim:
``builtin_goblin_512.ndjson``: ``typical_humanoid_goblin.png --texture-size 512 --seed 3``;
``guard_timeout.ndjson``: ``goblin.png --wait-free 99% --start-timeout 2`` (admission refused).
Expected values are derived from each event itself, independently of ``JobState``'s code.
"""
import json
from pathlib import Path

import pytest

from blender_addon.runner_client.state import (
    CANCELLED,
    DONE,
    FAILED,
    IMPORTING,
    JobState,
    human_bytes,
    human_seconds,
)

FIX = Path(__file__).parent / "fixtures"


def load(name):
    return [json.loads(line) for line in (FIX / name).read_text().splitlines() if line.strip()]


def test_human_units_are_the_projects_one_byte_formatter():
    """The panel prints sizes exactly as meshfacts.units does (the guard, summary and chart):
    binary multiples labelled KiB/MiB/GiB, so one peak reads as one figure everywhere."""
    from meshfacts.units import format_size

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
    stopped = [r for r in st.stages if r.status == CANCELLED]  # the row it stopped in says so
    assert len(stopped) == 1 and stopped[0].seconds is not None

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


def _export_run():
    """A pixal3d run with export in a process of its own, event by event as runner/PROTOCOL.md
    ("Export in a process of its own", `stage` `parent`, `memory.substep`) orders them: the
    model stages in the worker, a second guard waiting/started pair, then `export` (another
    pid) with its sub-steps. Sizes in bytes, times in seconds."""
    from stageload.pixal3d.export.steps import SUBSTEPS
    from stageload.pixal3d.plan import plan_for

    names = list(plan_for("1024_cascade"))
    evs = [{"v": 1, "event": "hello", "t": 0.0, "backend": "pixal3d", "image": "/a/g.png",
            "output": "/a/g.glb", "trace": "/a/g.trace.jsonl", "pid": 10, "stages": names},
           {"v": 1, "event": "guard", "t": 0.5, "state": "started", "reason": "",
            "readings": {"available": 8 << 30, "total": 16 << 30, "swap": 0}}]
    t = 1.0
    for i, name in enumerate(names[:-1]):
        evs += [{"v": 1, "event": "stage", "t": t, "stage": name, "index": i,
                 "count": len(names), "pid": 11},
                {"v": 1, "event": "ready", "t": t + 0.1, "stage": name},
                {"v": 1, "event": "memory", "t": t + 0.2, "footprint": (i + 1) << 30,
                 "peak": 6 << 30, "stage": name, "stage_peak": (i + 1) << 30, "swap": 0,
                 "available": 8 << 30, "total": 16 << 30, "substep": None}]
        t += 1.0
    evs += [{"v": 1, "event": "guard", "t": t, "state": "waiting",
             "reason": "available 31 % < 40 %",
             "readings": {"available": 5 << 30, "total": 16 << 30, "swap": 0}},
            {"v": 1, "event": "guard", "t": t + 0.5, "state": "started", "reason": "",
             "readings": {"available": 9 << 30, "total": 16 << 30, "swap": 0}},
            {"v": 1, "event": "stage", "t": t + 1, "stage": "export", "index": len(names) - 1,
             "count": len(names), "pid": 12},
            {"v": 1, "event": "ready", "t": t + 1.1, "stage": "export"}]
    t += 2
    for j, sub in enumerate(SUBSTEPS):
        evs += [{"v": 1, "event": "stage", "t": t, "stage": sub, "index": j,
                 "count": len(SUBSTEPS), "parent": "export"},
                {"v": 1, "event": "memory", "t": t + 0.2, "footprint": 3 << 30,
                 "peak": 6 << 30, "stage": "export", "stage_peak": (3 << 30) + j,
                 "swap": 0, "available": 8 << 30, "total": 16 << 30, "substep": sub}]
        t += 1.0
    evs.append({"v": 1, "event": "result", "t": t, "output": "/a/g.glb",
                "trace": "/a/g.trace.jsonl", "seconds": t, "peak": 6 << 30,
                "summary": {"peak": 6 << 30}})
    return names, list(SUBSTEPS), evs


def test_export_sub_steps_are_listed_under_export_and_leave_the_stage_alone():
    names, subs, events = _export_run()
    st = JobState()
    st.begin("/a/g.png", now=0.0)
    statuses = []
    for ev in events:
        st.apply(ev)
        view = st.view(now=ev["t"])
        statuses.append(view.status)
        assert [r[0] for r in view.stage_rows] == names  # a sub-step is never a stage row
        if ev.get("parent") == "export":
            assert st.stage == "export" and view.headline == "Running: export"
            rows = view.substep_rows["export"]
            assert [r[0] for r in rows] == subs[: subs.index(ev["stage"]) + 1]
            assert [r[1] for r in rows] == ["done"] * (len(rows) - 1) + ["running"]
            # the export stage's peak is kept across its sub-steps (memory since the last)
            assert st.stage_peak is None or st.stage_peak >= 3 << 30
        if ev["event"] == "memory" and ev["stage"] == "export":
            assert st.stage_peak == ev["stage_peak"]
            assert view.progress_text.endswith(f"· {ev['substep']}")
            assert [r[1] for r in view.stage_rows] == ["done"] * (len(names) - 1) + ["running"]
        if ev["event"] == "guard" and ev["t"] > 1.0:  # export's own admission
            # the model stages stay as they were: not a restart
            assert [r[1] for r in view.stage_rows[:-2]] == ["done"] * (len(names) - 2)
            assert view.stage_rows[-1][1] == "pending" and st.peak == 6 << 30
            assert st.swap_start == 0 and view.progress > 0.5
    assert statuses[-1] == IMPORTING
    assert [r[1] for r in st.view(now=99).substep_rows["export"]] == ["done"] * len(subs)
    assert st.history.count("starting") == 1


def test_a_sub_step_with_a_bad_parent_is_dropped_not_taken_for_a_stage():
    names, _subs, events = _export_run()
    st = JobState()
    st.begin("/a/g.png", now=0.0)
    export_at = next(i for i, e in enumerate(events) if e.get("parent") == "export")
    for ev in events[:export_at]:
        st.apply(ev)
    for bad in (7, "x" * 65, "ex\nport", ""):
        st.apply({**events[export_at], "parent": bad})
        assert st.stage == "export" and st.view(now=99).substep_rows == {}
    st.apply({"v": 1, "event": "memory", "t": 99.0, "substep": float("nan")})
    assert st.substep is None
    assert any("stage.parent" in w for w in st.warnings)
    assert any("memory.substep" in w for w in st.warnings)


def test_input_notes_are_shown_with_the_result_and_checked_at_the_boundary():
    """The runner's ``input`` notes (what was done to the picture) appear in the result line
   ; notes that are not a list of strings are dropped with a warning."""
    events = load("builtin_goblin_512.ndjson")
    st = JobState()
    st.begin(events[0]["image"], now=events[0]["t"])
    for ev in events:
        if ev["event"] == "input":
            ev = {**ev, "notes": ["EXIF orientation 6 applied", "converted from CMYK"]}
        st.apply(ev)
    text = st.view(now=events[-1]["t"]).result_text
    assert text.endswith("(input: EXIF orientation 6 applied; converted from CMYK)"), text
    bad = JobState()
    bad.begin("x.png", now=0.0)
    bad.apply({"v": 1, "event": "input", "t": 0.1, "notes": "EXIF orientation 6 applied"})
    assert bad.input_notes == [] and any("input.notes" in w for w in bad.warnings)


def test_a_stall_is_shown_with_the_job_until_it_resumes():
    """``stalled`` / ``resumed``: the panel's note line says it while the
    worker is stalled; bad fields are dropped at the boundary."""
    st = JobState()
    st.begin("x.png", now=0.0)
    st.apply({"v": 1, "event": "hello", "t": 0.0, "backend": "builtin", "stages": ["matte"]})
    st.apply({"v": 1, "event": "stalled", "t": 11.0, "pid": 42, "why": "stopped", "seconds": 10.2,
              "reason": "the process (pid 42) is stopped (state T: SIGSTOP or a debugger)"})
    assert st.view(now=11.0).note_text == ("Stalled: the process (pid 42) is stopped (state T: "
                                           "SIGSTOP or a debugger) for 10.2 s")
    st.apply({"v": 1, "event": "resumed", "t": 20.0, "pid": 42, "why": "stopped", "seconds": 19.0})
    assert st.view(now=20.0).note_text == ""
    st.apply({"v": 1, "event": "stalled", "t": 21.0, "why": 3, "seconds": "long"})
    assert any("stalled.why" in w for w in st.warnings)


def test_guard_threshold_comes_from_the_structured_field_not_the_wording():
    """The panel's `needs …` is the guard event's `thresholds` (a percent as set, or a size):
    a reason worded differently changes nothing, and without the field nothing is guessed."""
    st = JobState()
    st.begin("x.png", now=0.0)
    readings = {"available": 5 * 2**30, "total": 20 * 2**30, "swap": 0}
    st.apply({"v": 1, "event": "guard", "t": 1.0, "state": "waiting", "readings": readings,
              "reason": "not enough room (wording may change)",
              "thresholds": {"wait_free": {"required": 8 * 2**30, "percent": 40}}})
    assert st.view(now=1.0).guard_text == "waiting: 25 % free, needs 40 %"
    st.apply({"v": 1, "event": "guard", "t": 2.0, "state": "waiting", "readings": readings,
              "reason": "available 5.0 GiB < need 9.0 GiB",
              "thresholds": {"need": {"required": 9 * 2**30, "percent": None}}})
    assert st.view(now=2.0).guard_text == f"waiting: 25 % free, needs {human_bytes(9 * 2**30)}"
    st.apply({"v": 1, "event": "guard", "t": 3.0, "state": "waiting", "readings": readings,
              "reason": "available 25 % < 40 %"})
    assert st.view(now=3.0).guard_text == "waiting: 25 % free"
    st.apply({"v": 1, "event": "guard", "t": 4.0, "state": "waiting", "readings": readings,
              "reason": "x", "thresholds": {"need": {"required": "lots"}}})
    assert st.view(now=4.0).guard_text == "waiting: 25 % free"
    assert any("thresholds" in w for w in st.warnings)
