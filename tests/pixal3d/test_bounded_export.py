"""The bounded export engine through the real runner: a stand-in Pixal3D run exports with it by
default, in a process of its own that imports no torch; ``--keep-asset`` keeps the hand-over
beside the GLB and ``python -m runner export`` re-exports it with other levers (the same
events as a run's export); the port's levers are refused with the bounded engine before
anything runs; a bad asset is ``bad_asset`` with nothing written; a cancel stops the export."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from bounded_export import SUBSTEPS
from stageload.pixal3d import plan_for
from tests.pixal3d.voxel_colours import assert_shows_the_voxels


def _run(args, env, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "runner", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


def _events(proc):
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _trace(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _coverage_warnings(result):
    """The export's warnings that some used texels found no voxel (``coverage.judge``)."""
    return [w for w in result.get("warnings", []) if "found a voxel" in w["message"]]


def _faces(glb):
    import trimesh

    return len(trimesh.load(glb, force="mesh", process=False).faces)


@pytest.fixture
def env(standin_weights):
    return {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
            "PIXAL3D_STANDIN_EXPORT_SCALE": "0"}


def _runner_until_export_step(args, step: str, timeout: float, **popen):
    """``python -m runner ARGS`` started, returned once its export process reports the sub-step
    ``step``: (the process, the list its reader thread keeps filling with stdout events, that
    thread). Fails the test if the runner exits first or ``timeout`` seconds pass."""
    sup = subprocess.Popen([sys.executable, "-m", "runner", *map(str, args)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **popen)
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(json.loads(x) for x in sup.stdout),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not any(e.get("parent") == "export" and e.get("stage") == step for e in events):
        assert sup.poll() is None and time.monotonic() < deadline, events[-3:]
        time.sleep(0.05)
    return sup, events, reader


def _cancel_once_exporting(args, env, cwd) -> tuple[int, list[dict]]:
    """``runner ARGS`` sent SIGTERM once its export process reports ``cleanup`` (the model
    process has exited, the asset is complete): (exit code, its stdout events)."""
    sup, events, reader = _runner_until_export_step(args, "cleanup", 300, cwd=cwd, env=env)
    sup.send_signal(signal.SIGTERM)
    code = sup.wait(timeout=30)
    reader.join(timeout=10)
    return code, events


@pytest.fixture(scope="module")
def keep_runs(standin_weights, standin_dir, rgb_image, tmp_path_factory, repo_root) -> dict:
    """One stand-in command with the defaults and --keep-asset, the way a user recovers from a
    cancel (one pipeline run serves the cancel's test and every test of a kept run): cancelled
    once its export has begun (its exit code, events and the folder then), the asset it kept
    re-exported into another folder (``again``), then the same command run again in the same
    folder to its end (``rerun``, the completed run the ``kept`` tests read)."""
    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
           "PIXAL3D_STANDIN_EXPORT_SCALE": "0"}
    folder, other = tmp_path_factory.mktemp("bounded"), tmp_path_factory.mktemp("again")
    out = folder / "char.glb"
    args = [rgb_image, "-o", out, "--backend", "pixal3d", "--pixal3d-dir", standin_dir,
            "--texture-size", "512", "--keep-asset"]
    code, events = _cancel_once_exporting(args, env, repo_root)
    asset = folder / "char.asset.npz"
    facts = {"folder": folder, "out": out, "asset": asset, "code": code, "events": events,
             "listed": sorted(os.listdir(folder)), "asset_kept": asset.is_file(),
             "glb_written": out.exists(),
             "asset_mode": asset.stat().st_mode & 0o777 if asset.is_file() else None,
             "other": other / "again.glb"}
    facts["again"] = _run(["export", asset, "-o", facts["other"], "--texture-size", "512"], env,
                          repo_root)
    facts["rerun"] = _run(args, env, repo_root)
    return facts


@pytest.fixture(scope="module")
def kept(keep_runs):
    """One stand-in run with the defaults and --keep-asset: (output folder, completed proc)."""
    return keep_runs["folder"], keep_runs["rerun"]


@pytest.mark.slow
def test_a_pixal3d_run_exports_with_the_bounded_engine_in_its_own_torch_free_process(kept):
    folder, proc = kept
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = _trace(folder / "char.trace.jsonl")
    stages = [e for e in trace if e.get("event") == "stage" and e.get("parent") is None]
    assert [e["stage"] for e in stages] == list(plan_for("1024_cascade"))
    pids = {e["stage"]: e["pid"] for e in stages}
    assert pids["export"] != pids["decode"]
    started = [e for e in trace if e.get("event") == "export_worker"]
    assert started and started[0]["torch"] is None  # no torch in the export process
    subs = [e for e in trace if e.get("event") == "stage" and e.get("parent") == "export"]
    # the supervisor enters export as it starts the process (its start-up: "handover")
    assert [e["stage"] for e in subs] == ["handover", *SUBSTEPS]
    assert len([e for e in trace if e.get("event") == "ready" and e["stage"] == "export"]) == 1
    result = _events(proc)[-1]
    assert result["event"] == "result" and result["info"]["export_engine"] == "bounded"
    assert result["info"]["asset"] == str(folder / "char.asset.npz")
    wrote = [line for line in proc.stderr.splitlines() if line.startswith("runner: wrote ")]
    assert len(wrote) == 1 and wrote[0].endswith(f"; asset kept at {folder / 'char.asset.npz'}")
    assert (folder / "char.asset.npz").is_file() and (folder / "char.glb").is_file()
    assert not [p for p in folder.iterdir() if ".job-" in p.name]


@pytest.mark.slow
def test_a_bounded_runs_glb_is_wound_consistently_and_outward(kept):
    """The stand-in decoder's flexible dual grid extraction winds about half the kept asset's
    faces inward (o_voxel's fixed quad order per axis); the GLB's faces, welded across its UV
    seams, are wound consistently and every closed part encloses a positive volume."""
    import trimesh

    folder, proc = kept
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(folder / "char.asset.npz") as data:
        asset = trimesh.Trimesh(data["vertices"], data["faces"], process=True)
    assert not asset.is_winding_consistent  # the bug the export must not pass on
    glb = trimesh.load(folder / "char.glb", force="mesh", process=False)
    mesh = trimesh.Trimesh(glb.vertices, glb.faces, process=False)
    mesh.merge_vertices(merge_tex=True, merge_norm=True)
    assert mesh.is_winding_consistent
    closed = [part for part in mesh.split(only_watertight=False) if part.is_watertight]
    assert closed and all(part.volume > 0 for part in closed)
    trace = _trace(folder / "char.trace.jsonl")
    assert not [e for e in trace if e.get("event") == "warning"
                and "outside" in e.get("message", "")]


@pytest.mark.slow
def test_the_kept_asset_has_its_voxels_on_the_grid_it_declares_around_its_mesh(kept):
    """The port's convention (its ``decode_latent`` and ``_write_mesh_npz``): ``coords`` on the
    ``resolution``³ grid with ``voxel_size`` 1 / resolution from ``origin`` −0.5, the voxels a
    shell around the decoded surface — every vertex within two voxels of a voxel's centre."""
    from scipy.spatial import cKDTree

    folder, proc = kept
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(folder / "char.asset.npz") as data:
        res, size = int(data["resolution"]), float(data["voxel_size"])
        assert res == 1024 and size == pytest.approx(1 / res)
        assert np.allclose(data["origin"], -0.5)
        coords, vertices = data["coords"][:, -3:], data["vertices"].astype(np.float64)
    assert coords.min() >= 0 and coords.max() < res
    centres = -0.5 + (coords + 0.5) * size
    away, _ = cKDTree(centres).query(vertices)
    assert away.max() / size <= 2.0, f"a vertex is {away.max() / size:.1f} voxels from a voxel"


@pytest.mark.slow
def test_a_bounded_runs_glb_shows_its_assets_voxel_colours(kept):
    """The GLB's base colour at points on its surface is the colour of the asset's voxel there
    (not the all-black texture of voxels that miss the mesh), and the export says every used
    texel found a voxel."""
    folder, proc = kept
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_shows_the_voxels(folder / "char.glb", folder / "char.asset.npz", "bounded")
    result = _events(proc)[-1]
    assert result["info"]["export"]["voxel_coverage"] >= 0.99
    assert not _coverage_warnings(result)


@pytest.mark.slow
def test_runner_export_re_exports_the_kept_asset_with_other_levers(kept, env, repo_root):
    folder, first = kept
    assert first.returncode == 0, first.stderr[-3000:]
    asset = folder / "char.asset.npz"
    with np.load(asset) as data:
        faces_in = len(data["faces"])
    target = max(100, faces_in // 3)
    out = folder / "again.glb"
    proc = _run(["export", asset, "-o", out, "--decimation-target", target, "--texture-size",
                 "1024", "--export-budget", "1G"], env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = _events(proc)
    assert events[0]["event"] == "hello" and events[0]["mode"] == "export"
    assert events[0]["stages"] == ["export"] and events[0]["asset"] == str(asset)
    assert events[1]["event"] == "asset" and events[1]["faces"] == faces_in
    top = [e for e in events if e["event"] == "stage" and e.get("parent") is None]
    assert [(e["stage"], e["index"], e["count"]) for e in top] == [("export", 0, 1)]
    assert [e["stage"] for e in events if e.get("parent") == "export"] == list(SUBSTEPS)
    assert any(e["event"] == "memory" for e in events)
    assert any(e["event"] == "guard" and e["state"] == "started" for e in events)
    result = events[-1]
    assert result["event"] == "result" and result["output"] == str(out)
    info = result["info"]["export"]
    assert info["output"] == str(out)  # the GLB, not the job folder's partial file
    assert info["texture_size"] == 1024 and info["budget"] == 1 << 30
    assert abs(_faces(out) - target) <= 0.02 * target
    assert _faces(out) == info["faces"]
    # the stand-in's surface runs through its voxels' centres: decimated, it stays on them
    assert info["voxel_coverage"] >= 0.99 and not _coverage_warnings(result)
    summary = subprocess.run([sys.executable, "-m", "stageload", "summary",
                              str(out.with_suffix(".trace.jsonl"))], capture_output=True,
                             text=True, cwd=repo_root, timeout=60).stdout
    rows = [line.split()[1] for line in summary.splitlines() if line.lstrip().startswith("·")]
    assert rows == list(SUBSTEPS)



@pytest.mark.slow
def test_runner_export_says_how_many_texels_found_no_voxel(kept, env, repo_root, tmp_path):
    """The kept asset without the voxels of one side of its box: ``runner export`` writes the
    GLB, the ``warning`` names the share of texels that found a voxel and reaches stderr."""
    folder, first = kept
    assert first.returncode == 0, first.stderr[-3000:]
    with np.load(folder / "char.asset.npz") as data:
        arrays = dict(data)
    x = arrays["coords"][:, -3]
    keep = x > x.min()  # the −x side's voxels gone: its texels find none within reach
    partial = tmp_path / "partial.asset.npz"
    np.savez(partial, **{**arrays, "coords": arrays["coords"][keep],
                         "attrs": arrays["attrs"][keep]})
    out = tmp_path / "partial.glb"
    proc = _run(["export", partial, "-o", out, "--texture-size", "512"], env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _events(proc)[-1]
    info = result["info"]["export"]
    assert 0.5 <= info["voxel_coverage"] < 0.99 and out.is_file()
    warned = _coverage_warnings(result)
    assert len(warned) == 1 and f"{info['voxel_coverage']:.2%}" in warned[0]["message"]
    assert "runner: warning: The export's texture is" in proc.stderr

@pytest.mark.slow
def test_runner_export_of_the_kept_asset_shows_its_voxel_colours(kept, env, repo_root):
    """Re-export at another texture size (the default decimation target keeps the stand-in's
    faces): the GLB's colours are the asset's voxels', every used texel found one."""
    folder, first = kept
    assert first.returncode == 0, first.stderr[-3000:]
    asset, out = folder / "char.asset.npz", folder / "again_1024.glb"
    proc = _run(["export", asset, "-o", out, "--texture-size", "1024"], env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _events(proc)[-1]
    share = result["info"]["export"]["voxel_coverage"]
    assert share >= 0.99 and not _coverage_warnings(result)
    assert_shows_the_voxels(out, asset, "bounded")
    summary = subprocess.run([sys.executable, "-m", "stageload", "summary",
                              str(out.with_suffix(".trace.jsonl"))], capture_output=True,
                             text=True, cwd=repo_root, timeout=60).stdout
    bake = next(line for line in summary.splitlines() if line.lstrip().startswith("· bake"))
    assert bake.endswith(f"voxel_coverage {share:.4g}"), bake


def _new_file_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@pytest.mark.slow
def test_the_kept_asset_gets_the_mode_of_the_glb(kept):
    """The hand-over is private in the job folder (0700 folder, a 0600 file); kept beside the
    GLB it is meant for reuse, so it gets the GLB's mode (0666 less the umask)."""
    folder, proc = kept
    assert proc.returncode == 0, proc.stderr[-3000:]
    mode = (folder / "char.asset.npz").stat().st_mode & 0o777
    assert mode == (folder / "char.glb").stat().st_mode & 0o777 == _new_file_mode(), oct(mode)


def test_a_keep_asset_run_cancelled_in_its_export_keeps_the_asset(keep_runs):
    """SIGTERM once the export stage has begun (the model process has exited, its asset is
    complete): exit 130, no GLB and no job folder, but the decoded asset is kept (with the
    GLB's mode) and the error says so with the command that exports it again; that command
    works, and so does the same run command again (the cancelled run's trace and the asset it
    kept are its leftovers: replaced without --overwrite)."""
    v = keep_runs
    out, asset = v["out"], v["asset"]
    assert v["code"] == 130, v["events"][-3:]
    last = v["events"][-1]
    assert last["event"] == "error" and last["kind"] == "cancelled", last
    assert last["details"]["asset"] == str(asset)
    assert f"The decoded asset was kept at {asset}; re-export it with `python -m runner " \
           f"export {asset} -o {out}`." in last["message"]
    assert v["asset_kept"] and not v["glb_written"]
    assert v["asset_mode"] == _new_file_mode()
    assert v["listed"] == ["char.asset.npz", "char.trace.jsonl"]
    again = v["again"]
    assert again.returncode == 0, again.stderr[-3000:]
    assert _events(again)[-1]["info"]["export"]["output"] == str(v["other"])
    # the same run command works again: the leftover trace and the asset it kept are replaced
    rerun = v["rerun"]
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "replacing" in rerun.stderr and out.is_file()
    assert _events(rerun)[-1]["info"]["asset"] == str(asset) and asset.is_file()
    assert not [p for p in os.listdir(v["folder"]) if p.startswith(".")]


def test_runner_export_runs_again_after_a_cancel_and_its_result_names_the_glb(tmp_path,
                                                                              repo_root):
    """A cancelled ``runner export`` leaves its trace (ending in ``cancelled``); the same
    command then works, replacing that leftover (the run's rule, one stderr line), and the
    result's ``info.export.output`` is the GLB, not the job folder's partial file. A
    successful export's trace stays protected."""
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "sphere.npz", subdivisions=3, resolution=32)
    out = tmp_path / "e" / "sphere.glb"
    args = ["export", asset, "-o", out, "--texture-size", "512", "--cancel-on-stdin-eof"]
    proc = subprocess.run([sys.executable, "-m", "runner", *map(str, args)], input="",
                          capture_output=True, text=True, timeout=120, cwd=repo_root)
    trace = out.with_suffix(".trace.jsonl")
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert _trace(trace)[-1]["kind"] == "cancelled" and not out.exists()
    proc = _run(args[:-1], dict(os.environ), repo_root, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"replacing {trace}: the trace of an earlier run of sphere.glb" in proc.stderr
    result = _events(proc)[-1]
    assert result["output"] == str(out) and result["info"]["export"]["output"] == str(out)
    assert _trace(trace)[-1]["event"] == "result"
    assert sorted(os.listdir(out.parent)) == ["sphere.glb", "sphere.trace.jsonl"]
    out.unlink()  # a successful run's trace is protected even without its GLB
    proc = _run(args[:-1], dict(os.environ), repo_root, timeout=120)
    assert proc.returncode == 20 and _events(proc)[-1]["kind"] == "output_exists"


@pytest.mark.parametrize("extra,match", [
    (["--remesh", "on"], "--remesh on is a lever of the port's export"),
    (["--remesh-resolution", "512"], "--remesh-resolution 512 is a lever of the port's"),
    (["--export-profile", "fit"], "--export-profile fit is a lever of the port's export"),
    (["--export-process", "in-process"], "runs in a process of its own"),
    (["--export-engine", "port", "--export-budget", "2G"], "--export-budget applies to the "
                                                            "bounded export engine"),
    (["--export-budget", "10M"], "below the engine's minimum of 256.0 MiB"),
])
def test_port_levers_are_refused_with_the_bounded_engine_before_anything_runs(
        extra, match, standin_dir, rgb_image, tmp_path, repo_root):
    out = tmp_path / "x.glb"
    proc = _run([rgb_image, "-o", out, "--backend", "pixal3d", "--pixal3d-dir", standin_dir,
                 *extra], dict(os.environ), repo_root, timeout=120)
    events = _events(proc)
    assert proc.returncode == 2 and events[-1]["kind"] == "usage", proc.stderr[-2000:]
    assert match in events[-1]["message"]
    assert [e["event"] for e in events] == ["hello", "error"]
    assert os.listdir(tmp_path) == []


def _bad_asset(path, **changes):
    arrays = {"vertices": np.zeros((3, 3), np.float32), "faces": np.array([[0, 1, 2]], np.int32),
              "coords": np.zeros((1, 3), np.int32), "attrs": np.zeros((1, 6), np.float32),
              "origin": np.zeros(3, np.float32), "voxel_size": np.float32(0.1),
              "resolution": np.int32(10)}
    arrays.update(changes)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_runner_export_refuses_a_bad_asset_and_writes_nothing(tmp_path, repo_root):
    """What the headers show (a missing key, a wrong shape, not an npz) is refused right after
    ``hello``, before the trace; what only the values show (faces past the vertices) is found
    by the export process's ``load`` step: the same kind, no GLB either way."""
    out = tmp_path / "bad.glb"
    for name, changes, match in [
            ("nokey.npz", {"attrs": None}, "'attrs': missing from the asset"),
            ("shape.npz", {"attrs": np.zeros((1, 5), np.float32)}, "has 5 channels")]:
        proc = _run(["export", _bad_asset(tmp_path / name, **changes), "-o", out],
                    dict(os.environ), repo_root, timeout=120)
        events = _events(proc)
        assert proc.returncode == 18, proc.stderr[-2000:]
        assert [e["event"] for e in events] == ["hello", "error"]
        assert events[-1]["kind"] == "bad_asset" and match in events[-1]["message"]
        assert "runner: bad_asset:" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["nokey.npz", "shape.npz"]
    text = tmp_path / "notes.npz"
    text.write_text("not an archive")
    proc = _run(["export", text, "-o", out], dict(os.environ), repo_root, timeout=120)
    assert proc.returncode == 18 and "not an .npz file" in _events(proc)[-1]["message"]
    past = _bad_asset(tmp_path / "past.npz", faces=np.array([[0, 1, 9]], np.int32))
    proc = _run(["export", past, "-o", out], dict(os.environ), repo_root, timeout=120)
    last = _events(proc)[-1]
    assert proc.returncode == 18 and last["kind"] == "bad_asset", proc.stderr[-2000:]
    assert "'faces'" in last["message"] and "indexes past the 3 vertices" in last["message"]
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".job-" in p]


def test_a_refused_export_leaves_nothing_but_the_trace_asked_for(tmp_path, repo_root):
    """A bad value only the export process finds (NaN vertices, in its ``load`` step): no GLB,
    no temporary or claim file, no default trace, not even the output folder the job made;
    with ``--trace`` that trace is kept, complete: ``hello`` first, the ``error`` last."""
    vertices = np.zeros((3, 3), np.float32)
    vertices[2, 1] = np.nan
    asset = _bad_asset(tmp_path / "nan.npz", vertices=vertices)
    out = tmp_path / "made" / "deep" / "nan.glb"
    proc = _run(["export", asset, "-o", out], dict(os.environ), repo_root, timeout=120)
    last = _events(proc)[-1]
    assert proc.returncode == 18 and last["kind"] == "bad_asset", proc.stderr[-2000:]
    assert "'vertices': holds NaN" in last["message"] and last["trace"] is None
    assert any(e.get("stage") == "load" for e in _events(proc))  # found by the export process
    assert os.listdir(tmp_path) == ["nan.npz"]
    trace = tmp_path / "traces" / "nan.trace.jsonl"
    proc = _run(["export", asset, "-o", out, "--trace", trace], dict(os.environ), repo_root,
                timeout=120)
    assert proc.returncode == 18, proc.stderr[-2000:]
    assert _events(proc)[-1]["trace"] == str(trace)
    lines = _trace(trace)
    assert lines[0]["event"] == "hello" and lines[-1]["event"] == "error"
    assert lines[-1]["kind"] == "bad_asset" and lines[-1] == _events(proc)[-1]
    assert sorted(os.listdir(tmp_path)) == ["nan.npz", "traces"]
    assert os.listdir(tmp_path / "traces") == ["nan.trace.jsonl"]


def test_a_damaged_asset_is_a_bad_asset_that_leaves_nothing(tmp_path, repo_root):
    """Bytes overwritten inside ``faces.npy`` (the zip's CRC no longer matches; the headers are
    intact, and 48 KB of faces are more than the header read takes in, so the export process's
    ``load`` step finds it): ``bad_asset`` (18) naming
    ``faces``, no traceback, the bad-asset hint (no image or backend to try), and nothing left
    (no GLB, trace, job folder or claim file)."""
    from tests.export_engine.damage import damage_member

    asset = damage_member(_bad_asset(tmp_path / "corrupt.npz",
                                     vertices=np.zeros((64, 3), np.float32),
                                     faces=np.zeros((4000, 3), np.int32)), "faces", 100)
    proc = _run(["export", asset, "-o", tmp_path / "out" / "corrupt.glb"], dict(os.environ),
                repo_root, timeout=120)
    last = _events(proc)[-1]
    assert proc.returncode == 18 and last["kind"] == "bad_asset", proc.stderr[-3000:]
    assert last["details"]["key"] == "faces" and "'faces': cannot be read: the file is damaged" in \
        last["message"] and "CRC" in last["message"]
    assert "damaged" in last["hint"] and "image" not in last["hint"]
    assert "Traceback" not in proc.stderr and "runner: bad_asset:" in proc.stderr
    assert any(e.get("stage") == "load" for e in _events(proc))  # found by the export process
    assert os.listdir(tmp_path) == ["corrupt.npz"]


def test_a_budget_below_the_minimum_is_a_usage_error_with_a_hint_that_matches(tmp_path,
                                                                               repo_root):
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "sphere.npz", subdivisions=2, resolution=32)
    proc = _run(["export", asset, "-o", tmp_path / "x.glb", "--export-budget", "10M"],
                dict(os.environ), repo_root, timeout=120)
    events = _events(proc)
    assert proc.returncode == 2 and events[-1]["kind"] == "usage", proc.stderr[-2000:]
    assert [e["event"] for e in events] == ["hello", "error"]
    assert "10.0 MiB is below the engine's minimum of 256.0 MiB" in events[-1]["message"]
    assert events[-1]["hint"] == "Give --export-budget 256M or more."
    assert os.listdir(tmp_path) == ["sphere.npz"]


def test_runner_export_cancel_stops_the_export_process(tmp_path, repo_root):
    """SIGTERM while the engine bakes: exit 130 within 2 s, no GLB, no job folder, no
    process left."""
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "sphere.npz", subdivisions=5, resolution=96)
    out = tmp_path / "sphere.glb"
    sup, events, reader = _runner_until_export_step(
        ["export", asset, "-o", out, "--texture-size", "4096", "--decimation-target", "8000"],
        "bake", 120, cwd=repo_root)
    family = psutil.Process(sup.pid).children(recursive=True)
    sent = time.monotonic()
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=30) == 130
    assert time.monotonic() - sent < 2.0
    reader.join(timeout=10)
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "cancelled"
    _gone, alive = psutil.wait_procs(family, timeout=15)
    assert not alive and not out.exists()
    assert not [p for p in os.listdir(tmp_path) if ".job-" in p]
