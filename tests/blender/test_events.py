"""The add-on's boundary with the runner: crafted events never raise in
``JobState.apply``/``view``, a newer protocol is named, and the reader thread survives what a
broken runner prints — deep nesting, a 10 MB line — while reading in chunks.

The reader tests run a real subprocess printing the crafted lines (a stand-in for the runner:
what is tested is the add-on's reading, not the runner)."""
from __future__ import annotations

import json
import math
import sys
import textwrap
import time
from pathlib import Path

import pytest

from blender_addon.runner_client import events
from blender_addon.runner_client.process import BAD_LINE, EOF, EVENT, RunnerProcess, runner_env
from blender_addon.runner_client.state import FAILED, IMPORTING, RUNNING, JobState

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
HELLO = {"v": 1, "event": "hello", "t": 1.0, "backend": "builtin", "output": "/o/a.glb",
         "trace": "/o/a.trace.jsonl", "stages": ["matte", "shape"]}

# Events a broken or hostile runner could print: wrong types, NaN/Infinity, huge numbers,
# numbers where lists are, lists where dicts are.
CRAFTED = [
    {"event": "hello", "stages": 5},
    {"event": "hello", "stages": ["a", 3, None]},
    {"event": "hello", "pid": "abc", "backend": ["x"]},
    {"event": "hello", "output": 12, "trace": {"x": 1}},
    {"event": "guard", "state": 7, "reason": ["r"]},
    {"event": "guard", "state": "waiting", "readings": [1, 2]},
    {"event": "guard", "state": "waiting", "reason": "available 3 % < 40 %",
     "readings": {"available": "lots", "total": math.nan}},
    {"event": "guard", "state": "started", "readings": {"available": 10**400, "total": 0}},
    {"event": "stage", "stage": ["matte"], "index": "0", "count": None},
    {"event": "stage", "stage": "shape", "index": 1e300},
    {"event": "stage", "stage": "shape", "index": -5},
    {"event": "progress", "fraction": "half"},
    {"event": "progress", "fraction": math.inf},
    {"event": "progress", "fraction": 7.5, "stage": 3},
    {"event": "load", "model": None, "bytes": "900MB"},
    {"event": "load", "model": "m", "bytes": -1},
    {"event": "release", "model": {"a": 1}},
    {"event": "memory", "footprint": "abc", "peak": math.nan, "swap": math.inf},
    {"event": "memory", "footprint": 10**400, "available": -3, "total": True},
    {"event": "memory", "footprint": [1], "stage_peak": {"b": 1}, "stage": 4},
    {"event": "result", "output": None, "peak": "big", "seconds": "7"},
    {"event": "result", "output": "/o/a.glb", "peak": {"bytes": math.nan},
     "summary": {"peak": "x"}},
    {"event": "result", "output": "/o/a.glb", "summary": [1, 2, 3], "seconds": math.inf},
    {"event": "error", "kind": 5, "message": None, "hint": 3, "exit_code": "10"},
    {"event": "error", "kind": "x", "message": "m", "exit_code": 1e9},
    {"event": "batch_item", "index": "1", "status": 3, "error": "boom"},
    {"event": "batch_done", "done": "all", "failed": math.nan},
    {"event": "memory", "t": "yesterday", "v": "one"},
    {"event": "stage", "t": math.nan, "stage": "matte", "index": 0, "count": 2},
    {"event": "warning", "message": 5, "source": ["x"]},
    {"event": "unknown_new_event", "anything": [math.nan]},
]


def _fresh() -> JobState:
    st = JobState()
    st.begin("a.png", now=0.0)
    st.apply(dict(HELLO))
    return st


@pytest.mark.parametrize("ev", CRAFTED, ids=lambda e: e["event"])
def test_a_crafted_event_never_raises_in_apply_or_view(ev):
    st = _fresh()
    st.apply({"v": 1, "t": 2.0, **ev})
    view = st.view(now=3.0)  # what the panel draws on every redraw
    assert isinstance(view.memory_text, str) and 0.0 <= view.progress <= 1.0
    assert st.guard_text() is not None
    # the same event again in the middle of a running stage, and then a normal end
    st.apply({"v": 1, "event": "stage", "t": 2.5, "stage": "matte", "index": 0, "count": 2})
    st.apply({"v": 1, "t": 2.6, **ev})
    st.view(now=3.0)
    st.apply({"v": 1, "event": "result", "t": 4.0, "output": "/o/a.glb", "peak": 1000})
    assert st.status in (IMPORTING, FAILED)
    st.view(now=5.0)


def test_invalid_fields_are_dropped_and_named_the_rest_is_kept():
    st = _fresh()
    st.apply({"v": 1, "event": "memory", "t": 2.0, "footprint": "abc", "peak": math.nan,
              "swap": 4096, "available": 2**30, "total": 2**31})
    assert st.footprint is None and st.peak is None
    assert st.swap == 4096 and st.available == 2**30
    assert "memory.footprint = 'abc' is not valid; ignored" in st.warnings
    assert any(w.startswith("memory.peak = nan") for w in st.warnings)
    st.apply({"v": 1, "event": "result", "t": 3.0, "output": "/o/a.glb", "peak": "big",
              "summary": {"peak": {"bytes": 5 * 2**20}}})
    assert st.status == IMPORTING and st.peak == 5 * 2**20  # the valid summary peak is used
    assert "result.peak = 'big' is not valid; ignored" in st.warnings


def test_warnings_are_bounded():
    st = _fresh()
    for i in range(100):
        st.apply({"v": 1, "event": "memory", "t": 2.0, "footprint": f"x{i}"})
    assert len(st.warnings) == JobState.MAX_WARNINGS


def test_a_newer_protocol_is_named_and_still_read():
    st = _fresh()
    assert st.protocol_note == "" and st.view().note_text == ""
    st.apply({"v": 99, "event": "memory", "t": 2.0, "footprint": 2**20, "peak": 2**20})
    assert st.footprint == 2**20
    note = st.view().note_text
    assert "protocol version 99" in note and "version 1" in note and "same release" in note


def test_parse_line_refuses_nan_deep_nesting_and_long_lines():
    assert events.parse_line(b"\n") is None
    assert events.parse_line('{"v":1,"event":"hello"}')["event"] == "hello"
    with pytest.raises(events.EventError, match="NaN"):
        events.parse_line('{"v":1,"event":"memory","footprint":NaN}')
    with pytest.raises(events.EventError, match="Infinity"):
        events.parse_line('{"v":1,"event":"memory","footprint":-Infinity}')
    with pytest.raises(events.EventError, match="nested too deeply"):
        events.parse_line('{"event":"x","a":' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(events.EventError, match="more than"):
        events.parse_line(b"x" * (events.MAX_LINE + 1))
    with pytest.raises(events.EventError, match="not JSON"):
        events.parse_line("Traceback (most recent call last):")
    with pytest.raises(events.EventError, match="not an event"):
        events.parse_line("[1, 2]")
    with pytest.raises(events.EventError, match="not an event"):
        events.parse_line('{"event": 5}')


PRINTER = textwrap.dedent("""
    import json, sys, time
    out = sys.stdout.buffer
    def line(b):
        out.write(b + b"\\n"); out.flush()
    line(json.dumps({"v": 1, "event": "hello", "t": time.time(), "stages": ["a"]}).encode())
    line(b'{"event":"x","a":' + b"[" * 200000 + b"]" * 200000 + b"}")
    line(b'{"v":1,"event":"progress","fraction":' + b"1" * (10 * 2**20) + b"}")
    line(json.dumps({"v": 99, "event": "stage", "t": time.time(), "stage": "a", "index": 0,
                     "count": 1}).encode())
    # After the bad lines the reader must still drain stdout: 8 MB more than a pipe holds.
    for i in range(2000):
        line(json.dumps({"v": 1, "event": "memory", "t": time.time(), "footprint": i,
                         "pad": "x" * 4000}).encode())
    line(b'{"v":1,"event":"result","output":"/o/a.glb","peak":1}')
""")


def test_the_reader_survives_deep_nesting_and_a_10_mb_line_and_keeps_draining(tmp_path):
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    job = RunnerProcess([PY, str(script)], runner_env(tmp_path), cwd=tmp_path)
    t0 = time.monotonic()
    job.start()
    items = list(job.iter_blocking())
    elapsed = time.monotonic() - t0
    assert items[-1] == (EOF, None) and job.poll() == 0
    bad = [p for k, p in items if k == BAD_LINE]
    assert len(bad) == 2, bad
    assert "nested too deeply" in bad[0] and "longer than" in bad[1]
    evs = [p for k, p in items if k == EVENT]
    assert [e["event"] for e in evs[:2]] == ["hello", "stage"] and evs[1]["v"] == 99
    assert sum(e["event"] == "memory" for e in evs) == 2000
    assert evs[-1]["event"] == "result"
    # One byte per system call took 3.4 s for the 10 MB line alone; in chunks the
    # whole ~18 MB stream is read in well under that even on a loaded 2-core machine.
    assert elapsed < 3.0, elapsed
    assert job.proc.stdout.closed and job.proc.stderr.closed and job.proc.stdin.closed


def test_the_state_fed_by_the_reader_names_the_newer_protocol(tmp_path):
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    job = RunnerProcess([PY, str(script)], runner_env(tmp_path), cwd=tmp_path)
    job.start()
    st = JobState()
    st.begin("a.png")
    for kind, payload in job.iter_blocking():
        if kind == EVENT:
            st.apply(payload)
    assert "protocol version 99" in st.protocol_note
    assert st.status == IMPORTING and st.history == ["starting", RUNNING, IMPORTING]


def test_the_runners_warning_is_shown_with_the_job():
    st = _fresh()
    msg = "1536_cascade is not recommended on a Mac: catastrophic shatter"
    st.apply({"v": 1, "event": "warning", "t": 2.0, "message": msg, "source": "notes §3"})
    st.apply({"v": 1, "event": "warning", "t": 2.1, "message": msg, "source": "notes §3"})
    assert st.runner_warnings == [msg] and st.view().note_text == msg


def _declared_events() -> list[dict]:
    """One event of every kind the runner's event schema declares (its own example)."""
    from blender_addon.runner_client import facts as runtime_facts

    schema = runtime_facts.schema
    return [{"v": schema.PROTOCOL_VERSION, "event": kind.name, "t": 2.0, **kind.example}
            for kind in schema.KINDS.values()]


@pytest.mark.parametrize("ev", _declared_events(), ids=lambda e: e["event"])
def test_every_kind_the_runner_can_emit_passes_the_addons_reader(ev):
    """Each kind the schema declares (every event the product can emit) is read whole by the
    add-on — no field dropped — and applying it, in a single job or a cluster batch, never
    raises."""
    from blender_addon.runner_client.nodes import NodeBoard

    kept, notes = events.clean(ev)
    assert (kept, notes) == (ev, [])
    assert events.parse_line(json.dumps(ev)) == ev
    st = _fresh()
    st.apply(dict(ev))
    st.view(now=3.0)
    assert not [w for w in st.warnings if w.startswith(ev["event"])]
    NodeBoard().apply({**ev, "item": 1, "node": {"id": "n1", "host": "mac-2"}})


_READ = textwrap.dedent("""
    import json, sys
    from blender_addon.runner_client import events
    for line in sys.stdin:
        kept, notes = events.clean(json.loads(line))
        print(json.dumps([kept is not None, notes]))
""")


def test_a_kind_added_to_the_schema_alone_is_read_and_an_undeclared_one_refused(tmp_path):
    """A copy of the add-on and its runtime files (the checkout layout) whose
    meshfacts/events.py — and nothing else — declares one more kind: the add-on's reader
    accepts that kind, checks its fields' types, and still refuses a kind nobody declared."""
    import shutil
    import subprocess

    for part in ("blender_addon", "meshfacts", "runner", "stageload"):
        shutil.copytree(REPO / part, tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    schema_file = tmp_path / "meshfacts" / "events.py"
    schema_file.write_text(schema_file.read_text(encoding="utf-8") + textwrap.dedent("""
        declare("made_up", STDOUT, {"rows": INT}, {"label": TEXT}, {"rows": 3})
    """), encoding="utf-8")
    lines = [{"v": 1, "event": "made_up", "t": 1.0, "rows": 3, "label": "x"},
             {"v": 1, "event": "made_up", "t": 1.0, "rows": "three"},
             {"v": 1, "event": "never_declared", "t": 1.0, "rows": 3}]
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    out = []
    for root in (tmp_path, REPO):  # the edited copy, then the checkout as it is
        proc = subprocess.run([PY, "-c", _READ], input=stdin, capture_output=True, text=True,
                              cwd=root, env=runner_env(root),
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        out.append([json.loads(line) for line in proc.stdout.splitlines()])
    edited, unedited = out
    assert edited[0] == [True, []]
    assert edited[1] == [True, ["made_up.rows = 'three' is not valid; ignored"]]
    assert edited[2][0] is False and "never_declared" in edited[2][1][0]
    assert [accepted for accepted, _ in unedited] == [False, False, False]
