"""Admission is a reservation, not a snapshot: guards — the
``python -m stageload guard`` command and the runner's — admitted with ``--need`` hold that
need until their command's measured footprint takes it over, and later admissions anywhere on
the machine see it. Every guard here shares a registry folder of its own
(``$STAGELOAD_GUARD_DIR``), so guards of other programs on this machine do not interfere."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stageload.guard.reservations import Reservations
from stageload.meter import system_memory

REPO = Path(__file__).resolve().parents[2]
RUNS = 6


@pytest.fixture
def registry(tmp_path, monkeypatch):
    folder = tmp_path / "registry"
    monkeypatch.setenv("STAGELOAD_GUARD_DIR", str(folder))
    return folder


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _one_fits() -> int:
    """A need (bytes) such that one command fits in the available memory and two do not."""
    return int(system_memory().available * 0.6)


def test_six_guards_with_a_need_only_one_fits_run_one_after_another(registry, tmp_path):
    need = _one_fits()
    spans_file = tmp_path / "spans"
    # Each command records when it began and when it is about to end.
    command = [sys.executable, "-c", "import sys, time; began = time.time(); time.sleep(1.5); "
               "open(sys.argv[1], 'a').write(f'{began} {time.time()}\\n')", str(spans_file)]
    procs = [subprocess.Popen([sys.executable, "-m", "stageload", "guard", "--need", f"{need}B",
                               "--kill-free", "0", "--poll", "0.1", "--start-timeout", "120",
                               "--", *command],
                              stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
             for _ in range(RUNS)]
    errs = [p.communicate(timeout=180)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * RUNS, errs
    spans = sorted(tuple(map(float, line.split())) for line in spans_file.read_text().splitlines())
    assert len(spans) == RUNS
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, f"two commands ran at once: {spans}"
    # Under load a guard may start only after the others have finished and never wait; the
    # commands' 1.5 s keep most of them waiting on a reservation.
    assert any("reserved by 1 admitted job(s)" in err for err in errs), errs
    assert not list(registry.joinpath("reservations").glob("*.json"))  # all released


def test_a_runner_waits_for_a_guards_reservation(registry, tmp_path):
    """The runner's guard and a `python -m stageload guard` see each other's reservations."""
    from PIL import Image

    need = _one_fits()
    holder = subprocess.Popen([sys.executable, "-m", "stageload", "guard", "--need", f"{need}B",
                               "--kill-free", "0", "--poll", "0.1", "--", "sleep", "3"],
                              stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
    image = tmp_path / "c.png"
    Image.new("RGB", (64, 96), (255, 255, 255)).save(image)
    deadline = time.monotonic() + 60
    while not list(registry.joinpath("reservations").glob("*.json")):
        assert time.monotonic() < deadline and holder.poll() is None, holder.stderr.read()
        time.sleep(0.05)
    runner = subprocess.run([sys.executable, "-m", "runner", str(image), "-o",
                             str(tmp_path / "c.glb"), "--need", f"{need}B", "--kill-free", "0",
                             "--poll", "0.1", "--start-timeout", "120"],
                            capture_output=True, text=True, timeout=180, env=_env(), cwd=REPO)
    holder.communicate(timeout=60)
    events = [json.loads(line) for line in runner.stdout.splitlines()]
    guard = [e for e in events if e["event"] == "guard"]
    assert guard[0]["state"] == "waiting" and "reserved by 1 admitted job(s)" in guard[0]["reason"]
    assert guard[0]["readings"]["reserved"] > 0
    started = next(e for e in guard if e["state"] == "started")
    assert holder.returncode == 0 and started["t"] >= guard[0]["t"]


def test_a_reservation_shrinks_as_the_command_grows_into_it(tmp_path):
    """A real command that allocates its need: held before, nothing once it holds it."""
    mine, other = Reservations(tmp_path), Reservations(tmp_path)
    need = 200 << 20
    command = subprocess.Popen([sys.executable, "-c",
                                "import sys; sys.stdin.readline(); b = bytearray(250 << 20); "
                                "b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); "
                                "sys.stdin.readline()"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with mine.locked():
            mine.reserve(need)
        mine.started(command.pid)
        held, count = other.held_by_others()
        assert count == 1 and need - (50 << 20) < held <= need
        command.stdin.write("go\n")
        command.stdin.flush()
        assert command.stdout.readline().strip() == "ok"
        assert other.held_by_others() == (0, 0)
    finally:
        command.kill()
        command.wait()
        mine.release()
    assert not list(tmp_path.glob("*.json"))


def test_a_killed_guards_reservation_is_stale(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "gone.json").write_text(json.dumps({"pid": dead.pid, "created": 1.0,
                                                    "need": 1 << 40, "command": None}))
    assert Reservations(tmp_path).held_by_others() == (0, 0)
    assert not (tmp_path / "gone.json").exists()
