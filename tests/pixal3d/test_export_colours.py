"""A stand-in Pixal3D run exported by the port's own engine (``--export-engine port``) shows
its asset's voxel colours, as the bounded engine's run does (tests/pixal3d/
test_bounded_export.py): the voxels the stand-in's decoder writes lie on the grid they declare,
the convention both engines read (``coords`` on the ``resolution``³ grid, ``voxel_size``
1 / resolution, ``origin`` −0.5)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.pixal3d.voxel_colours import assert_shows_the_voxels


@pytest.mark.slow
def test_a_port_engine_runs_glb_shows_its_assets_voxel_colours(
        standin_weights, standin_dir, rgb_image, tmp_path, repo_root):
    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
           "PIXAL3D_STANDIN_EXPORT_SCALE": "0"}
    out = tmp_path / "char.glb"
    proc = subprocess.run([sys.executable, "-m", "runner", str(rgb_image), "-o", str(out),
                           "--backend", "pixal3d", "--pixal3d-dir", str(standin_dir),
                           "--texture-size", "512", "--export-engine", "port", "--keep-asset"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["event"] == "result" and "bvh" in result["info"]["export_substeps"]
    assert_shows_the_voxels(out, tmp_path / "char.asset.npz", "port")
