"""The trace never replaces a file it should not: a trace path
that is the input image or the output GLB is a usage error straight after ``hello``; an existing
file at the trace path is kept unless ``--overwrite``, and even then only a runner trace that no
live runner is writing; two runners on the same output leave the winner's trace intact. The one
exception without ``--overwrite``: the leftover trace of a finished run of the same output that
produced no GLB (a failed or cancelled run) is replaced, with a line on stderr."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from meshfacts.errors import RunnerError
from runner.job.outputs import check_trace, failed_runs_trace
from runner.job.trace import JobTrace


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused_early(fin, kind: str) -> dict:
    """hello then error, nothing else: no input event, no guard, no worker."""
    assert fin.kinds() == ["hello", "error"], (fin.kinds(), fin.stderr[-1500:])
    err = fin.last()
    assert err["kind"] == kind and fin.returncode == err["exit_code"], err
    assert "Traceback" not in fin.stderr
    return err


def test_trace_that_is_the_input_image_is_refused(rt, shared_images, tmp_path):
    image = tmp_path / "myimg.png"
    shutil.copy(shared_images[0], image)
    before = _digest(image)
    out = tmp_path / "out" / "tr.glb"
    fin = rt.run([image, "-o", out, "--trace", image])
    err = _refused_early(fin, "usage")
    assert "input image" in err["message"] and "--trace" in err["hint"]
    assert _digest(image) == before and not out.exists()
    # the same file under another spelling (a symlink) is caught too (samefile)
    link = tmp_path / "link.png"
    link.symlink_to(image)
    fin = rt.run([image, "-o", out, "--trace", link, "--overwrite"])
    _refused_early(fin, "usage")
    assert _digest(image) == before and not out.exists()


def test_trace_that_is_the_output_is_refused(rt, shared_images, tmp_path):
    out = tmp_path / "out" / "tr.glb"
    fin = rt.run([shared_images[0], "-o", out, "--trace", out])
    err = _refused_early(fin, "usage")
    assert "output GLB" in err["message"]
    assert not out.exists()


def test_existing_file_at_the_trace_path_is_kept(rt, shared_images, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    out = tmp_path / "a.glb"
    for extra in ([], ["--overwrite"]):  # --overwrite does not make a text file a trace
        fin = rt.run([shared_images[0], "-o", out, "--trace", notes, *extra])
        _refused_early(fin, "output_exists")
        assert notes.read_text() == "my notes\n" and not out.exists()


def test_default_trace_of_an_earlier_run_needs_overwrite(rt, shared_images, tmp_path):
    out = tmp_path / "a.glb"
    first = rt.run([shared_images[0], "-o", out])
    assert first.returncode == 0, first.stderr[-2000:]
    trace = out.with_name("a.trace.jsonl")
    kept = trace.read_bytes()
    out.unlink()  # the GLB is gone, its trace is still there
    fin = rt.run([shared_images[0], "-o", out])
    err = _refused_early(fin, "output_exists")
    assert str(trace) in err["message"] and "--overwrite" in err["hint"]
    assert trace.read_bytes() == kept and not out.exists()
    again = rt.run([shared_images[0], "-o", out, "--overwrite"])
    assert again.returncode == 0, again.stderr[-2000:]
    hello = json.loads(trace.read_text().splitlines()[0])
    assert hello["event"] == "hello" and hello["pid"] == again.events[0]["pid"]


def test_two_runners_on_one_output_keep_the_winners_trace(rt, shared_images, tmp_path):
    """Runner A is working on a.glb; B (same -o, with and without --overwrite) is refused
    without touching A's trace, which ends with A's own result."""
    out = tmp_path / "a.glb"
    trace = out.with_name("a.trace.jsonl")
    a = rt.Live([shared_images[0], "-o", out, "--wait-free", "99.99%", "--start-timeout", "4"])
    try:
        a.wait_for("input")  # A's trace is open; A now waits for admission
        for extra in ([], ["--overwrite"]):
            b = rt.run([shared_images[0], "-o", out, *extra])
            err = _refused_early(b, "output_exists")
            if extra:
                assert f"pid {a.proc.pid}" in err["message"], err
        lines = [json.loads(line) for line in trace.read_text().splitlines()]  # A still waits
        fin = a.finish(timeout=30)
    finally:
        a.kill()
    assert lines[0]["event"] == "hello" and lines[0]["pid"] == a.proc.pid
    assert {e.get("pid") for e in lines if e["event"] == "hello"} == {a.proc.pid}
    assert fin.last()["kind"] == "guard_timeout"
    assert not trace.exists()  # A never started: it removed its own trace, nobody else's


def test_losing_the_race_for_a_trace_path_refuses(tmp_path):
    """Both runners passed the up-front check before either created the file: the second
    open fails with output_exists (O_EXCL in stageload's TraceWriter), the first is intact."""
    path = check_trace(tmp_path / "t.trace.jsonl")
    first, second = JobTrace(), JobTrace()
    first.open(path)
    first({"event": "hello", "t": time.time(), "pid": 1})
    with pytest.raises(RunnerError) as info:
        second.open(path)
    assert info.value.kind == "output_exists"
    first.close()
    assert json.loads(path.read_text())["pid"] == 1


def test_same_command_after_a_failed_run_replaces_its_trace(rt, shared_images, tmp_path):
    """A run that fails in the worker (a noisy picture: background_not_plain) leaves its trace
    and no GLB; the person fixes the picture and runs the very same command: it succeeds
    without --overwrite, says on stderr that it replaced the old trace, and the trace is the
    new run's. A third run is refused again: now the GLB (a result) exists."""
    image = tmp_path / "char.png"
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out" / "char.glb"
    trace = out.with_name("char.trace.jsonl")
    command = [image, "-o", out]
    failed = rt.run(command)
    assert failed.last()["kind"] == "background_not_plain", failed.stderr[-1500:]
    assert trace.exists() and not out.exists()
    shutil.copy(shared_images[0], image)  # the fix
    fixed = rt.run(command)
    assert fixed.returncode == 0 and fixed.last()["event"] == "result", fixed.stderr[-2000:]
    assert f"replacing {trace}" in fixed.stderr
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert lines[0]["pid"] == fixed.events[0]["pid"] != failed.events[0]["pid"]
    assert lines[-1]["event"] == "result"
    again = rt.run(command)
    _refused_early(again, "output_exists")
    assert [json.loads(line) for line in trace.read_text().splitlines()] == lines


def _runner_trace(path, output, pid, last: dict | None, cut: bool = False):
    """Write a trace as a runner would: hello (with ``runner``, ``pid``, ``output``), one
    sample, then ``last``; ``cut`` leaves a half line at the end as SIGKILL can."""
    lines = [{"v": 1, "event": "hello", "t": 1.0, "runner": "0.1.0", "pid": pid,
              "mode": "single", "output": str(output)},
             {"event": "sample", "t": 2.0, "pid": pid, "footprint": 1}]
    text = "".join(json.dumps(obj) + "\n" for obj in lines + ([last] if last else []))
    path.write_text(text + ('{"event": "sam' if cut else ""))


@pytest.fixture
def dead_pid():
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_which_leftover_traces_may_be_replaced(tmp_path, dead_pid):
    """failed_runs_trace: only a dead runner's trace of this output that ended without a
    result, while the GLB does not exist."""
    out = tmp_path / "a.glb"
    trace = tmp_path / "a.trace.jsonl"
    error = {"v": 1, "event": "error", "t": 3.0, "kind": "cancelled"}
    _runner_trace(trace, out, dead_pid, error)
    assert failed_runs_trace(trace, out)
    _runner_trace(trace, out, dead_pid, None, cut=True)  # killed: no final line
    assert failed_runs_trace(trace, out)
    # a successful run (even with its GLB deleted since) keeps its trace
    _runner_trace(trace, out, dead_pid, {"v": 1, "event": "result", "t": 3.0})
    assert not failed_runs_trace(trace, out)
    # the GLB exists
    _runner_trace(trace, out, dead_pid, error)
    out.write_bytes(b"glTF")
    assert not failed_runs_trace(trace, out)
    out.unlink()
    # the trace of another output, or of this very process
    _runner_trace(trace, tmp_path / "b.glb", dead_pid, error)
    assert not failed_runs_trace(trace, out)
    _runner_trace(trace, out, os.getpid(), error)
    assert not failed_runs_trace(trace, out)
    # not a runner's hello: a stageload trace, a user's file, a link to a trace
    trace.write_text(json.dumps({"event": "stage", "t": 1.0, "stage": "x"}) + "\n")
    assert not failed_runs_trace(trace, out)
    trace.write_text("my notes\n")
    assert not failed_runs_trace(trace, out)
    real = tmp_path / "real.trace.jsonl"
    _runner_trace(real, out, dead_pid, error)
    trace.unlink()
    trace.symlink_to(real)
    assert not failed_runs_trace(trace, out)


def test_a_live_runners_failed_trace_is_kept(tmp_path):
    """A trace whose hello names a running process with ``runner`` in its command line (a
    real process started here) is never taken over, even when it ends in an error."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "runner"])
    try:
        out = tmp_path / "a.glb"
        trace = tmp_path / "a.trace.jsonl"
        _runner_trace(trace, out, live.pid, {"v": 1, "event": "error", "t": 3.0})
        assert not failed_runs_trace(trace, out)
    finally:
        live.kill()
        live.wait()
    assert failed_runs_trace(trace, out)  # the same file once that runner is gone
