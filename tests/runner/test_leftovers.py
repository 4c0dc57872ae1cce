"""Nothing of a job outlives the runner: a helper the worker started — left
in the worker's process group, or in a session of its own, and re-parented to init when its
shell exits — is stopped by the supervisor after a ``result`` and after an ``error``."""
from __future__ import annotations

import psutil
import pytest

# The worker starts `sleep 300` through a shell that exits at once (so the sleep is re-parented
# to init), writes the sleep's pid to a file, and waits until the file is complete.
_HELPER = """
import os, subprocess, time
pidfile = {pidfile!r}
subprocess.Popen(["sh", "-c", '{detach}sleep 300 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"',
                  pidfile])
while not os.path.exists(pidfile):
    time.sleep(0.01)
"""


def _helper(pidfile) -> psutil.Process | None:
    try:
        return psutil.Process(int(pidfile.read_text()))
    except psutil.NoSuchProcess:
        return None


@pytest.mark.parametrize("detach", ["", "setsid "], ids=["same-group", "own-session"])
@pytest.mark.parametrize("image, kind", [("character", None), ("noisy", "background_not_plain")],
                         ids=["result", "error"])
def test_a_helper_the_worker_started_does_not_outlive_the_runner(rt, request, tmp_path, detach,
                                                                   image, kind):
    pidfile = tmp_path / "helper.pid"
    hook = _HELPER.format(pidfile=str(pidfile), detach=detach)
    fin = rt.run([request.getfixturevalue(image), "-o", tmp_path / "out.glb"], worker_hook=hook)
    helper = _helper(pidfile)
    try:
        assert fin.last()["event"] == ("result" if kind is None else "error"), fin.stderr[-2000:]
        assert fin.last().get("kind") == kind
        assert helper is None or not rt.alive([helper]), \
            (f"helper {helper.pid} ({helper.name()}) outlived the runner; "
             f"stderr: {fin.stderr[-1500:]}")
        assert "leaving 1 process(es); stopping them" in fin.stderr
    finally:
        if helper is not None and rt.alive([helper]):
            helper.kill()
