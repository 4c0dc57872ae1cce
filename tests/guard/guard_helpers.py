"""Helpers shared by the guard tests (imported by name: tests/guard/conftest.py puts this
directory on sys.path, since pytest's importlib mode does not)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
PROCS = str(HERE / "procs.py")
TAG_VAR = "GUARD_TEST_TAG"


def tagged(tag: str) -> list[psutil.Process]:
    """Live processes (zombies excluded) whose environment carries ``tag``; never this one."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(TAG_VAR) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def guard_cmd(*options: str, command: list[str]) -> list[str]:
    """``python -m stageload guard OPTIONS -- COMMAND``."""
    return [sys.executable, "-m", "stageload", "guard", *options, "--", *command]


def procs(*args: str) -> list[str]:
    """Command line for a role of procs.py."""
    return [sys.executable, PROCS, *map(str, args)]


def run_guard(options, command, env, timeout=30.0, stdout=None):
    """Run the guard to completion; returns (exit code, stderr text, seconds)."""
    began = time.monotonic()
    done = subprocess.run(guard_cmd(*options, command=command), env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)
    return done.returncode, done.stderr, time.monotonic() - began


def kill_tagged(tag: str) -> None:
    """SIGKILL every process carrying ``tag`` until none is left (at most ~5 s)."""
    for _ in range(50):
        left = tagged(tag)
        if not left:
            return
        for proc in left:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        time.sleep(0.1)


def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    """Wait until ``path`` exists and return its text."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")
