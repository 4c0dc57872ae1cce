"""A worker that stops moving is noticed: a real worker SIGSTOPped mid-stage
gets a ``stalled`` event (why ``stopped``) and, after SIGCONT, a ``resumed`` one, the job then
ends normally; with ``--stall-timeout`` it ends as ``stalled`` (exit 49) with nothing left
running; a worker that sleeps without CPU time or events is ``stalled`` (why ``idle``). The
thresholds (10 s stopped, 60 s idle) are lowered through the supervisor's start-up hook
(``runner.job.stall`` constants) so the tests need not wait a minute; every event is recorded."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

FAST = ("import runner.job.stall as s; s.STOPPED_AFTER = 1.0; s.IDLE_AFTER = 3.0; "
        "s.CHECK_EVERY = 0.2\n")


def _stop_worker_at_first_stage(live):
    stage = live.wait_for("stage")
    os.kill(stage["pid"], signal.SIGSTOP)
    return stage["pid"]


def test_a_stopped_worker_is_stalled_then_resumed(rt, shared_images, tmp_path):
    live = rt.Live([shared_images[0], "-o", tmp_path / "a.glb"], supervisor_hook=FAST)
    try:
        pid = _stop_worker_at_first_stage(live)
        stalled = live.wait_for("stalled", timeout=30)
        assert stalled["pid"] == pid and stalled["why"] == "stopped" and stalled["seconds"] >= 1.0
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
        os.kill(pid, signal.SIGCONT)
        resumed = live.wait_for("resumed", timeout=30)
        assert resumed["pid"] == pid and resumed["seconds"] >= stalled["seconds"]
        fin = live.finish(timeout=180)
    finally:
        live.kill()
    assert fin.returncode == 0, (fin.last(), fin.stderr[-2000:])
    names = fin.kinds()
    assert names.count("stalled") == 1 and names.count("resumed") == 1
    assert names.index("stalled") < names.index("resumed") < names.index("result")
    assert "runner: stalled: the process (pid %d) is stopped" % pid in fin.stderr
    assert "runner: resumed: the worker (pid %d) moves again" % pid in fin.stderr


def test_stall_timeout_ends_the_job_as_stalled(rt, shared_images, tmp_path):
    live = rt.Live([shared_images[0], "-o", tmp_path / "a.glb", "--stall-timeout", "2"],
                   supervisor_hook=FAST)
    try:
        pid = _stop_worker_at_first_stage(live)
        began = time.monotonic()
        fin = live.finish(timeout=60)
    finally:
        live.kill()
    err = fin.last()
    assert err["kind"] == "stalled" and fin.returncode == 49, (err, fin.stderr[-2000:])
    assert "is stopped" in err["message"] and "--stall-timeout 2" in err["message"]
    assert time.monotonic() - began < 30
    names = fin.kinds()
    assert names.index("stalled") < len(names) - 1 and "resumed" not in names
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (tmp_path / "a.glb").exists()


def test_a_worker_without_cpu_or_events_is_stalled_idle(rt, shared_images, tmp_path):
    """The worker sleeps 60 s at start-up (the test hook) — no CPU time, no event."""
    env = rt.env(worker_hook="import time; time.sleep(60)\n", supervisor_hook=FAST)
    proc = subprocess.run([sys.executable, "-m", "runner", str(shared_images[0]), "-o",
                           str(tmp_path / "a.glb"), "--stall-timeout", "4"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=rt.REPO, stdin=subprocess.DEVNULL)
    events = rt.parse(proc.stdout)
    stalled = [e for e in events if e["event"] == "stalled"]
    assert len(stalled) == 1 and stalled[0]["why"] == "idle", events[-3:]
    assert events[-1]["kind"] == "stalled" and proc.returncode == 49, proc.stderr[-2000:]
    assert "used no CPU time and sent no event" in events[-1]["message"]


def test_an_event_from_a_stalled_child_is_resumed_before_the_next_look():
    """The CI run where a SIGCONTed worker ran on and ended between two looks of the sampler:
    ``stalled`` then the job's events and ``result``, never ``resumed``. An event from the
    stalled child now publishes ``resumed`` at once, in order, once. A real process, really
    stopped; the watch's clock is the test's, so the stop lasts past STOPPED_AFTER at once."""
    from runner.job import stall

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    published, now = [], [0.0]
    try:
        watch = stall.StallWatch(child.pid, published.append, clock=lambda: now[0])
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, "the child did not stop"
            time.sleep(0.01)
        watch.on_sample()  # seen stopped at t = 0
        now[0] = stall.STOPPED_AFTER + stall.CHECK_EVERY
        watch.on_sample()
        assert [e["event"] for e in published] == ["stalled"], published
        os.kill(child.pid, signal.SIGCONT)
        now[0] += 0.1  # before the next look (CHECK_EVERY later)
        watch.on_event()
        assert [e["event"] for e in published] == ["stalled", "resumed"], published
        assert published[1]["why"] == "stopped" and published[1]["pid"] == child.pid
        watch.on_event()
        now[0] += stall.CHECK_EVERY
        watch.on_sample()
        assert [e["event"] for e in published] == ["stalled", "resumed"], published
    finally:
        child.kill()
        child.wait()
