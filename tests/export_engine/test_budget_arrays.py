"""The plan counts every array the export reads, from the ``.npy`` headers, before reading:
vertices no face uses cannot blow the budget (refused), a mesh stored wider than the engine's
float32 / int32 counts as stored, and a budget refusal says what it is ("Asset too large for
the export budget"), not "Bad asset". A mesh with no face to keep is a clear ``BadAsset``,
never a traceback from deep inside a step.

The big assets are headers only: each ``.npy`` member promises its shape and holds a few
bytes, so a test allocates nothing and any read of a big member's data would fail as a damaged
member ("cut short") — a refusal that names the budget or the counts proves nothing was read.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from bounded_export import BadAsset, ExportLevers, export_asset
from bounded_export import budget as budgeting
from bounded_export.asset import inspect_asset

from .conftest import write_npz


def headers_only(path, shapes: dict, small: dict):
    """An ``.npz`` whose members in ``shapes`` (key → (descr, shape)) are a ``.npy`` header and
    16 bytes of data, and whose members in ``small`` are written whole."""
    with zipfile.ZipFile(path, "w") as archive:
        for key, (descr, shape) in shapes.items():
            with archive.open(key + ".npy", "w") as f:
                np.lib.format.write_array_header_1_0(
                    f, {"descr": descr, "fortran_order": False, "shape": shape})
                f.write(b"\0" * 16)
        for key, value in small.items():
            with archive.open(key + ".npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(value))
    return path


GRID = {"origin": np.full(3, -0.5, np.float32), "voxel_size": np.float32(1 / 1024),
        "resolution": np.int32(1024)}


def _unused_vertices_asset(tmp_path):
    """200 M float32 vertices (2.2 GiB), 4 faces, 1,000 voxels: a few KB on disk."""
    return headers_only(tmp_path / "unused.npz",
                        {"vertices": ("<f4", (200_000_000, 3))},
                        {"faces": np.array([[0, 1, 2], [0, 2, 3], [0, 3, 1], [1, 3, 2]],
                                           np.int32),
                         "coords": np.zeros((1000, 3), np.int32),
                         "attrs": np.zeros((1000, 6), np.float32), **GRID})


def test_200_million_unused_vertices_are_refused_before_reading(tmp_path):
    path = _unused_vertices_asset(tmp_path)
    assert path.stat().st_size < 100_000
    out = tmp_path / "out.glb"
    with pytest.raises(BadAsset, match="200,000,000 vertices, but its 4 faces use at most 12") \
            as info:
        export_asset(path, out, ExportLevers())
    assert info.value.key == "vertices" and "it was not read" in str(info.value)
    assert "damaged" not in str(info.value)  # refused from the header: the data was not read
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["unused.npz"]


def test_runner_export_refuses_them_right_after_hello(tmp_path, repo_root):
    """The same through ``python -m runner export``: ``bad_asset`` (18) right after ``hello``,
    one line, no traceback, nothing written (it reached 15.8 GiB in cleanup and ended with
    an ``argmax of an empty sequence`` traceback, exit 40)."""
    path = _unused_vertices_asset(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "runner", "export", str(path), "-o",
                           str(tmp_path / "out.glb")], capture_output=True, text=True,
                          timeout=120, cwd=repo_root)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 18 and [e["event"] for e in events] == ["hello", "error"]
    assert events[-1]["kind"] == "bad_asset" and events[-1]["details"] == {"key": "vertices"}
    assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["unused.npz"]


def _wide_mesh_asset(tmp_path):
    """10 M int64 faces and 30 M float64 vertices (960 MB as stored, 1.44 GB with the engine's
    float32 / int32 copies): counted by faces alone (18 B a face) the plan fit 3 GiB."""
    return headers_only(tmp_path / "wide.npz",
                        {"vertices": ("<f8", (30_000_000, 3)),
                         "faces": ("<i8", (10_000_000, 3))},
                        {"coords": np.zeros((1000, 3), np.int32),
                         "attrs": np.zeros((1000, 6), np.float32), **GRID})


def test_the_plan_counts_the_mesh_as_stored_from_its_headers(tmp_path):
    path = _wide_mesh_asset(tmp_path)
    sizes = budgeting.asset_sizes(inspect_asset(path))
    assert sizes["vertices"] == 30_000_000 and sizes["faces"] == 10_000_000
    assert sizes["mesh_bytes"] == 30_000_000 * (24 + 12) + 10_000_000 * (24 + 12)
    common = {"target": 1_000_000, "texture": 2048, "file_bytes": path.stat().st_size}
    budgeting.plan(faces=10_000_000, voxels=1000, **common)  # faces alone: it fit
    with pytest.raises(BadAsset, match="its cleanup step needs about"):
        budgeting.plan(**sizes, **common)


def test_a_budget_refusal_is_titled_asset_too_large_and_names_the_budget(tmp_path, repo_root):
    path = _wide_mesh_asset(tmp_path)
    out = tmp_path / "out.glb"
    with pytest.raises(BadAsset) as info:
        export_asset(path, out, ExportLevers())
    err = info.value
    assert str(err).startswith("Asset too large for the export budget: the asset "
                               "(10,000,000 faces, 30,000,000 vertices, 1,000 voxels)")
    assert "Bad asset" not in str(err) and "it was not read" in str(err)
    assert err.kind == "bad_asset" and err.details == {"budget": 3 << 30}
    assert err.hint.startswith("Give --export-budget ")
    assert not out.exists()
    proc = subprocess.run([sys.executable, "-m", "runner", "export", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=repo_root)
    last = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 18 and last["kind"] == "bad_asset", proc.stderr[-2000:]
    assert last["message"].startswith("Asset too large for the export budget: ")
    assert last["details"] == {"budget": 3 << 30} and "Traceback" not in proc.stderr


def test_a_mesh_without_an_area_is_a_bad_asset_not_a_traceback(tmp_path, small_arrays,
                                                                  repo_root):
    """Every face degenerate (all vertices at one point): cleanup would keep no face and fail
    on an empty selection deep inside (``argmax of an empty sequence``, exit 40); the load
    step refuses it naming ``faces``, and ``runner export`` says ``bad_asset``."""
    flat = {**small_arrays, "vertices": np.zeros_like(small_arrays["vertices"])}
    path = write_npz(tmp_path / "flat.npz", **flat)
    with pytest.raises(BadAsset, match="none of the 20,480 faces has an area") as info:
        export_asset(path, tmp_path / "flat.glb", ExportLevers(texture_size=512))
    assert info.value.key == "faces"
    proc = subprocess.run([sys.executable, "-m", "runner", "export", str(path), "-o",
                           str(tmp_path / "flat.glb")], capture_output=True, text=True,
                          timeout=120, cwd=repo_root)
    last = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 18 and last["kind"] == "bad_asset", proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_an_asset_without_voxels_is_refused_from_its_headers(tmp_path, small_arrays):
    path = write_npz(tmp_path / "novoxels.npz", **{**small_arrays,
                                                   "coords": np.zeros((0, 4), np.int32),
                                                   "attrs": np.zeros((0, 6), np.float32)})
    with pytest.raises(BadAsset, match="holds no voxels") as info:
        inspect_asset(path)
    assert info.value.key == "coords"


def test_an_empty_selection_in_cleanup_is_a_bad_asset_from_its_child_process(tmp_path,
                                                                             small_arrays):
    """Were the load step's check ever passed by a mesh cleanup empties, cleanup says so:
    ``BadAsset`` in its child process (``stoppable``), raised again in the export process
    with the same key and text — not the child's traceback as a ``RuntimeError``."""
    from bounded_export.stoppable import call

    faces = small_arrays["faces"].copy()
    faces[:, 1] = faces[:, 0]  # every face repeats a corner
    path = write_npz(tmp_path / "repeats.npz", **{**small_arrays, "faces": faces})
    with pytest.raises(BadAsset, match="no face is left after the cleanup") as info:
        call("bounded_export.cleanup:clean_file", None,
             {"asset": str(path), "out": str(tmp_path / "cleaned.npz")}, tmp_path, None)
    assert info.value.key == "faces" and info.value.hint
