"""A closed stdin, stdout or stderr (``python -m runner … >&-``) is pointed at /dev/null first
thing, in the supervisor and the worker: the job still writes its GLB."""
from __future__ import annotations

import shlex
import subprocess

import pytest


@pytest.mark.parametrize("closed", ["<&-", ">&-", "2>&-", "<&- >&- 2>&-"])
def test_a_run_with_closed_standard_descriptors_writes_its_glb(rt, character, tmp_path, closed):
    out = tmp_path / "closed.glb"
    command = (f"exec {shlex.quote(rt.PY)} -m runner {shlex.quote(str(character))} -o "
               f"{shlex.quote(str(out))} {closed}")
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=180,
                          env=rt.env(), cwd=rt.REPO)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert out.read_bytes()[:4] == b"glTF"
    assert "Traceback" not in proc.stderr
    if ">&-" not in closed:  # stdout open: the protocol stream is whole
        events = rt.parse(proc.stdout)
        assert events[0]["event"] == "hello" and events[-1]["event"] == "result"
    if "2>&-" not in closed:
        assert "runner: wrote" in proc.stderr
