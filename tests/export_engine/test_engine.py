"""The whole export on a small asset, read back by the glTF specification: geometry, the
material, the texture against the voxels, the sub-step events; cancel; no partial GLB."""
import os
import threading
import time

import numpy as np
import psutil
import pytest

from bounded_export import SUBSTEPS, ExportCancelled, ExportLevers, export_asset
from bounded_export.asset import load_asset
from bounded_export.voxels import SparseVoxels

from .glbread import read_glb, surface_samples, texel_lookup


def to_asset_frame(positions):
    """glTF's Y-up back to the asset's frame: (x, y, z) → (x, −z, y)."""
    p = np.asarray(positions, np.float64)
    return np.column_stack([p[:, 0], -p[:, 2], p[:, 1]])


def test_face_count_and_geometry(small_export, small_asset):
    from standin.sphere_asset import radius_at

    info, _events, out = small_export
    glb = read_glb(out)
    assert abs(len(glb["faces"]) - 8000) <= 0.02 * 8000
    assert info["faces"] == len(glb["faces"]) and info["faces_in"] == 20480
    points, _uv = surface_samples(to_asset_frame(glb["positions"]), glb["faces"], glb["uv"],
                                  20000)
    r = np.linalg.norm(points, axis=1)
    error = np.abs(r - radius_at(points / r[:, None])) * load_asset(small_asset).resolution
    assert error.mean() < 0.5 and np.percentile(error, 99) < 2.0  # voxels


def test_y_up_and_outward_normals(small_export):
    glb = read_glb(small_export[2])
    p, n = glb["positions"].astype(np.float64), glb["normals"].astype(np.float64)
    assert (np.einsum("ij,ij->i", p, n) > 0).mean() > 0.99  # a sphere's normals point out
    # winding agrees with the normals (a rotation, not a mirror)
    tri = p[glb["faces"]]
    face_n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    assert (np.einsum("ij,ij->i", face_n, tri.mean(axis=1)) > 0).mean() > 0.99


def test_y_up_moves_the_asset_z_to_gltf_y(tmp_path, small_arrays):
    from .conftest import write_npz

    arrays = dict(small_arrays)
    arrays["vertices"] = arrays["vertices"] * np.array([0.3, 0.3, 1.0], np.float32)
    # voxels filling the squashed mesh's box, so they still meet its surface (coverage.py)
    res, size = int(arrays["resolution"]), float(arrays["voxel_size"])
    low = np.floor((arrays["vertices"].min(axis=0) + 0.5) / size).astype(int) - 1
    high = np.ceil((arrays["vertices"].max(axis=0) + 0.5) / size).astype(int) + 1
    axes = [np.arange(max(lo, 0), min(hi, res)) for lo, hi in zip(low, high, strict=True)]
    arrays["coords"] = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3) \
        .astype(np.int32)
    arrays["attrs"] = np.full((len(arrays["coords"]), 6), 0.5, np.float32)
    path = write_npz(tmp_path / "tall.npz", **arrays)
    export_asset(path, tmp_path / "tall.glb", ExportLevers(decimation_target=4000,
                                                           texture_size=512))
    extent = np.ptp(read_glb(tmp_path / "tall.glb")["positions"], axis=0)
    assert extent[1] > 2.5 * extent[0] and extent[1] > 2.5 * extent[2]


def test_material_is_the_ports(small_export):
    glb = read_glb(small_export[2])
    material = glb["material"]
    pbr = material["pbrMetallicRoughness"]
    assert material["alphaMode"] == "OPAQUE" and material["doubleSided"] is True
    assert pbr["metallicFactor"] == 1.0 and pbr["roughnessFactor"] == 1.0
    assert glb["base"].shape == (512, 512, 4) and glb["metal_rough"].shape[2] == 3
    assert (glb["metal_rough"][..., 0] == 0).all()


def test_texture_reads_back_the_voxels(small_export, small_asset):
    """Base colour, roughness (G) and metallic (B) at surface points against the voxels'
    trilinear value at the same points."""
    glb = read_glb(small_export[2])
    asset = load_asset(small_asset)
    voxels = SparseVoxels(asset.coords, asset.attrs, asset.origin, asset.voxel_size,
                          asset.resolution)
    points, uv = surface_samples(to_asset_frame(glb["positions"]), glb["faces"], glb["uv"],
                                 20000, seed=5)
    want, found = voxels.sample(points)
    assert found.mean() > 0.999
    colour = np.abs(texel_lookup(glb["base"], uv)[:, :3] - want[:, :3] * 255)[found].max(axis=1)
    assert colour.mean() <= 3 and np.percentile(colour, 99) <= 16
    mr = texel_lookup(glb["metal_rough"], uv)
    assert np.abs(mr[:, 1] - want[:, 4] * 255)[found].mean() <= 3   # G = roughness
    assert np.abs(mr[:, 2] - want[:, 3] * 255)[found].mean() <= 3   # B = metallic


def test_sub_step_events(small_export):
    info, events, _out = small_export
    stages = [e for e in events if e["event"] == "stage"]
    assert [e["stage"] for e in stages] == list(SUBSTEPS)
    assert all(e["parent"] == "export" and e["count"] == len(SUBSTEPS) for e in stages)
    assert [e["index"] for e in stages] == list(range(len(SUBSTEPS)))
    fractions = [e["fraction"] for e in events if e["event"] == "progress"]
    assert fractions and fractions == sorted(fractions) and all(0 <= f <= 1 for f in fractions)
    assert set(info["step_seconds"]) == set(SUBSTEPS)


def test_alpha_below_250_makes_blend(tmp_path, small_arrays):
    from .conftest import write_npz

    arrays = dict(small_arrays)
    arrays["attrs"] = arrays["attrs"].copy()
    arrays["attrs"][:, 5] = 0.5
    path = write_npz(tmp_path / "glass.npz", **arrays)
    info = export_asset(path, tmp_path / "glass.glb",
                        ExportLevers(decimation_target=4000, texture_size=512))
    glb = read_glb(tmp_path / "glass.glb")
    assert info["alpha_mode"] == "BLEND" and glb["material"]["alphaMode"] == "BLEND"
    assert abs(int(np.median(glb["base"][..., 3])) - 128) <= 1


def test_an_existing_output_is_never_replaced(small_asset, tmp_path):
    out = tmp_path / "mine.glb"
    out.write_bytes(b"keep me")
    with pytest.raises(FileExistsError):
        export_asset(small_asset, out)
    assert out.read_bytes() == b"keep me"


def test_bad_levers(small_asset, tmp_path):
    with pytest.raises(ValueError, match="texture size 300"):
        export_asset(small_asset, tmp_path / "x.glb", ExportLevers(texture_size=300))
    with pytest.raises(ValueError, match="decimation target 0"):
        export_asset(small_asset, tmp_path / "x.glb", ExportLevers(decimation_target=0))


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("step,subdivisions,target", [("decimate", 7, 60_000),
                                                      ("uv_unwrap", 7, 60_000),
                                                      ("bake", 5, 8_000)])
def test_cancel_within_two_seconds_inside_a_step(step, subdivisions, target, tmp_path,
                                                 small_asset, mid_asset):
    """The flag is set 0.3 s into ``step`` (each lasts several seconds here); the export must
    stop within 2 s, write nothing and leave no process (the children are killed)."""
    asset = mid_asset if subdivisions == 7 else small_asset
    before = _children()
    flag, seen = threading.Event(), {}

    def emit(event):
        if event["event"] == "stage" and event["stage"] == step:
            seen["began"] = time.monotonic()
            threading.Timer(0.3, flag.set).start()

    out = tmp_path / "out.glb"
    with pytest.raises(ExportCancelled) as info:
        export_asset(asset, out, ExportLevers(decimation_target=target, texture_size=4096),
                     emit=emit, cancel=flag)
    took = time.monotonic() - seen["began"] - 0.3
    assert info.value.step == step and took < 2.0, took
    assert os.listdir(tmp_path) == []
    assert _children() <= before
