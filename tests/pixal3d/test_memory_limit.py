"""An address-space limit (RLIMIT_AS, ``prlimit --as``) under which the Pixal3D stand-in's
allocations fail: ``out_of_memory`` naming the limit and its value, with a hint to raise it
— a real run under a real limit."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

PRLIMIT = shutil.which("prlimit")
needs_prlimit = pytest.mark.skipif(PRLIMIT is None, reason="util-linux prlimit not installed")


def _run(limit, args, cwd, env=None, timeout=300):
    proc = subprocess.run([PRLIMIT, limit, sys.executable, "-m", "runner", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@needs_prlimit
def test_an_address_space_limit_is_out_of_memory_naming_it(standin_weights, repo_root, tmp_path):
    from standin import PORT_DIR
    image = repo_root / "tests" / "data" / "images" / "character_1.png"
    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu"}
    proc, events = _run("--as=734003200", [image, "-o", tmp_path / "a.glb", "--backend", "pixal3d",
                                           "--pixal3d-dir", PORT_DIR, "--texture-size", "512"],
                        repo_root, env)
    err = events[-1]
    assert err["kind"] == "out_of_memory" and proc.returncode == 47, (err, proc.stderr[-2000:])
    assert "address-space limit (RLIMIT_AS, `ulimit -v`) of 700.0 MiB" in err["message"], err
    assert "ulimit -v unlimited" in err["hint"] and "Traceback" not in proc.stderr


