"""The export's sub-steps and levers on the stand-in's o_voxel mirror, each export in a fresh
process (real allocations, the process's own high-water mark): the order of the sub-step
events, remeshing at 512 lowering the peak for the remesh's reason with the face count within
the peer's tolerance, and which ports support a remesh-resolution limit."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from stageload.pixal3d.export.run import (
    PEER_FACE_TOLERANCE,
    ExportOptions,
    ExportRefused,
    check_export,
    dense_grid_sample_bytes,
)
from stageload.pixal3d.export.steps import SUBSTEPS, remesh_limit_supported

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import export_fixture  # noqa: E402

from standin import PORT_DIR  # noqa: E402


@pytest.fixture(scope="module")
def asset(tmp_path_factory):
    return export_fixture.write_asset(tmp_path_factory.mktemp("export") / "asset.npz")


def _export(asset, tmp_path, *extra, scale="0.004", **env):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}.glb"
    environ = {**os.environ, "PIXAL3D_STANDIN_EXPORT_SCALE": scale, **env}
    environ["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(HERE / "export_fixture.py"), str(asset), str(out),
                           *extra], capture_output=True, text=True, env=environ, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_substeps_in_order_with_and_without_remesh(asset, tmp_path):
    on = _export(asset, tmp_path, scale="0")
    assert on["rc"] == 0 and on["parents"] == ["export"]
    assert on["steps"] == ["prepare", "fill_holes", "bvh", "remesh", "cleanup", "uv_unwrap",
                           "bake", "write"] == list(SUBSTEPS)
    off = _export(asset, tmp_path, "--no-remesh", scale="0")
    assert off["steps"] == ["prepare", "fill_holes", "bvh", "cleanup", "uv_unwrap", "bake", "write"]


def test_remesh_at_512_lowers_the_peak_and_keeps_the_face_count(asset, tmp_path):
    grid = _export(asset, tmp_path)
    fit = _export(asset, tmp_path, "--limit", "512")
    # At scale 0.004 the modelled cleanup on the remeshed mesh is ~260 MB at the grid and a
    # quarter of it at 512 (4x fewer remeshed faces); the rest of the process is the same.
    # Measured difference: ~330 MB on an idle machine, 100 MB once during the full suite on 2
    # busy cores (both peaks rose); 50 MB still fails when the lever changes nothing.
    assert grid["peak"] - fit["peak"] > 50e6, (grid, fit)
    assert abs(fit["faces"] - grid["faces"]) / grid["faces"] <= PEER_FACE_TOLERANCE, (grid, fit)


def test_the_stand_in_supports_a_remesh_limit_and_a_port_without_keywords_does_not(tmp_path):
    sys.path.insert(0, str(PORT_DIR))  # the port folder, as open_port puts it
    from o_voxel import postprocess
    assert remesh_limit_supported(postprocess) == (True, "")
    src = tmp_path / "old_postprocess.py"
    src.write_text("def _remesh_narrow_band_dc(v, f, *a):\n    return v, f\n\n"
                   "def to_glb(v, f, grid):\n    return _remesh_narrow_band_dc(v, f, grid)\n")
    spec_mod = types.ModuleType("old_postprocess")
    spec_mod.__file__ = str(src)
    exec(compile(src.read_text(), str(src), "exec"), spec_mod.__dict__)
    ok, reason = remesh_limit_supported(spec_mod)
    assert not ok and "without the resolution=" in reason


def _args(**kw):
    base = dict(no_texture=False, force_texture_fallback=False, native_remesh=True)
    return types.SimpleNamespace(**{**base, **kw})


def _asset(channels=6, resolution=1024):
    mesh = types.SimpleNamespace(attrs=types.SimpleNamespace(shape=(10, channels)))
    return types.SimpleNamespace(mesh=mesh, resolution=resolution, has_voxels=True)


def test_dense_grid_sample_is_refused_with_the_figure_unless_allowed(monkeypatch):
    monkeypatch.delenv("PIXAL3D_NATIVE_SUBPROCESS", raising=False)
    no_flex = types.SimpleNamespace(_HAS_FLEX_GEMM=False)
    with pytest.raises(ExportRefused) as err:
        check_export(no_flex, _args(), _asset(), ExportOptions().resolve())
    assert isinstance(err.value, ExportRefused) and "24.0 GiB" in err.value.message
    assert dense_grid_sample_bytes(6, 1024) == 25_769_803_776
    check_export(no_flex, _args(), _asset(), ExportOptions(allow_dense_grid_sample=True).resolve())
    check_export(types.SimpleNamespace(_HAS_FLEX_GEMM=True), _args(), _asset(),
                 ExportOptions().resolve())
    check_export(no_flex, _args(no_texture=True), _asset(), ExportOptions().resolve())


def test_remesh_limit_is_refused_where_the_port_cannot_honour_it(monkeypatch):
    fit = ExportOptions(profile="fit").resolve()
    with pytest.raises(ExportRefused, match="cannot be imported"):
        check_export(None, _args(), _asset(), fit)
    monkeypatch.setenv("PIXAL3D_NATIVE_SUBPROCESS", "1")
    with pytest.raises(ExportRefused, match="PIXAL3D_NATIVE_SUBPROCESS"):
        check_export(None, _args(), _asset(), fit)


def test_options_resolve_profile_and_refuse_bad_values():
    fit = ExportOptions(profile="fit").resolve()
    assert (fit.remesh_limit, fit.free_between_steps) == (512, True)
    assert ExportOptions(profile="fit", remesh_resolution="grid").resolve().remesh_limit is None
    assert ExportOptions(profile="fit", remesh=False).resolve().remesh_limit is None
    assert ExportOptions().resolve().remesh_limit is None
    for bad in (dict(profile="tiny"), dict(decimation_target=0), dict(decimation_target=1.5),
                dict(decimation_target=True), dict(remesh_resolution=256),
                dict(remesh=False, remesh_resolution=512)):
        with pytest.raises(ValueError):
            ExportOptions(**bad).resolve()


def test_an_o_voxel_without_the_hooked_names_still_exports_with_fewer_substeps():
    from stageload.pixal3d.export.steps import ExportSteps

    calls = []
    bare = types.ModuleType("bare_postprocess")
    bare.to_glb = lambda *a, **k: calls.append("to_glb") or "mesh"
    events = []
    with ExportSteps(events.append, bare, remesh=True):
        assert bare.to_glb() == "mesh"
    assert calls == ["to_glb"]
    assert [e["stage"] for e in events] == ["prepare", "fill_holes", "write"]
    assert not hasattr(bare.to_glb, "_stageload_hook")  # hooks removed
