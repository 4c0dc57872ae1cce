"""The decimation in pieces (``bounded_export/pieces.py``): the pieces' borders are kept
exactly (pyfqmr's ``preserve_border``), so the stitched mesh has no crack — a closed input
stays closed and an open one keeps its border edges —, the final pass reaches the target, the
budget takes the pieces only when one call does not fit and says so, and a cancel stops a
piece's child process."""
from __future__ import annotations

import threading
import time

import numpy as np
import psutil
import pytest

from bounded_export import BadAsset, ExportCancelled, budget
from bounded_export.pieces import decimate_in_pieces, decimate_locked, split, stitch
from bounded_export.steps import Steps
from standin.sphere_asset import sphere_mesh


def border_edges(faces: np.ndarray) -> np.ndarray:
    """Edges (sorted vertex pairs) used by exactly one face."""
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    unique, count = np.unique(e, axis=0, return_counts=True)
    return unique[count == 1]


def border_coords(vertices: np.ndarray, faces: np.ndarray) -> set:
    """The border edges as pairs of exact coordinates (independent of vertex numbering)."""
    return {tuple(sorted((tuple(vertices[a].tolist()), tuple(vertices[b].tolist()))))
            for a, b in border_edges(faces)}


def open_sphere(subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    """The bumpy sphere with a cap cut off (an open border) and compacted."""
    vertices, faces = sphere_mesh(subdivisions)
    keep = faces[vertices[faces].mean(axis=1)[:, 2] < 0.25]
    used, inverse = np.unique(keep, return_inverse=True)
    return vertices[used], inverse.reshape(keep.shape).astype(np.int32)


@pytest.mark.parametrize("closed", [True, False])
def test_pieces_stitch_without_cracks(closed):
    vertices, faces = sphere_mesh(5) if closed else open_sphere(5)
    before = border_coords(vertices, faces)
    assert (len(before) == 0) == closed
    parts = split(vertices, faces, 3)
    assert sum(len(f) for _, f in parts) == len(faces)
    assert all(len(border_edges(f)) > 0 for _, f in parts)  # each piece is cut open
    decimated = [decimate_locked(v, f, len(f) // 4) for v, f in parts]
    assert sum(len(f) for _, f in decimated) < len(faces) / 3
    for (v0, f0), (v1, f1) in zip(parts, decimated, strict=True):
        assert border_coords(v0, f0) == border_coords(v1, f1)  # every border edge kept exactly
    v, f = stitch(decimated)
    assert border_coords(v, f) == before  # no crack: closed stays closed, open keeps its border


def _mesh_file(path, vertices, faces):
    np.savez(path, vertices=vertices, faces=faces)
    return path


def test_decimate_in_pieces_reaches_the_target_and_reports_the_pieces(tmp_path):
    vertices, faces = sphere_mesh(6)  # 81,920 faces
    events: list[dict] = []
    steps = Steps(events.append)
    steps.begin("decimate", method="pieces", pieces=4)
    out = tmp_path / "out.npz"
    done = decimate_in_pieces(_mesh_file(tmp_path / "in.npz", vertices, faces), out, 8000, 4,
                              tmp_path, steps)
    assert done["pieces"] == 4 and sum(done["piece_faces"]) == len(faces)
    assert done["stitched"] > 8000
    with np.load(out) as data:
        f = data["faces"]
    assert abs(len(f) - 8000) <= 0.02 * 8000 and done["faces"] == len(f)
    assert len(border_edges(f)) == 0  # watertight, as the input
    assert events[0]["event"] == "stage" and events[0]["method"] == "pieces"
    progress = [e for e in events if e["event"] == "progress"]
    assert progress and all(e["pieces"] == 4 for e in progress)
    assert [e["piece"] for e in progress] == sorted(e["piece"] for e in progress)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "out.npz"]


def test_a_closed_input_decimated_in_pieces_stays_watertight(tmp_path):
    """The bumpy sphere of 327,680 faces in 4 pieces to 40,000: the final fast-simplification
    pass over the stitched mesh (watertight) folded one valence-3 vertex into a two-face
    pillow (an edge of 4 faces, Euler number 3) before its twin faces were dropped — as on
    the 5.24 M-face sphere (3 pillows at 500,000). The result is as closed as the input, same
    Euler number, within 2 % of the target."""
    import trimesh

    vertices, faces = sphere_mesh(7)
    closed = trimesh.Trimesh(vertices, faces, process=False)
    assert closed.is_watertight
    steps = Steps(lambda _event: None)
    steps.begin("decimate", method="pieces", pieces=4)
    out = tmp_path / "out.npz"
    done = decimate_in_pieces(_mesh_file(tmp_path / "in.npz", vertices, faces), out, 40_000,
                              4, tmp_path, steps)
    with np.load(out) as data:
        mesh = trimesh.Trimesh(data["vertices"], data["faces"], process=False)
    assert abs(len(mesh.faces) - 40_000) <= 0.02 * 40_000 and done["faces"] == len(mesh.faces)
    faces_out = len(mesh.faces)
    mesh.merge_vertices()
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.euler_number == closed.euler_number == 2
    assert done["twins"] == 40_000 - faces_out  # each pillow dropped is reported


def test_a_cancel_stops_a_piece_within_2_s(tmp_path):
    vertices, faces = sphere_mesh(8)  # 1.3 M faces: each piece's call takes seconds
    flag = threading.Event()
    set_at: list[float] = []

    def cancel():
        set_at.append(time.monotonic())
        flag.set()

    def emit(event):
        if event.get("piece") == 1 and not set_at:
            threading.Timer(1.0, cancel).start()  # while the first piece decimates

    steps = Steps(emit, flag)
    steps.begin("decimate", method="pieces", pieces=2)
    inp = _mesh_file(tmp_path / "in.npz", vertices, faces)
    del vertices, faces
    with pytest.raises(ExportCancelled):
        decimate_in_pieces(inp, tmp_path / "out.npz", 20_000, 2, tmp_path, steps)
    assert set_at and time.monotonic() - set_at[0] < 2.0
    assert psutil.Process().children(recursive=True) == []  # the piece's child was reaped
    assert not (tmp_path / "out.npz").exists()


def test_the_budget_takes_pieces_only_when_one_call_does_not_fit():
    full = {"faces": 7_902_018, "voxels": 10_103_323, "target": 1_000_000, "texture": 2048,
            "file_bytes": 506 << 20}
    default = budget.plan(**full)
    assert default.decimate_pieces == 0  # the default budget keeps the measured one call
    small = budget.plan(budget=2 << 30, **full)
    assert small.decimate_pieces >= 2 and small.peak <= 2 << 30
    assert small.peaks["decimate"] < default.peaks["decimate"]
    pieces, peak = budget.pieced_decimation(full["faces"], full["target"], 2 << 30)
    assert (pieces, peak) == (small.decimate_pieces, small.peaks["decimate"])


# -- through `python -m runner export`, a budget too small for one call ---------------------
TARGET = 20_000
RESOLUTION = 96


def smallest_pieced(voxels: int) -> tuple[int, int, int]:
    """(subdivisions, budget bytes, pieces): the smallest bumpy sphere (``sphere_mesh``:
    20·4^s faces) for which some valid budget takes the decimation in pieces, and the smallest
    such budget (16 MiB steps up from ``MIN_BUDGET``) — from budget.py's own figures, so the
    test follows them when they are re-measured. Below that budget the asset does not fit at
    all; at it, every step fits and one decimation call does not."""
    for subdivisions in range(5, 10):
        faces = 20 * 4 ** subdivisions
        for size in range(budget.MIN_BUDGET, budget.DEFAULT_BUDGET, 16 << 20):
            try:
                plan = budget.plan(faces=faces, voxels=voxels, target=TARGET, texture=512,
                                   file_bytes=40 * faces, budget=size)  # the file: ~20 B a face
            except BadAsset:
                continue
            if plan.decimate_pieces:
                return subdivisions, size, plan.decimate_pieces
            break  # one call fits at the first budget that fits: no budget needs pieces
    raise AssertionError("no bumpy sphere up to 5 M faces needs the decimation in pieces")


@pytest.fixture(scope="module")
def pieced(tmp_path_factory):
    """(asset path, budget as ``--export-budget`` text, pieces) for the runner export tests."""
    from standin.sphere_asset import make_sphere_asset, shell_voxels

    subdivisions, size, pieces = smallest_pieced(len(shell_voxels(RESOLUTION)))
    asset = make_sphere_asset(tmp_path_factory.mktemp("pieces") / "sphere.npz",
                              subdivisions=subdivisions, resolution=RESOLUTION)
    return asset, f"{size >> 20}M", pieces


def _runner(args, cwd, stderr=None):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "runner", "export", *map(str, args)],
                            stdout=subprocess.PIPE, text=True, cwd=cwd,
                            stderr=subprocess.DEVNULL if stderr is None else stderr)


def test_the_plan_of_the_test_budget_takes_pieces(pieced):
    """The asset written (its real counts and size, read as the engine reads them) takes the
    pieces at the test budget and one call at the default budget."""
    from bounded_export.asset import inspect_asset
    from meshfacts.units import parse_size

    asset, size, pieces = pieced
    members = inspect_asset(asset)
    common = {"faces": members["faces"].shape[0], "voxels": members["coords"].shape[0],
              "target": TARGET, "texture": 512, "file_bytes": asset.stat().st_size}
    assert budget.plan(**common).decimate_pieces == 0
    small = budget.plan(budget=parse_size(size), **common)
    assert small.decimate_pieces == pieces >= 2 and small.peak <= parse_size(size)
    with pytest.raises(BadAsset):  # the smallest budget: 16 MiB less does not fit
        budget.plan(budget=parse_size(size) - (16 << 20), **common)


def test_runner_export_decimates_in_pieces_when_the_budget_is_small(pieced, tmp_path,
                                                                    repo_root):
    """The method is visible (the decimate stage's ``method`` and ``pieces``, ``progress``
    with ``pieces``, the result's ``decimation``); the GLB is as closed as the sphere (no
    crack at the pieces' seams) and within 2 % of the target; the success line says it
    decimated in pieces."""
    import json
    import subprocess

    import trimesh

    asset, size, pieces = pieced
    out = tmp_path / "sphere.glb"
    proc = _runner([asset, "-o", out, "--export-budget", size, "--decimation-target", TARGET,
                    "--texture-size", "512"], repo_root, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=300)
    events = [json.loads(line) for line in stdout.splitlines()]
    assert proc.returncode == 0, events[-1]
    stage = next(e for e in events if e.get("parent") == "export" and e["stage"] == "decimate")
    assert stage["method"] == "pieces" and stage["pieces"] == pieces
    progress = [e for e in events if e["event"] == "progress" and e["substep"] == "decimate"]
    assert progress and all(e["pieces"] == pieces for e in progress)
    assert sorted({e["piece"] for e in progress if "piece" in e}) == list(range(1, pieces + 1))
    info = events[-1]["info"]["export"]
    assert info["decimation"] == {**info["decimation"], "method": "pieces", "pieces": pieces}
    (line,) = [x for x in stderr.splitlines() if x.startswith("runner: wrote ")]
    assert f", decimated in {pieces} pieces" in line
    assert line.index("decimated") < line.index("; trace ")
    mesh = trimesh.load(out, force="mesh", process=False)
    assert abs(len(mesh.faces) - TARGET) <= 0.02 * TARGET
    mesh.merge_vertices(merge_tex=True, merge_norm=True)  # the UV seams' copies
    assert len(border_edges(np.asarray(mesh.faces))) == 0  # watertight, as the sphere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sphere.glb", "sphere.trace.jsonl"]


def _piece_child(pid: int, timeout: float = 10.0):
    """The ``decimate_piece_file`` child process under ``pid``, waited for (its start follows
    the piece's ``progress`` event by the child's launch), or None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if any("decimate_piece_file" in part for part in child.cmdline()):
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.02)
    return None


@pytest.mark.slow
def test_runner_export_cancel_stops_a_piece_within_2_s(pieced, tmp_path, repo_root):
    import json
    import signal

    asset, size, _pieces = pieced
    out = tmp_path / "sphere.glb"
    proc = _runner([asset, "-o", out, "--export-budget", size, "--decimation-target", TARGET,
                    "--texture-size", "512"], repo_root)
    began = False
    for line in proc.stdout:  # every event, in order, until a piece is being decimated
        event = json.loads(line)
        if event["event"] == "progress" and event.get("piece") == 1:
            began = True
            break
    assert began, "the decimation in pieces never began"
    assert _piece_child(proc.pid) is not None  # inside the first piece's pyfqmr call
    family = psutil.Process(proc.pid).children(recursive=True)
    assert len(family) >= 2  # the export process and the piece's child
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    assert time.monotonic() - sent < 2.0
    last = [json.loads(line) for line in proc.stdout][-1]
    assert last["event"] == "error" and last["kind"] == "cancelled"
    _gone, alive = psutil.wait_procs(family, timeout=15)
    assert alive == []
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".job-" in p.name]


def test_a_budget_that_needs_pieces_is_refused_without_pyfqmr(monkeypatch, tmp_path):
    """Where the export's Python has no pyfqmr (an interpreter without the project's
    dependencies; the extension bundles it), the pieced path is refused before a byte of the
    arrays is read — never a silent fallback to the one call that does not fit.
    ``has_pyfqmr`` is patched: this venv has pyfqmr."""
    import dataclasses

    from bounded_export import ExportLevers, engine, export_asset
    from bounded_export.errors import PiecesUnavailable
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "s.npz", subdivisions=3, resolution=32)
    plan = budget.plan
    monkeypatch.setattr(budget, "plan", lambda **k: dataclasses.replace(plan(**k),
                                                                        decimate_pieces=2))
    assert engine.has_pyfqmr()  # the real check: a project dependency, installed here
    monkeypatch.setattr(engine, "has_pyfqmr", lambda: False)
    with pytest.raises(PiecesUnavailable, match="needs the decimation in pieces") as info:
        export_asset(asset, tmp_path / "s.glb", ExportLevers(budget=1 << 30))
    assert info.value.kind == "missing_dependency" and "pyfqmr" in info.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npz"]
    assert engine.has_pyfqmr.__module__ == __name__  # the patch, not the real check
