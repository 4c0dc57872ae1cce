"""The add-on's Re-export inside the real ``bpy`` module (4.5, and 5.x where the bare venv is
there), end to end: Generate with the stand-in Pixal3D port (its weights written here) and
"Keep asset for re-export" on records the kept asset on the imported object; Re-export at
another decimation target runs the real ``python -m runner export`` in Blender's own Python
with the bundled wheels (no torch) and imports a new object from a new GLB beside the old one;
a cancel mid re-export leaves no GLB and no process; a bad asset is the runner's ``bad_asset``,
said clearly; a missing one greys Re-export out with the reason.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bounded_export import SUBSTEPS
from standin import PORT_DIR, make_weights
from standin.sphere_asset import make_sphere_asset
from tests.blender.test_addon import (
    PY,
    bpy5_python,
    built_zip,  # noqa: F401  (the fixture)
    scenario,
)

pytestmark = [pytest.mark.blender, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def standin_env(tmp_path_factory) -> dict:
    """The stand-in port's weights (1e-4 of the real sizes) and where the port finds them."""
    info = make_weights(tmp_path_factory.mktemp("weights"), scale=1e-4)
    return {**info.env, "PIXAL3D_DEVICE": "cpu", "PIXAL3D_STANDIN_EXPORT_SCALE": "0"}


@pytest.fixture(scope="module")
def big_asset(tmp_path_factory) -> Path:
    """327,680 faces on a 128³ grid: its export lasts seconds, long enough to cancel."""
    return make_sphere_asset(tmp_path_factory.mktemp("big") / "big.npz", subdivisions=7,
                             resolution=128)


def pixal3d_folder(tmp_path: Path) -> Path:
    """A Pixal3D-mac folder as a user has it: the stand-in port's files and a ``.venv`` (the
    repository's, which has torch) that the add-on picks for Pixal3D by itself."""
    folder = tmp_path / "Pixal3D-mac"
    folder.mkdir()
    for entry in PORT_DIR.iterdir():
        (folder / entry.name).symlink_to(entry)
    (folder / ".venv").symlink_to(REPO / ".venv", target_is_directory=True)
    return folder


@pytest.fixture(params=["bpy4.5", "bpy5"])
def bpy_python(request):
    return PY if request.param == "bpy4.5" else bpy5_python()


def test_reexport_of_a_kept_asset(built_zip, tmp_path, shared_images, standin_env, big_asset,  # noqa: F811
                                  bpy_python):
    name = "typical_humanoid_goblin"
    img = str(next(p for p in shared_images if p.stem == name))
    v = scenario("reexport", built_zip, tmp_path, img, str(pixal3d_folder(tmp_path)),
                 str(big_asset), python=bpy_python, script="reexport_scenarios.py",
                 env=standin_env, timeout=600)
    out = tmp_path / "out"
    # Before anything is imported, Re-export is greyed out and says why.
    assert v["poll_nothing_selected"][0] is False and v["poll_nothing_selected"][1]
    assert v["poll_nothing_selected"][1] in " ".join(v["draw_nothing_selected"]["labels"])
    # 1. Generate with the asset kept: the object records its asset (and its GLB).
    assert v["generate_finished"] and v["generate_job"]["status"] == "done", v["generate_job"]
    src = v["source"]
    assert src["asset"] == str(out / f"{name}.asset.npz") and src["glb"] == str(out / f"{name}.glb")
    assert v["poll_ready"] == [True, ""]
    draw = v["draw_ready"]
    assert draw["bad"] == [] and draw["ops"] == ["image_to_mesh.reexport"]
    assert draw["props"] == ["texture_size", "export_budget", "decimation_target"]
    assert f"{name} from {name}.asset.npz" in " ".join(draw["labels"])
    # 2. Re-export at a third of the faces: `runner export` in Blender's own Python, with only
    # the bounded engine's levers (the port's, left set in the panel, are not passed).
    first = v["first"]
    assert first["result"] == ["FINISHED"] and first["finished"], first
    assert first["status"] == "done", first
    argv = first["argv"]
    assert argv[0] == v["python"] and argv[1:5] == ["-m", "runner", "export", src["asset"]]
    assert argv[argv.index("-o") + 1] == str(out / f"{name}_reexport.glb")
    assert argv[argv.index("--decimation-target") + 1] == str(v["target"])
    assert argv[argv.index("--texture-size") + 1] == "512"
    assert not {"--export-profile", "--remesh-resolution", "--backend", "--keep-asset",
                "--export-engine"} & set(argv), argv
    assert first["stages"] == [["export", "done"]]
    assert [name for name, _ in first["substeps"]] == list(SUBSTEPS)
    [new] = first["objects"]
    assert new["name"] == f"{name}_reexport" and new["glb"] == str(out / f"{name}_reexport.glb")
    assert abs(new["faces"] - v["target"]) <= 0.02 * v["target"], (new["faces"], v["target"])
    assert new["faces"] < src["faces"] * 0.5
    assert new["asset"] == src["asset"] and new["textured"]  # it can be re-exported again
    assert new["backend"] == "pixal3d" and new["image"] == img
    assert new["collections"] == src["collections"] and first["active"] == f"{name}_reexport"
    assert new["location"][0] > src["location"][0] + 1.0  # beside the old one, not on it
    assert new["location"][1:] == pytest.approx(src["location"][1:])
    assert v["source_after"] == {"exists": True, "faces": src["faces"], "glb_unchanged": True}
    # 3. Cancel inside an export step: nothing written, nothing left running.
    cancel = v["cancel"]
    assert v.get("cancel_at") and any(s == "running" for _, s in v["cancel_at"])
    assert cancel["finished"] and cancel["status"] == "cancelled", cancel
    assert cancel["processes_at_cancel"] >= 2  # the runner and its export process
    assert cancel["alive_after"] == [] and cancel["children_alive"] == []
    assert cancel["output"] == str(out / f"{name}_reexport_2.glb")
    assert not cancel["glb_exists"] and cancel["leftovers"] == [] and cancel["objects"] == []
    # the step it stopped in shows the job's end, not "pending"; none is left running
    stopped = dict(v["cancel_at"])
    running = [n for n, s in stopped.items() if s == "running"]
    assert [s for n, s in cancel["substeps"] if n in running] == ["cancelled"], cancel
    assert "running" not in dict(cancel["substeps"]).values()
    assert cancel["stages"] == [["export", "cancelled"]], cancel
    # 4. A bad asset: the runner's bad_asset, said in words (no traceback), nothing written.
    assert v["bad_poll"] == [True, ""]  # a file is there: its content is the runner's to judge
    bad = v["bad"]
    # the cancelled run wrote no GLB: its name is reused, its leftover trace replaced by the runner
    assert bad["output"] == str(out / f"{name}_reexport_2.glb"), bad["output"]
    assert bad["finished"] and bad["status"] == "failed" and bad["error_kind"] == "bad_asset", bad
    assert "npz" in bad["error"] and bad["hint"], bad
    assert bad["objects"] == [] and not bad["glb_exists"]
    assert "Image to Mesh failed: " in v["_stdout"] and "Traceback" not in v["_stdout"]
    # 5. The asset gone: greyed out, the reason shown, pressing it is refused with it.
    poll, why = v["missing_poll"]
    assert poll is False and "kept asset is gone" in why and src["asset"] in why, why
    assert "kept asset is gone" in " ".join(v["missing_draw"]["labels"])
    assert v["missing_draw"]["ops"] == ["image_to_mesh.reexport"]  # there, in a greyed row
    assert isinstance(v["missing_press"], str) and "kept asset is gone" in v["missing_press"]
    assert v["children_alive"] == []
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".glb") == [
        f"{name}.glb", f"{name}_reexport.glb"]
    assert os.path.getsize(out / f"{name}_reexport.glb") > 0


def test_a_reexport_of_a_reexport_is_placed_next_to_the_last(built_zip, tmp_path):  # noqa: F811
    """O at x 2, its re-export one step (2.5 m) right; a re-export of that re-export goes
    right after it (7.0), not a step further; a re-export of O again after the last (9.5);
    an object of another asset does not count."""
    v = scenario("placement", built_zip, tmp_path, script="reexport_scenarios.py")
    assert v["places"] == [[4.5, 1.0, 0.5], [7.0, 1.0, 0.5], [9.5, 1.0, 0.5], [9.5, 1.0, 0.5]]
