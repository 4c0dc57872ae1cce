"""``python -m stageload guard`` end to end with real processes: exit codes 0, the command's own,
3, 4, 127, 128+signal; --busy/--quiet-for timing; --wait-free timeout; usage errors."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from guard_helpers import alive, guard_cmd, procs, run_guard, wait_for_file

from stageload.meter import system_memory

FAST = ["--poll", "0.1", "--grace", "1"]


def test_exit_zero_and_command_own_code(env):
    code, err, _ = run_guard(FAST, ["true"], env)
    assert code == 0, err
    assert "guard: start:" in err
    code, err, _ = run_guard(FAST, [sys.executable, "-c", "import sys; sys.exit(7)"], env)
    assert code == 7, err


def test_command_killed_by_signal_gives_128_plus_n(env):
    code, err, _ = run_guard(FAST, [sys.executable, "-c",
                                    "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], env)
    assert code == 128 + signal.SIGKILL, err


def test_cannot_start_is_127(env, tmp_path):
    code, err, _ = run_guard(FAST, [str(tmp_path / "no-such-program")], env)
    assert code == 127
    assert "cannot start" in err and "No such file" in err
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(script, 0o644)
    code, err, _ = run_guard(FAST, [str(script)], env)
    assert code == 127, err
    assert "Permission denied" in err
    assert f"chmod +x {script}" in err and f"sh {script}" in err
    code, err, _ = run_guard(FAST, [str(tmp_path)], env)
    assert code == 127, err
    assert "is a folder, which cannot be run" in err


@pytest.mark.parametrize("option", [["--wait-free", "{total_plus_1}B"], ["--wait-free", "100%"],
                                    ["--need", "{total_plus_1}B"],
                                    ["--kill-free", "{total_plus_1}B"]])
def test_a_condition_that_can_never_hold_is_refused_at_once(env, tmp_path, option):
    """More than the machine's total memory (or 100 %) would wait for ever: exit 2 at once,
    a message naming the machine's total, nothing started, no traceback."""
    total = system_memory().total
    option = [o.format(total_plus_1=total + 1) for o in option]
    code, err, seconds = run_guard(FAST + option, procs("stamp", tmp_path / "started"), env)
    assert code == 2, err
    assert seconds < 10
    assert not (tmp_path / "started").exists()
    assert "Traceback" not in err and err.startswith("guard: " + option[0])
    assert ("never" in err or "every command would be stopped" in err) and "total" in err
    if option[1] != "100%":
        from stageload.guard import format_size
        assert f"this machine's {format_size(total)} total memory" in err


def test_wait_free_beyond_what_is_available_times_out_with_4(env, tmp_path):
    total = system_memory().total
    log = tmp_path / "guard.jsonl"
    # 99.99 % is allowed, but the kernel alone uses more than 0.01 %
    code, err, seconds = run_guard(
        FAST + ["--wait-free", "99.99%", "--start-timeout", "1.5", "--log", str(log)],
        procs("stamp", tmp_path / "started"), env)
    assert code == 4, err
    assert 1.5 <= seconds < 6.0, seconds  # waited the whole --start-timeout, then gave up
    assert not (tmp_path / "started").exists(), "the command ran although there was no room"
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    assert [d["state"] for d in decisions] == ["waiting", "timeout", "exited"]
    assert (decisions[-1]["exit_code"], decisions[-1]["by"]) == (4, "guard")
    decisions.pop()
    assert decisions[-1]["readings"]["total"] == total
    assert decisions[-1]["readings"]["available"] <= total
    assert "guard: timeout: no room after 1.5 s: available" in err


def test_kill_free_stop_is_exit_3_even_at_full_memory(env, tmp_path):
    """100 % can never hold, so the budget stops the command after --kill-samples polls."""
    log = tmp_path / "guard.jsonl"
    code, err, seconds = run_guard(FAST + ["--kill-free", "100%", "--kill-samples", "2",
                                           "--log", str(log)],
                                   ["sleep", "30"], env)
    assert code == 3, err
    assert seconds < 10
    *_, stop, exited = [json.loads(line) for line in log.read_text().splitlines()]
    assert exited["state"] == "exited" and (exited["exit_code"], exited["by"]) == (3, "guard")
    assert stop["state"] == "stopped" and stop["readings"]["low_samples"] == 2
    assert "for 2 consecutive samples" in stop["reason"]


def test_busy_then_quiet_for_measured_across_a_chain(env, tmp_path, tag):
    """Two busy jobs with a 0.6 s gap (a chain): the command may start only --quiet-for seconds
    after the second one ended — the gap does not count as quiet. Each busy job writes the time
    just before it exits, so the measured quiet time is never overstated."""
    quiet_for = 1.5
    marker = f"busyjob-{tag}"
    busy_argv = [sys.executable, "-c",
                 "import time, sys; time.sleep(float(sys.argv[1])); "
                 "open(sys.argv[2], 'w').write(repr(time.time()))"]
    ends = [tmp_path / "first.end", tmp_path / "second.end"]

    def chain():
        subprocess.run(busy_argv + ["1.0", str(ends[0]), marker], env=env)
        time.sleep(0.6)
        subprocess.run(busy_argv + ["1.0", str(ends[1]), marker], env=env)

    runner = threading.Thread(target=chain)
    runner.start()
    time.sleep(0.3)  # the first busy job is running
    log = tmp_path / "guard.jsonl"
    stamp = tmp_path / "started"
    try:
        code, err, _ = run_guard(["--poll", "0.1", "--busy", marker, "--quiet-for", str(quiet_for),
                                  "--log", str(log)], procs("stamp", stamp), env, timeout=30)
    finally:
        runner.join()
    assert code == 0, err
    first_end, second_end = (float(p.read_text()) for p in ends)
    started = float(stamp.read_text())
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    started_decision = next(d for d in decisions if d["state"] == "started")
    waiting = [d for d in decisions if d["state"] == "waiting"]
    assert waiting and waiting[0]["reason"].startswith("busy: pid ")
    assert marker in waiting[0]["reason"]
    # Started only after quiet_for had passed since the *last* busy job ended …
    assert started_decision["t"] - second_end >= quiet_for
    assert started - second_end >= quiet_for
    # … and not much later (the guard polls every 0.1 s; slack for a loaded machine).
    assert started_decision["t"] - second_end < quiet_for + 3.0
    # The gap between the jobs (0.6 s) was not taken for quiet.
    assert second_end > first_end + 0.6


def test_busy_ignores_the_guard_itself_and_its_parents(env, tmp_path, tag):
    # The pattern occurs in the guard's own command line and in this shell's; neither counts.
    code, err, seconds = run_guard(FAST + ["--busy", f"self-{tag}", "--quiet-for", "0.2"],
                                   ["sh", "-c", f"exit 0 # self-{tag}"], env)
    assert code == 0, err
    assert "busy:" not in err


def test_guard_sigterm_stops_the_command_first_and_exits_143(env, tmp_path, tag):
    pidfile = tmp_path / "pids"
    guard = subprocess.Popen(guard_cmd(*FAST, command=procs("tree", pidfile, tag)), env=env,
                             stderr=subprocess.PIPE, text=True)
    try:
        pids = [int(line) for line in wait_for_file(pidfile).split()]
        assert all(alive(p) for p in pids)
        guard.send_signal(signal.SIGTERM)
        code = guard.wait(timeout=20)
        # Checked at once after the guard exited: nothing of the command may still run.
        assert [p for p in pids if alive(p)] == []
        err = guard.stderr.read()
        assert code == 128 + signal.SIGTERM, err
        assert "guard: stop: the guard got SIGTERM; stopping the command first" in err
    finally:
        if guard.poll() is None:
            guard.kill()
            guard.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_guard_sigint_sighup_while_waiting_exit_128_plus_n(env, tmp_path, sig):
    stamp = tmp_path / "started"
    log = tmp_path / "guard.jsonl"
    guard = subprocess.Popen(guard_cmd(*FAST, "--wait-free", "99.99%", "--log", str(log),
                                       command=procs("stamp", stamp)),
                             env=env, stderr=subprocess.PIPE, text=True)
    try:
        # wait until it logged "waiting": its signal handlers are in place
        end = time.monotonic() + 20
        while (time.monotonic() < end
               and '"waiting"' not in (log.read_text() if log.exists() else "")):
            time.sleep(0.05)
        guard.send_signal(sig)
        assert guard.wait(timeout=10) == 128 + sig
        assert not stamp.exists()
        err = guard.stderr.read()
        assert "guard: interrupted while waiting; nothing was started" in err
        assert "Traceback" not in err
        exited = json.loads(log.read_text().splitlines()[-1])
        assert (exited["state"], exited["exit_code"], exited["by"]) == \
            ("exited", 128 + sig, "guard")
    finally:
        if guard.poll() is None:
            guard.kill()
            guard.wait()


def test_leftovers_are_stopped_when_the_command_exits(env, tmp_path, tag):
    pidfile = tmp_path / "bg"
    script = (f"import subprocess, sys; "
              f"p = subprocess.Popen({procs('sleeper', tag)!r}, start_new_session=True); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid))")
    code, err, _ = run_guard(FAST, [sys.executable, "-c", script], env)
    assert code == 0, err
    assert not alive(int(pidfile.read_text()))
    assert "leaving 1 process(es); stopping them" in err


@pytest.mark.parametrize("options, message", [
    (["--wait-free", "lots"], "neither a percent"),
    (["--wait-free", "140%"], "between 0% and 100%"),
    (["--busy", "(unclosed"], "not a valid regular expression"),
    (["--need-from", "/no/such/trace.jsonl"], "does not exist"),
    (["--poll", "0"], "--poll must be more than 0"),
    # a plain number is almost always a forgotten unit (it would mean bytes)
    (["--wait-free", "40"], "'40' has no unit (it would mean 40 bytes); write 40% or 40G"),
    (["--kill-free", "10"], "'10' has no unit (it would mean 10 bytes); write 10% or 10G"),
    (["--need", "30"], "'30' has no unit; write 30G, 30M or 30B"),
    (["--swap-budget", "6"], "'6' has no unit"),
    (["--swap-limit", "1"], "'1' has no unit"),
    # argparse quirks: a value starting with '-', a number that is not one
    (["--swap-budget", "-1G"], "must be joined with '=', e.g. --swap-budget=VALUE"),
    (["--wait-free", "-5%"], "must be joined with '='"),
    (["--swap-budget=-1G"], "a size cannot be negative"),
    (["--poll", "abc"], "--poll: 'abc' is not a number of seconds >= 0; write e.g. 0.5"),
    (["--kill-samples", "x"], "'x' is not a whole number >= 1"),
])
def test_bad_options_exit_2_with_a_message(env, options, message):
    code, err, _ = run_guard(options, ["true"], env)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert "could not convert" not in err and "invalid literal" not in err


def test_units_are_accepted_with_a_suffix_or_as_zero(env):
    code, err, _ = run_guard(FAST + ["--wait-free", "0", "--need", "1024B", "--swap-budget", "6G",
                                     "--swap-limit", "0", "--kill-free", "1%"], ["true"], env)
    assert code == 0, err
    assert "covers need 1.0 KiB" in err  # binary sizes carry their IEC names


def test_a_forgotten_double_dash_gets_a_hint(env):
    done = subprocess.run([sys.executable, "-m", "stageload", "guard", "--poll", "0.1",
                           "sleep", "1"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert ("put -- before the command: python -m stageload guard [options] -- sleep 1"
            in done.stderr)
    assert "Traceback" not in done.stderr


def test_help_explains_exit_codes_and_the_exited_line(env):
    done = subprocess.run([sys.executable, "-m", "stageload", "guard", "--help"],
                          env=env, capture_output=True, text=True, timeout=30)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    assert "A command may exit 3 or 4 itself" in text and '"by": "command"|"guard"' in text


@pytest.mark.parametrize("own, by", [(3, "command"), (0, "command")])
def test_exited_line_tells_the_commands_code_from_the_guards(env, tmp_path, own, by):
    """A command that exits 3 itself looks like a budget stop by exit code alone; the last
    --log line says who decided it."""
    log = tmp_path / "guard.jsonl"
    code, err, _ = run_guard(FAST + ["--log", str(log)],
                             [sys.executable, "-c", f"import sys; sys.exit({own})"], env)
    assert code == own, err
    last = json.loads(log.read_text().splitlines()[-1])
    assert {k: last[k] for k in ("event", "state", "exit_code", "by")} == \
        {"event": "guard", "state": "exited", "exit_code": own, "by": by}
    assert not any(json.loads(line)["state"] == "stopped" for line in log.read_text().splitlines())


def test_missing_command_is_a_usage_error(env):
    done = subprocess.run([sys.executable, "-m", "stageload", "guard", "--poll", "1"], env=env,
                          stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2
    assert "no command given; put it after --" in done.stderr


def test_log_is_appended_not_overwritten(env, tmp_path):
    log = tmp_path / "decisions.jsonl"
    log.write_text('{"event": "earlier"}\n')
    code, err, _ = run_guard(FAST + ["--log", str(log)], ["true"], env)
    assert code == 0, err
    lines = log.read_text().splitlines()
    assert json.loads(lines[0]) == {"event": "earlier"}
    assert json.loads(lines[1])["state"] == "started"


def test_need_from_an_earlier_trace_admits_or_waits(env, tmp_path):
    total = system_memory().total
    small, huge = tmp_path / "small.trace.jsonl", tmp_path / "huge.trace.jsonl"
    small.write_text(json.dumps({"event": "sample", "t": 1.0, "pid": 1,
                                 "footprint": 64 * 1024**2, "hwm": None}) + "\n")
    huge.write_text(json.dumps({"event": "sample", "t": 1.0, "pid": 1,
                                "footprint": 1, "hwm": total - 2**20}) + "\n")
    code, err, _ = run_guard(FAST + ["--need-from", str(small)], ["true"], env)
    assert code == 0, err
    assert "covers need 64.0 MiB" in err
    # total − 1 MiB plus the default 10 % floor can never fit: refused at once, nothing started
    code, err, seconds = run_guard(FAST + ["--need-from", str(huge)], ["true"], env)
    assert code == 2 and seconds < 10, err
    assert "plus the --kill-free floor" in err and "it can never start" in err
    assert "Traceback" not in err
    # without the floor it could fit in theory: it waits, then times out
    code, err, _ = run_guard(FAST + ["--need-from", str(huge), "--kill-free", "off",
                                     "--start-timeout", "0.5"], ["true"], env)
    assert code == 4, err
    assert "< need " in err
