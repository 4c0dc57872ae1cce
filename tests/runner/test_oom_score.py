"""The worker is the Linux OOM killer's choice among a job's processes: it raises its own
``oom_score_adj`` (runner/worker/oom.py) and nobody lowers anyone's. A real runner job whose worker
has
grown past the supervisor, held at its exit so its ``/proc`` files can be read while it lives."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.worker.oom import WORKER_OOM_SCORE_ADJ, volunteer_for_oom_killer

from .conftest import PY, REPO, env

pytestmark = pytest.mark.skipif(not Path("/proc/self/oom_score_adj").exists(),
                                reason="oom_score_adj is Linux's (/proc); macOS has none")

# The worker grows by 300 MB, then, at its very end (os._exit, after it has done its job and
# raised its oom_score_adj), says its pid and waits to be let go.
HOLD_AT_EXIT = r'''
import os, time
_ballast = bytearray(300 << 20)
for _i in range(0, len(_ballast), 4096):
    _ballast[_i] = 1
_real_exit = os._exit
def _held_exit(code, _real_exit=_real_exit):
    tmp = os.environ["OOM_TEST_PID"] + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, os.environ["OOM_TEST_PID"])
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["OOM_TEST_GO"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    _real_exit(code)
os._exit = _held_exit
'''


def _read(pid: int, name: str) -> int:
    return int(Path(f"/proc/{pid}/{name}").read_text().strip())


def test_a_grown_worker_has_the_highest_oom_score_of_the_job(character, tmp_path):
    pid_file, go = tmp_path / "worker.pid", tmp_path / "go"
    e = env(worker_hook=HOLD_AT_EXIT)
    e.update(OOM_TEST_PID=str(pid_file), OOM_TEST_GO=str(go))
    own = _read(os.getpid(), "oom_score_adj")
    proc = subprocess.Popen([PY, "-m", "runner", str(character), "-o", str(tmp_path / "c.glb")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=e, cwd=REPO)
    try:
        # the worker writes its pid file only at its exit; the supervisor waits for it
        waited = subprocess.run([sys.executable, "-c", (
            "import os, sys, time\n"
            "end = time.monotonic() + 150\n"
            "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
            "    time.sleep(0.05)\n"
            "sys.exit(0 if os.path.exists(sys.argv[1]) else 1)\n"), str(pid_file)], timeout=180)
        assert waited.returncode == 0, proc.communicate(timeout=60)[1][-3000:]
        worker = int(pid_file.read_text())
        assert worker != proc.pid
        scores = {"worker": _read(worker, "oom_score"), "supervisor": _read(proc.pid, "oom_score")}
        adj = {"worker": _read(worker, "oom_score_adj"),
               "supervisor": _read(proc.pid, "oom_score_adj")}
    finally:
        go.write_text("go")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert adj == {"worker": max(own, WORKER_OOM_SCORE_ADJ), "supervisor": own}
    assert scores["worker"] > scores["supervisor"], scores


def test_volunteering_raises_never_lowers_and_checks_its_range(tmp_path):
    f = tmp_path / "oom_score_adj"
    f.write_text("0\n")
    assert volunteer_for_oom_killer(300, path=str(f)) == 300 and f.read_text() == "300\n"
    f.write_text("800\n")
    assert volunteer_for_oom_killer(300, path=str(f)) == 800 and f.read_text() == "800\n"
    assert volunteer_for_oom_killer(300, path=str(tmp_path / "missing")) is None
    with pytest.raises(ValueError, match="-1000..1000"):
        volunteer_for_oom_killer(1001, path=str(f))
