"""An output GLB that is the input is refused before anything is written, even with
``--overwrite``: the same path, a hard link to it, or a symbolic link to it, for a single run
and for ``runner export``."""
from __future__ import annotations

import hashlib
import os
import shutil


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_output_that_is_the_input_image_is_refused(rt, character, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pic = out / "pic.glb"  # a picture under a .glb name: Pillow reads it by its contents
    shutil.copy(character, pic)
    os.link(pic, out / "hard.glb")
    os.symlink(pic, out / "soft.glb")
    before = _digest(pic)
    for output in (pic, out / "hard.glb", out / "soft.glb", out / "." / "pic.glb"):
        fin = rt.run([pic, "-o", output, "--overwrite"])
        assert fin.returncode == 2, (output, fin.stderr[-2000:])
        assert fin.kinds() == ["hello", "error"] and fin.last()["kind"] == "usage", output
        assert "is the input image; it was left untouched" in fin.last()["message"]
        assert "-o" in fin.last()["hint"]
    assert _digest(pic) == before
    assert sorted(os.listdir(out)) == ["hard.glb", "pic.glb", "soft.glb"]  # no trace either


def test_an_export_output_that_is_the_input_asset_is_refused(rt, tmp_path):
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "s.npz", subdivisions=3, resolution=32)
    linked = tmp_path / "s.glb"
    os.link(asset, linked)
    before = _digest(asset)
    fin = rt.run(["export", asset, "-o", linked, "--overwrite"])
    assert fin.returncode == 2 and fin.last()["kind"] == "usage", fin.stderr[-2000:]
    assert "is the input asset; it was left untouched" in fin.last()["message"]
    assert _digest(asset) == before
    assert sorted(os.listdir(tmp_path)) == ["s.glb", "s.npz"]
