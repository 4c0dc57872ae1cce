"""``stageload guard`` SIGKILLed while its command runs — the command's whole
process group is stopped by the guard's death watcher (a pipe only the guard holds; the
watcher sees end-of-file when the kernel closes it), and a guard that ends normally releases
the watcher without touching anything. Linux run here; the same POSIX code is the macOS path."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from stageload.guard.deathwatch import DeathWatch

REPO = Path(__file__).resolve().parents[2]
FAMILY = ("import subprocess, sys, time; "
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
          "time.sleep(120)")


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)


def test_a_released_watch_touches_nothing():
    target = _sleeper()
    try:
        watch = DeathWatch(target.pid, grace=0.5).start()
        watch.release()
        assert watch.proc.returncode == 0
        assert target.poll() is None  # still running: the watcher did not signal it
    finally:
        target.kill()
        target.wait()


def test_the_write_end_closing_stops_the_group():
    """What the guard's death does to the pipe, done by hand: end-of-file, no "done"."""
    target = _sleeper()
    watch = DeathWatch(target.pid, grace=0.5).start()
    os.close(watch._write)  # the kernel does this when the guard dies
    watch._write = None
    assert target.wait(timeout=10) == -signal.SIGTERM
    assert watch.proc.wait(timeout=10) == 0


def test_sigkill_of_the_guard_stops_its_commands_group(tmp_path):
    log = tmp_path / "guard.jsonl"
    guard = subprocess.Popen([sys.executable, "-m", "stageload", "guard", "--log", str(log), "--",
                              sys.executable, "-c", FAMILY], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO),
                                  "STAGELOAD_GUARD_DIR": str(tmp_path / "registry")},
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        started = None
        while started is None and time.monotonic() < deadline:  # the log's own lines, in order
            if log.exists():
                for line in log.read_text().splitlines():
                    ev = json.loads(line)
                    if ev.get("state") == "started":
                        started = ev
            time.sleep(0.05)
        assert started is not None, "the guard never started its command"
        command = psutil.Process(started["readings"]["pid"])
        deadline = time.monotonic() + 30
        while not command.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        family = [command] + command.children(recursive=True)
        assert len(family) == 2
        guard.send_signal(signal.SIGKILL)
        guard.wait(timeout=10)
        gone, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, f"still running after the guard was killed: {alive}"
    finally:
        if guard.poll() is None:
            guard.kill()
        try:
            os.killpg(started["readings"]["pid"], signal.SIGKILL) if started else None
        except (ProcessLookupError, PermissionError, TypeError):
            pass


@pytest.mark.parametrize("code", [0, 3])
def test_a_guard_that_ends_normally_leaves_no_watcher(tmp_path, code):
    proc = subprocess.run([sys.executable, "-c", (
        "import sys, psutil\n"
        "from stageload.guard import Guard, GuardConfig\n"
        "g = Guard(GuardConfig(), human=None)\n"
        f"rc = g.run([sys.executable, '-c', 'import sys; sys.exit({code})'])\n"
        "print(rc, len(psutil.Process().children()))\n")],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "STAGELOAD_GUARD_DIR": str(tmp_path / "r")})
    assert proc.stdout.split() == [str(code), "0"], proc.stderr
