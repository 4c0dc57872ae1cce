"""An asset whose voxels miss its mesh is never exported as a success: boxes that do not meet
are ``BadAsset`` in the ``load`` step (before any texture work), a bake where few used texels
found a voxel is ``BadAsset`` before anything is written, a partly covered one a ``warning``
naming the share; the result carries the share (``voxel_coverage``)."""
import os

import numpy as np
import pytest

from bounded_export import BadAsset, ExportLevers, export_asset

from .conftest import write_npz

LEVERS = ExportLevers(decimation_target=8000, texture_size=512)


def _export(tmp_path, arrays, **changes):
    path = write_npz(tmp_path / "asset.npz", **{**arrays, **changes})
    events: list = []
    out = tmp_path / "out.glb"
    return path, out, events, lambda: export_asset(path, out, LEVERS, emit=events.append)


def _steps(events):
    return [e["stage"] for e in events if e["event"] == "stage"]


@pytest.mark.parametrize("name,change", [
    ("far origin", lambda a: {"origin": a["origin"] + np.float32(100.0)}),
    ("huge vertices", lambda a: {"vertices": a["vertices"] * np.float32(1000.0)}),
    ("another grid", lambda a: {"voxel_size": np.float32(a["voxel_size"] / 16)}),
])
def test_voxels_whose_box_misses_the_mesh_are_refused_in_the_load_step(
        tmp_path, small_arrays, name, change):
    _path, out, events, run = _export(tmp_path, small_arrays, **change(small_arrays))
    with pytest.raises(BadAsset, match="do not line up with its mesh") as info:
        run()
    message = str(info.value)
    for fact in ("the mesh spans", "the voxels span", "origin", "voxel_size", "resolution 96"):
        assert fact in message, message
    assert _steps(events) == ["load"]  # nothing after the load step: no texture work
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["asset.npz"]


def test_a_shifted_origin_is_refused_after_the_bake_naming_the_share(tmp_path, small_arrays):
    """Five voxels off: the boxes still meet, but the shell of voxels crosses the surface only
    along a band, so most used texels find no voxel: ``BadAsset`` with the share, no GLB."""
    size = float(small_arrays["voxel_size"])
    shifted = small_arrays["origin"] + np.float32(5 * size)
    _path, out, events, run = _export(tmp_path, small_arrays, origin=shifted)
    with pytest.raises(BadAsset, match=r"only [\d,]+ of the [\d,]+ texels .* found a voxel") \
            as info:
        run()
    share = float(str(info.value).split("(")[1].split("%")[0]) / 100
    assert 0 <= share < 0.5 and "the voxels span" in str(info.value)
    assert _steps(events)[-1] == "bake" and not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["asset.npz"]


def test_a_partly_covered_asset_is_exported_with_a_warning_naming_the_share(tmp_path,
                                                                              small_arrays):
    """The voxels of a cap of the sphere removed (x > 0.25: about a sixth of its surface): the
    GLB is written, the ``warning`` names the share, the result carries it."""
    keep = -0.5 + (small_arrays["coords"][:, -3] + 0.5) * float(small_arrays["voxel_size"]) \
        <= 0.25
    _path, out, events, run = _export(tmp_path, small_arrays,
                                      coords=small_arrays["coords"][keep],
                                      attrs=small_arrays["attrs"][keep])
    info = run()
    share = info["voxel_coverage"]
    assert 0.5 <= share < 0.99 and out.is_file()
    assert info["orphan_texels"] == info["used_texels"] - round(share * info["used_texels"])
    warnings = [e for e in events if e["event"] == "warning"]
    assert len(warnings) == 1, warnings
    assert f"{share:.2%}" in warnings[0]["message"] and warnings[0]["coverage"] == share
    assert warnings[0]["source"] and warnings[0]["differs"]


def test_a_sound_asset_reports_its_coverage_without_a_warning(small_export):
    info, events, _out = small_export
    assert info["voxel_coverage"] >= 0.999 and info["used_texels"] > 10_000
    assert not [e for e in events if e["event"] == "warning"]
