"""The test-asset generator (standin/asset): the port's mesh-checkpoint format, a closed
surface inside the grid, a voxel shell that holds every trilinear neighbourhood of the surface,
colours from the picture, counts that scale with the grid, and a file the stand-in port's own
``load_mesh_checkpoint`` reads. Small grids only (64 and 128)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trimesh

from standin import PORT_DIR
from standin.asset import ASSET_KEYS, build_asset, write_asset
from standin.asset.body import body_field
from standin.asset.surface import march

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "tests" / "data" / "images"
GOBLIN = IMAGES / "typical_humanoid_goblin.png"


@pytest.fixture(scope="module")
def small():
    return {r: build_asset(GOBLIN, r) for r in (64, 128)}


def test_keys_dtypes_shapes(small):
    a = small[64].arrays
    assert tuple(a) == ASSET_KEYS
    v = a["vertices"]
    assert v.dtype == np.float32 and v.ndim == 2 and v.shape[1] == 3
    assert a["faces"].dtype == np.int32 and a["faces"].shape[1] == 3
    assert a["coords"].dtype == np.int32 and a["coords"].shape[1] == 3
    assert a["attrs"].dtype == np.float32 and a["attrs"].shape == (len(a["coords"]), 6)
    assert a["origin"].dtype == np.float32 and a["origin"].tolist() == [-0.5] * 3
    assert a["voxel_size"].dtype == np.float32 and a["voxel_size"] == np.float32(1 / 64)
    assert a["resolution"].dtype == np.int32 and int(a["resolution"]) == 64


def test_values_within_the_grid(small):
    for res, asset in small.items():
        a = asset.arrays
        assert a["faces"].min() >= 0 and a["faces"].max() < len(a["vertices"])
        assert np.isfinite(a["vertices"]).all()
        assert a["vertices"].min() > -0.5 and a["vertices"].max() < 0.5
        assert a["coords"].min() >= 0 and a["coords"].max() < res
        assert len(np.unique(a["coords"], axis=0)) == len(a["coords"])
        assert a["attrs"].min() >= 0 and a["attrs"].max() <= 1


def test_closed_outward_upright_surface(small):
    a = small[128].arrays
    mesh = trimesh.Trimesh(a["vertices"], a["faces"], process=False)
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.volume > 0  # outward normals
    extent = mesh.extents
    assert extent[2] > extent[1] and extent[2] > 0.8  # taller (z) than deep (y); fills the grid


def test_slabs_stitch_to_the_one_call_surface():
    from runner.backends.builtin.matte import compute_matte
    from runner.images.reading import load_image

    image, info = load_image(GOBLIN)
    field = body_field(compute_matte(image, had_alpha=info.had_alpha), 64, rgba=np.asarray(image))
    whole_v, whole_f = march(field, slab=10_000)
    v, f = march(field, slab=3)
    assert len(f) == len(whole_f) and len(v) == len(whole_v)
    assert trimesh.Trimesh(v, f, process=False).is_watertight
    np.testing.assert_allclose(np.sort(v, axis=0), np.sort(whole_v, axis=0), atol=1e-5)


def test_shell_holds_every_trilinear_neighbourhood(small):
    a = small[64].arrays
    res = int(a["resolution"])
    def key(c):
        return (c[:, 0].astype(np.int64) * res + c[:, 1]) * res + c[:, 2]
    voxels = np.sort(key(a["coords"]))
    corner = np.floor((a["vertices"] + 0.5) * res - 0.5).astype(np.int64)
    for offset in np.ndindex(2, 2, 2):
        k = key(corner + np.array(offset))
        pos = np.minimum(np.searchsorted(voxels, k), len(voxels) - 1)
        assert (voxels[pos] == k).all(), f"a surface point misses its neighbour {offset}"


def test_colours_come_from_the_picture(small):
    from PIL import Image
    a = small[128].arrays
    c, rgb = a["coords"], a["attrs"][:, :3]
    front = c[:, 1] < 64
    picture = np.asarray(Image.open(GOBLIN).convert("RGBA")).astype(np.float32) / 255
    opaque = picture[..., 3] > 0.99
    # the front's mean colour is the character's; the back (a blurred copy) varies less
    assert np.abs(rgb[front].mean(0) - picture[opaque][:, :3].mean(0)).max() < 0.08
    assert rgb[~front].std(0).mean() < rgb[front].std(0).mean()
    assert 0 < a["attrs"][:, 3].mean() < 0.3 and 0.3 < a["attrs"][:, 4].mean() < 0.95
    assert (a["attrs"][:, 5] == 1).all()


def test_counts_scale_with_resolution(small):
    f64, f128 = small[64].facts, small[128].facts
    assert 3.0 < f128["faces"] / f64["faces"] < 5.0
    assert 3.0 < f128["voxels"] / f64["voxels"] < 5.0
    assert f128["voxels"] > f128["faces"] / 2  # the shell with its band


def test_layouts_and_order():
    sorted_ = build_asset(GOBLIN, 64, shuffle=False).arrays["coords"]
    batch = build_asset(GOBLIN, 64, coords_layout="bxyz").arrays["coords"]
    assert batch.shape == (len(sorted_), 4) and (batch[:, 0] == 0).all()
    assert not np.array_equal(batch[:, 1:], sorted_)
    assert np.array_equal(np.unique(batch[:, 1:], axis=0), np.unique(sorted_, axis=0))
    with pytest.raises(ValueError, match="coords_layout"):
        build_asset(GOBLIN, 64, coords_layout="zyx")
    with pytest.raises(ValueError, match="resolution"):
        build_asset(GOBLIN, 8)


def test_loads_with_the_stand_in_ports_loader(small, tmp_path):
    path = tmp_path / "asset.npz"
    size = write_asset(path, small[64])
    assert size == path.stat().st_size and not list(tmp_path.glob(".*part*"))
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import generate_mps as g; "
            "g.load_runtime_deps(); "
            "m, v, f, r = g.load_mesh_checkpoint(sys.argv[2]); "
            "print(json.dumps([list(v.shape), list(f.shape), list(m.coords.shape), "
            "list(m.attrs.shape), m.origin.tolist(), m.voxel_size, r]))")
    out = subprocess.run([sys.executable, "-c", code, str(PORT_DIR), str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    v, f, c, at, origin, vs, r = json.loads(out.stdout.strip().splitlines()[-1])
    a = small[64].arrays
    assert v == list(a["vertices"].shape) and f == list(a["faces"].shape)
    assert c == list(a["coords"].shape) and at == list(a["attrs"].shape)
    assert origin == [-0.5] * 3 and vs == pytest.approx(1 / 64) and r == 64


def test_cli(tmp_path):
    out = tmp_path / "a.npz"
    cmd = [sys.executable, "-m", "standin.asset", str(GOBLIN), "-o", str(out), "--resolution", "32"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    facts = json.loads(run.stdout)
    assert facts["faces"] == len(np.load(out)["faces"]) and facts["peak_rss"] > 0
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 2 and "--overwrite" in again.stderr
    bad = tmp_path / "not.png"
    bad.write_text("no picture")
    run = subprocess.run([sys.executable, "-m", "standin.asset", str(bad), "-o",
                          str(tmp_path / "b.npz")], cwd=REPO, capture_output=True, text=True,
                         check=False,
                         timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "error" in run.stderr
    assert not (tmp_path / "b.npz").exists()


def test_reduce_keeps_the_voxels_and_frame(small):
    from standin.asset.reduce import reduce_faces
    a = small[128].arrays
    r = reduce_faces(a, len(a["faces"]) // 4)
    assert abs(len(r["faces"]) - len(a["faces"]) // 4) <= 0.01 * len(a["faces"]) // 4 + 2
    assert r["vertices"].dtype == np.float32 and r["faces"].dtype == np.int32
    assert r["coords"] is a["coords"] and r["attrs"] is a["attrs"]
    assert r["faces"].max() < len(r["vertices"])
    with pytest.raises(ValueError, match="faces must be"):
        reduce_faces(a, len(a["faces"]))
