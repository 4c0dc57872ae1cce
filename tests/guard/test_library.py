"""The Guard API as the runner supervisor uses it (docs/ARCHITECTURE.md, "Guard API"):
admission, start in its own group, check(sample) with meter samples, stop, decisions to a sink."""
import os
import signal
import sys
import threading
import time

import pytest
from guard_helpers import alive

from stageload.guard import Amount, Guard, GuardConfig
from stageload.meter import system_memory

GB = 1024**3


def test_check_with_samples_stops_the_group_and_returns_the_decision(env):
    events = []
    guard = Guard(GuardConfig(kill_free=Amount(bytes=2 * GB), kill_samples=2, swap_budget=None,
                              grace=1),
                  log=events.append, human=None)
    assert guard.wait_for_admission()
    popen = guard.start([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    assert os.getpgid(popen.pid) == popen.pid
    ok = {"event": "sample", "t": time.time(), "pid": popen.pid, "footprint": 10**7, "hwm": None,
          "available": 8 * GB, "total": 24 * GB, "swap": 0, "pressure": None}
    short = dict(ok, available=1 * GB)
    assert guard.check(ok) is None
    assert guard.check(short) is None           # one low sample is not enough
    decision = guard.check(short)
    assert decision is not None and decision["state"] == "stopped"
    assert decision["reason"] == "available 1.0 GiB < 2.0 GiB for 2 consecutive samples"
    assert decision["readings"]["available"] == 1 * GB and decision["readings"]["total"] == 24 * GB
    assert popen.poll() == -signal.SIGTERM
    assert guard.check(short) is None           # nothing runs any more
    states = [e["state"] for e in events]
    assert states == ["started", "stopped"]
    for event in events:
        assert event["event"] == "guard" and isinstance(event["t"], float)
        assert set(event) == {"event", "t", "state", "reason", "readings"}
        assert {"available", "total", "swap"} <= set(event["readings"])
    assert guard.stop("again") is not None
    assert [e["state"] for e in events] == ["started", "stopped"]


def test_cancel_from_another_thread_ends_the_wait(env):
    total = system_memory().total
    guard = Guard(GuardConfig(wait_free=Amount(bytes=total + 1), poll=0.2), human=None)
    threading.Timer(0.5, guard.cancel).start()
    began = time.monotonic()
    assert guard.wait_for_admission() is False
    assert time.monotonic() - began < 2.0
    assert guard.cancelled and guard.tree is None


def test_a_failing_sink_does_not_keep_the_guard_from_stopping(env):
    def broken(_event):
        raise RuntimeError("sink down")

    guard = Guard(GuardConfig(grace=1), log=broken, human=None)
    popen = guard.start(["sleep", "30"], env=env)
    report = guard.stop("cancelled by the user")
    assert report.survivors == [] and not alive(popen.pid)


def test_start_errors(env, tmp_path):
    guard = Guard(GuardConfig(), human=None)
    with pytest.raises(FileNotFoundError):
        guard.start([str(tmp_path / "missing")], env=env)
    guard.start(["sleep", "30"], env=env)
    try:
        with pytest.raises(RuntimeError, match="already running"):
            guard.start(["sleep", "30"], env=env)
    finally:
        guard.stop("test over")


def test_unknown_readings_mean_do_not_start(env):
    """The meter cannot be made to fail on this machine, so the readings are injected."""
    events = []
    unknown = {"available": None, "total": 24 * GB, "swap": 0, "swap_total": 0, "pressure": None}
    guard = Guard(GuardConfig(start_timeout=0.3, poll=0.1), log=events.append, human=None,
                  read=lambda: unknown)
    assert guard.wait_for_admission() is False
    assert [e["state"] for e in events] == ["waiting", "timeout"]
    assert "available cannot be read" in events[0]["reason"]


def test_waiting_and_timeout_events_carry_the_thresholds(env):
    """The guard's `waiting` and `timeout` decisions say what available memory must reach as a
    field (`thresholds`), besides the wording of `reason`."""
    events = []
    readings = {"available": 5 * GB, "total": 24 * GB, "swap": 0, "swap_total": 0,
                "pressure": None}
    guard = Guard(GuardConfig(wait_free=Amount(percent=50), start_timeout=0.3, poll=0.1),
                  log=events.append, human=None, read=lambda: dict(readings))
    assert guard.wait_for_admission() is False
    assert [e["state"] for e in events][0] == "waiting" and events[-1]["state"] == "timeout"
    for event in (events[0], events[-1]):
        assert event["thresholds"] == {"wait_free": {"required": 12 * GB, "percent": 50.0}}
