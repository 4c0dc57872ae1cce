"""``python -m standin.sphere_asset``: help, a small asset written with its counts, and a
refusal to replace an existing file."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "standin.sphere_asset", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_help_and_a_small_asset(repo_root, tmp_path):
    helped = _run(["--help"], repo_root)
    assert helped.returncode == 0 and "--subdivisions" in helped.stdout
    out = tmp_path / "s.npz"
    made = _run([out, "--subdivisions", "3", "--resolution", "32"], repo_root)
    assert made.returncode == 0, made.stderr
    facts = json.loads(made.stdout)
    with np.load(out) as data:
        assert facts == {"path": str(out), "faces": 1280, "voxels": len(data["coords"])}
        assert data["faces"].shape == (1280, 3) and int(data["resolution"]) == 32
    before = out.read_bytes()
    again = _run([out, "--subdivisions", "2"], repo_root)
    assert again.returncode == 2 and "exists; pass --overwrite" in again.stderr
    assert out.read_bytes() == before
    bad = _run([tmp_path / "s.txt"], repo_root)
    assert bad.returncode == 2 and "must end in .npz" in bad.stderr
