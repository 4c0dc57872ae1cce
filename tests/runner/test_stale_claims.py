"""Claim files left by a runner killed outright: the next job that claims
anything in the same folder removes them, while a claim a live process holds stays. Real
processes take real flock claims; the stale one's holder is SIGKILLed."""
from __future__ import annotations

import signal
import subprocess
import sys

HOLD = ("import sys, time\n"
        "from pathlib import Path\n"
        "from runner.job.claims import Claim\n"
        "Claim(Path(sys.argv[1])).take()\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n")


def _holder(path, repo):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                            text=True, cwd=repo)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_job_removes_stale_claims_in_its_folder_and_keeps_live_ones(rt, character, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    killed = _holder(out / "old.glb", rt.REPO)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    live = _holder(out / "busy.glb", rt.REPO)
    try:
        assert (out / ".old.glb.claim").exists() and (out / ".busy.glb.claim").exists()
        fin = rt.run([character, "-o", out / "new.glb"])
        assert fin.returncode == 0, fin.stderr[-2000:]
        hidden = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
        assert hidden == [".busy.glb.claim"], hidden  # the stale one gone, the live one kept
        assert live.poll() is None
    finally:
        live.kill()
        live.wait()
