"""The export benchmark's quality figures on a real export of a small generated asset
(the bounded engine, in the benchmark's worker process), and the GLB imported by the add-on's
importer with the real bpy module: upright (Blender's Z-up frame is the port's own, so the
imported box is the asset's) and textured."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.export_engine import quality
from standin.asset import build_asset, write_asset

REPO = Path(__file__).resolve().parents[2]
PICTURE = REPO / "tests" / "data" / "images" / "typical_humanoid_goblin.png"
TARGET = 8000


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    work = tmp_path_factory.mktemp("export")
    asset = work / "asset.npz"
    write_asset(asset, build_asset(PICTURE, 96))
    glb = work / "asset.glb"
    run = subprocess.run([sys.executable, "-m", "bench.export_engine.worker", str(asset),
                          str(glb), "--target", str(TARGET), "--texture", "512"],
                         cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return asset, glb


def test_quality_of_a_small_export(exported):
    asset, glb = exported
    q = quality.evaluate(asset, glb, TARGET, distance_samples=20_000, colour_samples=20_000)
    assert q["checks"] == {name: True for name in q["checks"]}, json.dumps(q, indent=1)
    assert q["colour"]["not_found"] == 0 and q["texels"]["used"] > 0


def test_the_addons_importer_brings_it_in_upright_and_textured(exported):
    asset, glb = exported
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("blender_import_glb.py")),
                          str(glb)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stdout[-2000:] + run.stderr[-2000:]
    got = json.loads(lines[-1][len("RESULT "):])
    v = np.load(asset)["vertices"]
    voxel = 1 / 96
    np.testing.assert_allclose(got["min"], v.min(0), atol=2 * voxel)
    np.testing.assert_allclose(got["max"], v.max(0), atol=2 * voxel)
    height = np.subtract(got["max"], got["min"])
    assert height[2] == max(height)  # the character stands along Blender's Z
    assert got["image"] == [512, 512]
    assert ["TEX_IMAGE", "Base Color"] in got["links"]
