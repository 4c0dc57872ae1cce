"""Every bad asset is refused with ``BadAsset`` naming the key and what is wrong."""
import os

import numpy as np
import pytest

from bounded_export import BadAsset, ExportLevers, export_asset
from bounded_export.asset import inspect_asset, load_asset

from .conftest import write_npz


def refused(path, match: str, key=None):
    with pytest.raises(BadAsset, match=match) as info:
        load_asset(path)
    assert info.value.key == key
    assert info.value.hint
    return info.value


def variant(tmp_path, arrays, name="bad.npz", drop=(), **changes):
    data = {k: v for k, v in arrays.items() if k not in drop}
    data.update(changes)
    return write_npz(tmp_path / name, **data)


def test_the_small_asset_loads(small_asset):
    asset = load_asset(small_asset)
    assert asset.vertices.dtype == np.float32 and asset.faces.dtype == np.int32
    assert asset.coords.shape[1] == 3 and asset.attrs.shape[1] == 6
    assert asset.resolution == 96 and asset.voxel_size == pytest.approx(1 / 96)


def test_not_an_npz(tmp_path):
    path = tmp_path / "image.npz"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    refused(path, "not an .npz file")


def test_missing_key(tmp_path, small_arrays):
    refused(variant(tmp_path, small_arrays, drop=("attrs",)), "missing", "attrs")
    refused(variant(tmp_path, small_arrays, drop=("resolution",)), "missing", "resolution")


@pytest.mark.parametrize("key,value,match", [
    ("faces", np.zeros((4, 3), np.float32), r"must be integer \[F, 3\]"),
    ("vertices", np.zeros((4, 2), np.float32), r"must be float \[V, 3\]"),
    ("coords", np.zeros((4, 2), np.int32), r"must be integer \[N, 3\] \(x, y, z\) or \[N, 4\]"),
    ("origin", np.zeros(2, np.float32), r"must be float \[3\]"),
    ("resolution", np.float32(96), "must be an integer scalar"),
])
def test_wrong_dtype_or_shape(tmp_path, small_arrays, key, value, match):
    refused(variant(tmp_path, small_arrays, **{key: value}), match, key)


def test_nan_and_inf_vertices(tmp_path, small_arrays):
    for bad in (np.nan, np.inf):
        v = small_arrays["vertices"].copy()
        v[1234, 1] = bad
        err = refused(variant(tmp_path, small_arrays, vertices=v), "NaN or infinite", "vertices")
        assert "row 1,234" in str(err)


def test_faces_past_the_vertices(tmp_path, small_arrays):
    f = small_arrays["faces"].copy()
    f[7, 2] = len(small_arrays["vertices"])
    refused(variant(tmp_path, small_arrays, faces=f), "indexes past the", "faces")
    f[7, 2] = -1
    refused(variant(tmp_path, small_arrays, faces=f), "indexes past the", "faces")


def test_empty_mesh(tmp_path, small_arrays):
    refused(variant(tmp_path, small_arrays, faces=np.zeros((0, 3), np.int32)), "empty", "faces")


def test_coords_outside_the_grid(tmp_path, small_arrays):
    c = small_arrays["coords"].copy()
    c[5, 3] = 96
    refused(variant(tmp_path, small_arrays, coords=c), "outside the 96³ grid", "coords")


def test_attrs_outside_0_1_or_wrong_channels(tmp_path, small_arrays):
    a = small_arrays["attrs"].copy()
    a[3, 4] = 1.5
    refused(variant(tmp_path, small_arrays, attrs=a), "outside 0..1", "attrs")
    a[3, 4] = np.nan
    refused(variant(tmp_path, small_arrays, attrs=a), "outside 0..1", "attrs")
    refused(variant(tmp_path, small_arrays, attrs=small_arrays["attrs"][:, :5]),
            "has 5 channels, must have 6", "attrs")
    refused(variant(tmp_path, small_arrays, attrs=small_arrays["attrs"][:-1]),
            "one row of attributes per voxel", "attrs")


def test_coords_without_the_batch_column(tmp_path, small_arrays):
    xyz = small_arrays["coords"][:, 1:]
    asset = load_asset(variant(tmp_path, small_arrays, coords=xyz))
    np.testing.assert_array_equal(asset.coords, xyz)
    bad = xyz.copy()
    bad[9, 0] = -1
    refused(variant(tmp_path, small_arrays, coords=bad), "outside the 96³ grid", "coords")


def test_fdg_members_are_accepted(tmp_path, small_arrays):
    path = variant(tmp_path, small_arrays, fdg_coords=np.zeros((3, 4), np.int32),
                   fdg_split_weight=np.zeros(3, np.float16))
    assert load_asset(path).faces.shape == small_arrays["faces"].shape


def test_headers_are_checked_before_any_array_is_read(tmp_path, small_arrays):
    members = inspect_asset(variant(tmp_path, small_arrays))
    assert members["faces"].shape == small_arrays["faces"].shape


def test_a_30_gb_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.npz"
    with open(path, "wb") as f:
        f.truncate(30 << 30)  # sparse: no block is written, and none may be read
    out = tmp_path / "huge.glb"
    with pytest.raises(BadAsset, match=r"30\.0 GiB, larger than the export budget") as info:
        export_asset(path, out, ExportLevers(budget=2 << 30))
    assert "not read" in str(info.value)
    assert not out.exists() and os.listdir(tmp_path) == ["huge.npz"]


def test_a_budget_below_the_minimum_is_a_bad_lever_not_a_bad_asset(small_asset, tmp_path):
    """Below ``MIN_BUDGET`` the budget itself is wrong (whatever the asset): a ``ValueError``
    (``BudgetTooSmall``, the runner's ``usage``) whose hint names the minimum, not 2G."""
    from bounded_export.errors import BudgetTooSmall

    out = tmp_path / "x.glb"
    with pytest.raises(BudgetTooSmall, match="below the engine's minimum of 256.0 MiB") as info:
        export_asset(small_asset, out, ExportLevers(budget=100 << 20))
    assert not isinstance(info.value, BadAsset)
    assert info.value.hint == "Give --export-budget 256M or more."
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("key", ["vertices", "faces", "coords", "attrs"])
def test_a_damaged_member_is_refused_naming_its_key(tmp_path, small_arrays, key):
    """Bytes overwritten inside a member (the zip's CRC no longer matches): ``BadAsset`` naming
    that member, from ``load_asset`` with or without the voxels (the ``load`` step checks the
    voxels' members too), never ``zipfile.BadZipFile``."""
    from .damage import damage_member

    path = damage_member(variant(tmp_path, small_arrays), key)
    inspect_asset(path)  # the headers are intact
    for voxels in (True, False):
        with pytest.raises(BadAsset, match="damaged") as info:
            load_asset(path, voxels=voxels)
        assert info.value.key == key and "CRC" in str(info.value)


def test_a_member_cut_short_is_refused_naming_its_key(tmp_path, small_arrays):
    """A ``.npy`` header promising more rows than the member holds (a consistent zip)."""
    import zipfile

    path = tmp_path / "short.npz"
    header = {"descr": "<f4", "fortran_order": False, "shape": small_arrays["attrs"].shape}
    with zipfile.ZipFile(path, "w") as archive:
        for key, value in small_arrays.items():
            with archive.open(key + ".npy", "w") as f:
                if key != "attrs":
                    np.lib.format.write_array(f, value)
                else:
                    np.lib.format.write_array_header_1_0(f, header)
                    f.write(value[:100].astype("<f4").tobytes())
    for voxels in (True, False):
        with pytest.raises(BadAsset, match="damaged") as info:
            load_asset(path, voxels=voxels)
        assert info.value.key == "attrs"


@pytest.mark.parametrize("change,key,match", [
    ({"attrs": ("inf", 3, 1)}, "attrs", "outside 0..1"),
    ({"attrs": ("times5", None, None)}, "attrs", "outside 0..1"),
    ({"coords": (96, 5, 3)}, "coords", "outside the 96³ grid"),
])
def test_bad_voxels_are_refused_in_the_load_step(tmp_path, small_arrays, change, key, match):
    """inf or out-of-range attrs, coords off the grid: refused while the ``load`` step runs,
    before cleanup, decimation and the unwrap (they used to be found only by the bake)."""
    (name, (value, row, col)), = change.items()
    array = small_arrays[name].copy()
    if value == "times5":
        array = array * 5
    else:
        array[row, col] = np.inf if value == "inf" else value
    path = variant(tmp_path, small_arrays, **{name: array})
    events: list = []
    with pytest.raises(BadAsset, match=match) as info:
        export_asset(path, tmp_path / "x.glb", ExportLevers(decimation_target=8000,
                                                            texture_size=512),
                     emit=events.append)
    assert info.value.key == key
    assert [e["stage"] for e in events if e["event"] == "stage"] == ["load"]
    assert not (tmp_path / "x.glb").exists()


def test_fortran_order_voxels_are_checked_too(tmp_path, small_arrays):
    attrs = np.asfortranarray(small_arrays["attrs"].copy())
    attrs[17, 4] = 2.0
    path = variant(tmp_path, small_arrays, attrs=attrs)
    with pytest.raises(BadAsset, match="row 17, column 4") as info:
        load_asset(path, voxels=False)
    assert info.value.key == "attrs"
    good = variant(tmp_path, small_arrays, name="good.npz",
                   attrs=np.asfortranarray(small_arrays["attrs"]),
                   coords=np.asfortranarray(small_arrays["coords"]))
    load_asset(good, voxels=False)


def test_the_load_steps_voxel_check_holds_one_block_not_the_voxels(tmp_path):
    """``check_voxels`` streams: its peak allocation (tracemalloc, which numpy reports to) is a
    few blocks of ``STREAM_ROWS`` rows, not the members' size."""
    import tracemalloc
    import zipfile

    from bounded_export.asset import STREAM_ROWS, check_voxels

    n = 40 * STREAM_ROWS  # 2.6 M voxels: attrs 63 MB, coords 42 MB
    rng = np.random.default_rng(0)
    path = write_npz(tmp_path / "big.npz",
                     coords=rng.integers(0, 512, (n, 4), dtype=np.int32),
                     attrs=rng.random((n, 6), dtype=np.float32))
    with zipfile.ZipFile(path) as archive:
        tracemalloc.start()
        try:
            check_voxels(archive, 512)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    block = STREAM_ROWS * 6 * 4
    assert peak < 6 * block, peak  # 2.5 MB each (data, mask, compare temporaries)
    assert peak < n * 6 * 4 / 10
