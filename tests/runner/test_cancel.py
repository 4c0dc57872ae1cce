"""Cancel and kill, with real processes: after a cancel on the first stage event no process of
the job is alive 2 s later (psutil), the output is not there, the partial GLB is removed and the
trace is kept; a SIGKILLed parent or supervisor takes the whole job with it within 3 s."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from runner.job.outputs import sweep_stale_partials


def _job_processes(rt, live) -> list:
    """The supervisor and every descendant (the worker and what it started) right now."""
    procs = rt.tree(live.proc.pid)
    worker = next(e for e in live.events if e["event"] == "guard" and e["state"] == "started")
    assert worker["readings"]["pid"] in [p.pid for p in procs]
    return procs


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "stdin"])
def test_cancel_on_first_stage(rt, shared_images, tmp_path, how):
    out = tmp_path / "out" / "goblin.glb"
    live = rt.Live([shared_images[0], "-o", out, "--cancel-on-stdin-eof"])
    try:
        live.wait_for("stage")
        procs = _job_processes(rt, live)
        assert len(procs) >= 2
        t0 = time.monotonic()
        if how == "stdin":
            live.proc.stdin.close()
        else:
            live.proc.send_signal(getattr(signal, how))
        survivors = rt.wait_gone(procs[1:], within=2.0)  # the worker's whole group
        assert not survivors, [p.pid for p in survivors]
        fin = live.finish(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        live.kill()
    assert elapsed < 3.0
    last = fin.last()
    assert last["event"] == "error" and last["kind"] == "cancelled", fin.stderr[-2000:]
    assert fin.returncode == 130 == last["exit_code"]
    assert ("stdin" if how == "stdin" else how) in last["message"]
    # the hint fits the source: a closed stdin names the option that made it a cancel
    assert ("--cancel-on-stdin-eof" in last["hint"]) == (how == "stdin"), last["hint"]
    assert not rt.alive(procs)
    assert not out.exists()
    assert not list(out.parent.glob(".*partial*")), list(out.parent.iterdir())
    trace = out.with_suffix(".trace.jsonl")
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "cancelled"
    assert any(e["event"] == "sample" for e in events)
    assert any(e["event"] == "stage" for e in events)
    assert any(e["event"] == "guard" and e["state"] == "stopped" for e in events)


_PARENT = r"""
import subprocess, sys, time
out = open(sys.argv[1], "w")
p = subprocess.Popen([sys.executable, "-m", "runner", *sys.argv[2:]], stdin=subprocess.DEVNULL,
                     stdout=out, stderr=subprocess.DEVNULL)
print(p.pid, flush=True)
time.sleep(600)
"""


def test_parent_sigkilled(rt, shared_images, tmp_path):
    """An intermediate parent starts the runner (stdin /dev/null, stdout to a file, so only the
    parent-pid watch can notice) and is SIGKILLed: supervisor and worker gone within 3 s."""
    events = tmp_path / "events.ndjson"
    out = tmp_path / "goblin.glb"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(events), str(shared_images[0]),
                               "-o", str(out)], stdout=subprocess.PIPE, text=True, env=rt.env(),
                              cwd=rt.REPO)
    try:
        runner_pid = int(parent.stdout.readline())
        end = time.monotonic() + 120
        while time.monotonic() < end:
            text = events.read_text() if events.exists() else ""
            if '"event":"stage"' in text:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the runner never reached its first stage")
        procs = rt.tree(runner_pid)
        assert len(procs) >= 2  # supervisor + worker
        parent.kill()
        parent.wait()
        survivors = rt.wait_gone(procs, within=3.0)
        assert not survivors, [(p.pid, p.name()) for p in survivors]
    finally:
        if parent.poll() is None:
            parent.kill()
    last = json.loads(events.read_text().splitlines()[-1])
    assert last["event"] == "error" and last["kind"] == "cancelled"
    assert "parent" in last["message"]
    assert not out.exists() and not list(tmp_path.glob(".*partial*"))


def test_supervisor_sigkilled_takes_the_worker(rt, shared_images, tmp_path):
    """"Runner killed": SIGKILL to the supervisor itself; the worker notices and kills its
    group within 3 s. The partial GLB may stay (nobody was left to remove it); the next run for
    the same output sweeps it (tested below with sweep_stale_partials)."""
    out = tmp_path / "goblin.glb"
    live = rt.Live([shared_images[0], "-o", out])
    try:
        live.wait_for("stage")
        procs = _job_processes(rt, live)
        live.proc.kill()
        survivors = rt.wait_gone(procs, within=3.0)
        assert not survivors, [p.pid for p in survivors]
    finally:
        live.kill()
    assert not out.exists()
    assert out.with_suffix(".trace.jsonl").exists()


def test_worker_killed_from_outside(rt, shared_images, tmp_path, sentinel_output):
    """SIGKILL to the worker (what the kernel's out-of-memory killer does): kind worker_killed,
    the existing output is untouched (--overwrite was given), no partial left."""
    live = rt.Live([shared_images[0], "-o", sentinel_output, "--overwrite"])
    try:
        live.wait_for("stage")
        worker = next(e for e in live.events if e["event"] == "guard" and e["state"] == "started")
        os.kill(worker["readings"]["pid"], signal.SIGKILL)
        fin = live.finish(timeout=30)
    finally:
        live.kill()
    last = fin.last()
    assert last["kind"] == "worker_killed" and fin.returncode == 41, fin.stderr[-2000:]
    assert "SIGKILL" in last["message"]
    assert sentinel_output.read_bytes() == b"not touched by the runner\n"
    assert not list(sentinel_output.parent.glob(".*partial*"))


def test_stale_partial_swept_only_when_its_runner_is_dead(tmp_path):
    out = tmp_path / "goblin.glb"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".goblin.partial-{dead.pid}-0badcafe.glb"
    live = tmp_path / f".goblin.partial-{os.getpid()}-0123abcd.glb"
    other = tmp_path / f".troll.partial-{dead.pid}-0badcafe.glb"
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    assert sweep_stale_partials(out) == [stale]
    assert not stale.exists() and live.exists() and other.exists()


def test_cancel_while_waiting_for_admission(rt, shared_images, tmp_path):
    """The guard is waiting (available memory never reaches 99.99 %: the kernel alone uses more):
    closing stdin ends the wait at once; no worker was ever started, the result is `cancelled`."""
    live = rt.Live([shared_images[0], "-o", tmp_path / "a.glb", "--wait-free", "99.99%",
                    "--cancel-on-stdin-eof"])
    try:
        waiting = live.wait_for("guard")
        assert waiting["state"] == "waiting"
        t0 = time.monotonic()
        live.proc.stdin.close()
        fin = live.finish(timeout=10)
        assert time.monotonic() - t0 < 2.0
    finally:
        live.kill()
    assert fin.last()["kind"] == "cancelled" and fin.returncode == 130
    assert not [e for e in fin.events if e["event"] == "guard" and e["state"] == "started"]
    assert not [e for e in fin.events if e["event"] == "stage"]


def test_reader_closing_stdout_cancels(rt, shared_images, tmp_path):
    """The reader goes away (closes our stdout) after `hello`: the next event hits a broken
    pipe, the job is cancelled (exit 130), the trace says so, no output."""
    out = tmp_path / "a.glb"
    proc = subprocess.Popen([sys.executable, "-m", "runner", str(shared_images[0]), "-o", str(out)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=rt.env(), cwd=rt.REPO)
    assert json.loads(proc.stdout.readline())["event"] == "hello"
    proc.stdout.close()
    assert proc.wait(timeout=60) == 130
    last = json.loads(out.with_suffix(".trace.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "cancelled" and "stdout" in last["message"]
    assert not out.exists()
