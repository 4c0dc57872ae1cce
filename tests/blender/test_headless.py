"""The headless script as ``make demo`` runs it: ``python blender_addon/headless.py …`` with the
bpy module of the .venv and the real runner (built-in backend).

``blender -b -P headless.py -- …`` (the Blender application) is not tested here: this machine
has only the bpy module, no Blender binary.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.blender
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "blender_addon" / "headless.py"
PY = sys.executable

READ_BLEND = """
import bpy, json, sys
bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
print("BLEND " + json.dumps([{"name": o.name, "type": o.type,
    "collections": [c.name for c in o.users_collection],
    "props": {k: o[k] for k in o.keys() if k.startswith("image_to_mesh_")}}
    for o in bpy.data.objects]))
"""


def run(*args, timeout=180):
    return subprocess.run([PY, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_headless_writes_glb_blend_and_a_preview_of_the_character(tmp_path, shared_images):
    src = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    glb, blend, png = tmp_path / "g.glb", tmp_path / "g.blend", tmp_path / "g.png"
    proc = run(src, "--glb", glb, "--blend", blend, "--preview", png, "--texture-size", 512,
               "--resolution", 384)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert glb.stat().st_size > 10_000 and glb.read_bytes()[:4] == b"glTF"
    assert (tmp_path / "g.trace.jsonl").stat().st_size > 0

    out = subprocess.run([PY, "-c", READ_BLEND, str(blend)], capture_output=True, text=True,
                         timeout=60)
    objs = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("BLEND "))[6:])
    meshes = [o for o in objs if o["type"] == "MESH"]
    assert [m["name"] for m in meshes] == [src.stem]
    assert meshes[0]["collections"] == ["Image to Mesh"]
    assert meshes[0]["props"]["image_to_mesh_backend"] == "builtin"
    assert not [o for o in objs if o["type"] == "EMPTY"]

    # The preview shows a textured character, not an empty or grey frame: many pixels differ
    # from the background (the corner colour) and the goblin's green dominates them.
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert rgb.shape == (384, 384, 3)
    bg = rgb[2, 2]
    fg = np.abs(rgb - bg).sum(axis=2) > 40
    assert 0.08 < fg.mean() < 0.8, fg.mean()
    r, g, b = (rgb[..., i][fg].mean() for i in range(3))
    assert g > r and g > b, (r, g, b)
    # The character is framed: its bounding box is not cut by the image border.
    ys, xs = np.nonzero(fg)
    assert ys.min() > 0 and xs.min() > 0 and ys.max() < 383 and xs.max() < 383


@pytest.mark.parametrize("content, code", [
    (b"this is not a picture\n" * 100, 10),                  # not_an_image
    (b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 100, 13),      # image_truncated
])
def test_corrupt_image_gives_one_clear_line_and_nonzero_exit(tmp_path, content, code):
    bad = tmp_path / "broken.png"
    bad.write_bytes(content)
    proc = run(bad, "--blend", tmp_path / "out.blend", timeout=120)
    assert proc.returncode == code, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("image-to-mesh: error:")]
    assert len(errors) == 1, proc.stderr
    assert "broken.png" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out.blend").exists()


def test_existing_output_is_not_overwritten(tmp_path, shared_images):
    blend = tmp_path / "keep.blend"
    blend.write_bytes(b"user's file")
    proc = run(shared_images[0], "--blend", blend, timeout=60)
    assert proc.returncode == 20
    assert proc.stderr.strip().splitlines()[-1].startswith("image-to-mesh: error:")
    assert "--overwrite" in proc.stderr
    assert blend.read_bytes() == b"user's file"


def test_missing_outputs_is_a_usage_error(tmp_path, shared_images):
    proc = run(shared_images[0], timeout=60)
    assert proc.returncode == 2
    assert "give at least one of --glb, --blend, --preview" in proc.stderr


def test_headless_runs_from_the_unpacked_extension(tmp_path):
    """Inside the installed extension the package is named image_to_mesh and the runner comes
    from its runtime/ folder; a missing image is refused there with the same single line."""
    import zipfile

    dist = tmp_path / "dist"
    built = subprocess.run([PY, "-m", "blender_addon.build", "--out", str(dist)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    ext = tmp_path / "extensions" / "image_to_mesh"
    zipfile.ZipFile(built.stdout.strip()).extractall(ext)
    proc = subprocess.run([PY, str(ext / "headless.py"), str(tmp_path / "nope.png"), "--glb",
                           str(tmp_path / "x.glb")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 11
    assert proc.stderr.strip().splitlines() == [
        f"image-to-mesh: error: Input image not found: {tmp_path / 'nope.png'}"]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import image_to_mesh.config as c; "
            "print(c.runtime_dir())")
    where = subprocess.run([PY, "-c", code, str(ext.parent)], capture_output=True, text=True,
                           timeout=60)
    assert where.stdout.strip() == str(ext / "runtime")
