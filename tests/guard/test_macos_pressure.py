"""The guard on a "Mac": ``python -m stageload guard`` run end to end on Linux with the macOS
reader against the libSystem stand-in (tests/macos_standin/), whose numbers the test changes
while the guard runs. Admission and stops are driven by available memory as Activity Monitor
counts it and by the kernel's pressure level; plus the pure pressure decisions."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from guard_helpers import guard_cmd, procs  # tests/guard, put on the path by its conftest
from libsystem_standin import GIB, ISSUE_MAC, PAGE  # tests/macos_standin (pyproject pythonpath)

from stageload.guard import Amount, GuardConfig, decide_admission
from stageload.guard.budget import Budget

TIGHT = 40 * GIB // PAGE   # internal pages that leave 48 - (39 + 4 + 2) = 3 GiB available


def _decisions(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _wait_for(log: Path, state: str, guard: subprocess.Popen, timeout: float = 30.0) -> dict:
    """The first decision with ``state`` in the guard's ``--log`` (read as the guard appends
    it); fails if the guard exits first or the time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [d for d in _decisions(log) if d.get("state") == state]
        if found:
            return found[0]
        if guard.poll() is not None:
            pytest.fail(f"guard exited {guard.returncode} before a {state!r} decision: "
                        f"{guard.stderr.read()}")
        time.sleep(0.05)
    pytest.fail(f"no {state!r} decision within {timeout} s")


def _guard(mac, env, log, *options, command):
    return subprocess.Popen(guard_cmd("--poll", "0.1", "--log", str(log), *options,
                                      command=command),
                            env=mac.environ(env), stderr=subprocess.PIPE, text=True)


def _finish(guard, timeout=30):
    try:
        return guard.wait(timeout)
    finally:
        if guard.poll() is None:
            guard.kill()


def test_admission_waits_for_room_then_starts_on_the_standins_numbers(mac, env, tmp_path):
    mac.set(internal=TIGHT)
    log, stamp = tmp_path / "guard.jsonl", tmp_path / "stamp"
    guard = _guard(mac, env, log, "--wait-free", "30%", command=procs("stamp", stamp))
    waiting = _wait_for(log, "waiting", guard)
    assert waiting["readings"]["available"] == 3 * GIB
    assert "available" in waiting["reason"] and not stamp.exists()
    mac.set(internal=ISSUE_MAC["internal"])
    assert _finish(guard) == 0 and stamp.exists()
    started = _wait_for(log, "started", guard)
    assert started["readings"]["available"] == 16 * GIB and started["readings"]["pressure"] == 1


def test_kill_free_stop_driven_by_the_standins_numbers(mac, env, tmp_path, tag):
    log = tmp_path / "guard.jsonl"
    guard = _guard(mac, env, log, "--kill-free", "20%", "--kill-samples", "2",
                   command=procs("sleeper", tag))
    _wait_for(log, "started", guard)
    mac.set(internal=TIGHT)                     # 3 GiB available < 20 % of 48 GiB
    assert _finish(guard) == 3
    stopped = _wait_for(log, "stopped", guard)
    assert stopped["reason"] == "available 6 % < 20 % for 2 consecutive samples"
    assert stopped["readings"]["available"] == 3 * GIB


def test_critical_pressure_stops_a_guarded_command_with_exit_3(mac, env, tmp_path, tag):
    log = tmp_path / "guard.jsonl"
    guard = _guard(mac, env, log, command=procs("sleeper", tag))   # the macOS defaults
    _wait_for(log, "started", guard)
    mac.set(pressure=4)
    assert _finish(guard) == 3
    stopped = _wait_for(log, "stopped", guard)
    assert stopped["reason"] == "memory pressure critical (4) >= critical for 3 consecutive samples"
    assert stopped["readings"]["pressure"] == 4 and stopped["readings"]["pressure_samples"] == 3
    assert "pressure critical (4)" in guard.stderr.read()


def test_waits_while_pressure_is_warn_then_starts(mac, env, tmp_path):
    mac.set(pressure=2)
    log, stamp = tmp_path / "guard.jsonl", tmp_path / "stamp"
    guard = _guard(mac, env, log, command=procs("stamp", stamp))
    waiting = _wait_for(log, "waiting", guard)
    assert waiting["reason"] == "memory pressure warn (2) (waiting while warn or worse)"
    mac.set(pressure=1)
    assert _finish(guard) == 0 and stamp.exists()


def test_need_that_the_old_level_admitted_is_refused(mac, env, tmp_path):
    need, floor = 20 * GIB, 48 * GIB * 10 // 100      # --need 20G + the default --kill-free 10 %
    old_available = 48 * GIB * ISSUE_MAC["level"] // 100   # kern.memorystatus_level x hw.memsize
    assert old_available >= need + floor                    # the old reader would have started it
    log = tmp_path / "guard.jsonl"
    guard = _guard(mac, env, log, "--need", "20G", "--start-timeout", "1", command=["true"])
    assert _finish(guard) == 4
    timeout = _wait_for(log, "timeout", guard)
    assert "available 16.0 GiB < need 20.0 GiB + kill-free floor 4.8 GiB" in timeout["reason"]
    log2 = tmp_path / "guard2.jsonl"
    fits = _guard(mac, env, log2, "--need", "10G", "--start-timeout", "5", command=["true"])
    assert _finish(fits) == 0


def test_unknown_pressure_is_not_fine(mac, env, tmp_path):
    mac.set(pressure=None)
    log = tmp_path / "guard.jsonl"
    guard = _guard(mac, env, log, "--start-timeout", "1", command=["true"])
    assert _finish(guard) == 4
    assert ("pressure cannot be read (unknown is not fine)"
            in _wait_for(log, "timeout", guard)["reason"])
    off = _guard(mac, env, tmp_path / "off.jsonl", "--wait-pressure", "off",
                 "--stop-at-pressure", "off", "--start-timeout", "5", command=["true"])
    assert _finish(off) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux has no pressure reading")
def test_pressure_options_refused_where_there_is_no_pressure(env):
    env = {k: v for k, v in env.items() if k != "STAGELOAD_MACOS_LIBSYSTEM"}
    done = subprocess.run(guard_cmd("--stop-at-pressure", "critical", command=["true"]), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "memory pressure is a macOS reading and this platform has none" in done.stderr


# -- the pure decisions ---------------------------------------------------------------------------
READ = {"available": 16 * GIB, "total": 48 * GIB, "swap": 0, "swap_total": 0, "pressure": 1}


def test_admission_pressure_condition():
    config = GuardConfig(wait_pressure=2, kill_free=None, swap_budget=None)
    assert decide_admission(config, READ).ok
    for level, blocked in ((2, True), (4, True), (1, False)):
        verdict = decide_admission(config, {**READ, "pressure": level})
        assert verdict.ok is not blocked and (("pressure" in verdict.blocking) is blocked)
    verdict = decide_admission(config, {**READ, "pressure": None})
    assert not verdict.ok and verdict.blocking == ("unknown",)
    critical_only = GuardConfig(wait_pressure=4, kill_free=None, swap_budget=None)
    assert decide_admission(critical_only, {**READ, "pressure": 2}).ok


def test_budget_pressure_needs_consecutive_samples_and_ignores_unknown():
    budget = Budget(GuardConfig(stop_at_pressure=4, kill_samples=3,
                                kill_free=Amount(percent=10)), 0)
    for level in (4, 4, None, 2):            # unknown neither counts nor clears; 2 clears
        assert budget.observe({**READ, "pressure": level}) is None
    assert budget.pressure_samples == 0
    assert budget.observe({**READ, "pressure": 4}) is None
    assert budget.observe({**READ, "pressure": 4}) is None
    assert "memory pressure critical (4)" in budget.observe({**READ, "pressure": 4})
    off = Budget(GuardConfig(stop_at_pressure=None, kill_samples=1), 0)
    assert off.observe({**READ, "pressure": 4}) is None


def test_pressure_level_words():
    from stageload.guard.pressure import level_name, parse_level

    assert [parse_level(w) for w in ("warn", "Warning", "2", "critical", "4", "normal")] == \
        [2, 2, 2, 4, 4, 1]
    assert parse_level("off") is None and parse_level("none") is None
    with pytest.raises(ValueError, match="warn, critical or off"):
        parse_level("high")
    assert level_name(None) == "unknown" and level_name(4) == "critical (4)"
