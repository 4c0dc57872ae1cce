"""The built extension inside the real ``bpy`` 4.5 module, driving a real runner subprocess.

Each scenario runs in a fresh interpreter (``scenarios.py``; bpy loads once per process) with
``BLENDER_USER_RESOURCES`` in a temporary folder, installs the zip through Blender's own
``extensions.package_install_files`` into a temporary repository, and prints a JSON verdict that
is checked here. The built-in backend needs no weights; each run takes a few seconds (mostly
the worker importing torch).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from blender_addon.packaging import wheels
from blender_addon.runner_client.state import human_bytes
from tests.blender.wheel_seed import keep_wheels, seed_wheels

pytestmark = pytest.mark.blender
HERE = Path(__file__).parent
REPO = HERE.parents[1]
PY = sys.executable


HOST_PLATFORM = wheels.host_platform()  # the zip installed here carries this machine's wheels
BPY5_PYTHON = REPO / ".venv-bpy5" / "bin" / "python"
"""A virtual environment holding only ``bpy`` 5.x (and what pip installs with it: NumPy …),
made by ``make setup-bpy5``: the newest Blender, and the zero-setup check (no torch, SciPy,
trimesh, Pillow or psutil installed by us)."""


def bpy5_python() -> Path:
    """The bpy 5.x venv's python; skipped when it is missing, failed instead when
    ``IMAGE_TO_MESH_REQUIRE_BPY5`` is set (``make test`` sets it, so CI cannot skip it)."""
    if not BPY5_PYTHON.is_file():
        msg = f"{BPY5_PYTHON} is missing: run `make setup-bpy5`"
        if os.environ.get("IMAGE_TO_MESH_REQUIRE_BPY5"):
            pytest.fail(msg)
        pytest.skip(msg)
    return BPY5_PYTHON


@pytest.fixture(scope="module")
def built_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([PY, "-m", "blender_addon.packaging.build", "--out", str(out),
                           "--platform", HOST_PLATFORM], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def scenario(name: str, zip_path: Path, work: Path, *args: str, timeout: float = 180,
             python: str | Path = PY, script: str = "scenarios.py",
             env: dict | None = None, fresh_install: bool = False) -> dict:
    """Run one scenario of ``script`` (scenarios.py) with ``python`` (a bpy interpreter),
    Blender's user folders and HOME inside ``work`` and ``env`` added to the environment;
    return its verdict. The user folder starts with the wheels an earlier scenario of
    ``python`` installed (``wheel_seed.seed_wheels``) unless ``fresh_install``."""
    (work / "home").mkdir(exist_ok=True)
    if not fresh_install:
        seed_wheels(python, work / "user")
    env = dict(os.environ, **(env or {}), BLENDER_USER_RESOURCES=str(work / "user"),
               HOME=str(work / "home"))
    proc = subprocess.run([str(python), str(HERE / script), name, str(zip_path),
                           str(work), *args],
                          cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("VERDICT ")]
    assert lines, f"scenario {name} gave no verdict (exit {proc.returncode}):\n" \
                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    facts = json.loads(lines[-1][len("VERDICT "):])
    if facts.get("enabled") and facts.get("install_result") == ["FINISHED"]:
        keep_wheels(python, work / "user")
    facts["_stdout"] = proc.stdout  # Blender prints operator reports there in background mode
    return facts


def batch_folder(tmp_path, shared_images, stems) -> Path:
    """``tmp_path/batch`` holding a copy of each test image named in ``stems``."""
    folder = tmp_path / "batch"
    folder.mkdir()
    for stem in stems:
        src = Path(image(shared_images, stem))
        shutil.copy(src, folder / src.name)
    return folder


def image(shared_images, stem):
    return str(next(p for p in shared_images if p.stem == stem))


@pytest.fixture(params=["bpy4.5", "bpy5"])
def bpy_python(request):
    """The add-on tests that also run on the newest Blender (a smaller set, so `make test`
    stays within its time): the .venv's bpy 4.5 LTS, then the bpy 5.x venv."""
    return PY if request.param == "bpy4.5" else bpy5_python()


def test_zip_installs_registers_and_unregisters(built_zip, tmp_path, bpy_python):
    v = scenario("register", built_zip, tmp_path, python=bpy_python, fresh_install=True)
    assert v["install_result"] == ["FINISHED"] and v["enabled"]
    assert all(v["ops"].values()), v["ops"]
    assert v["panel"] and v["scene_settings"]
    assert v["prefs_type"] == "ImageToMeshPreferences"
    assert v["token_file_subtype"] == "FILE_PATH"  # a file's path, never the token itself
    assert ({"__init__.py", "blender_manifest.toml", "headless.py", "runtime"}
            <= set(v["installed_files"]))
    assert "build.py" not in v["installed_files"]
    assert v["runtime"] == str(tmp_path / "repo" / "image_to_mesh" / "runtime")
    # By default the built-in backend runs in Blender's own Python with the wheels Blender
    # installed from the zip; Pixal3D has no interpreter until one is set (no Pixal3D folder).
    site = str(tmp_path / "user" / "extensions" / ".local" / "lib" / "python3.11" / "site-packages")
    py, extra, why = v["interpreters"]["builtin"]
    assert (py, extra) == (v["sys_executable"], [site]) and "Blender's own Python" in why
    assert {"scipy", "trimesh", "PIL", "psutil", "matplotlib"} <= set(v["wheel_site_entries"])
    assert "needs a Python with PyTorch" in v["interpreters"]["pixal3d"]
    # Output defaults to a folder uninstalling never deletes: ~/Image to Mesh (no Documents).
    assert v["output_dir"] == str(tmp_path / "home" / "Image to Mesh")
    assert not v["torch_in_blender"] and not v["runner_in_blender"]
    # one region (the sidebar) per 3D View is redrawn, out of the several each View has
    assert v["view3d_areas"] >= 1 and v["redraw_tagged"] == v["view3d_areas"]
    assert all(n > 1 for n in v["regions_per_view3d"]), v["regions_per_view3d"]
    assert v["disable_result"] == ["FINISHED"]
    assert v["after_disable"] == {"enabled": False, "panel": False, "ops": [],
                                  "scene_settings": False}


@pytest.mark.slow
def test_generate_imports_one_textured_object_at_the_cursor(built_zip, tmp_path, shared_images):
    img = image(shared_images, "typical_humanoid_dwarf")
    v = scenario("generate", built_zip, tmp_path, img)
    assert v["result"] == ["FINISHED"] and v["timer_registered"] and v["running_after_start"]
    assert v["finished"], v["final"]
    assert v["final"]["status"] == "done", v["final"]
    # The panel went through the stages in order and the bar only moved forward.
    assert v["seen"]["statuses"][-2:] == ["importing", "done"]
    assert "running" in v["seen"]["statuses"]
    rows = v["seen"]["rows"]
    assert rows[-1] == ["done"] * 4
    assert ["done", "running", "pending", "pending"] in rows
    assert v["seen"]["progress"] == sorted(v["seen"]["progress"])
    assert v["seen"]["progress"][-1] == 1.0
    assert v["seen"]["memory_texts"] > 0
    # One new object, named after the image, in "Image to Mesh", at the cursor, textured.
    assert len(v["new_objects"]) == 1, v["new_objects"]
    obj = v["new_objects"][0]
    assert obj["name"] == "typical_humanoid_dwarf" and obj["type"] == "MESH"
    assert obj["collections"] == ["Image to Mesh"] and obj["parent"] is None
    assert obj["location"] == pytest.approx(v["cursor"], abs=1e-5)
    assert obj["base_color_image_size"] == [512, 512]
    assert obj["base_color_image_packed"]
    assert obj["vertices"] > 1000
    props = obj["props"]
    assert props["image_to_mesh_backend"] == "builtin"
    assert props["image_to_mesh_seed"] == 7
    assert props["image_to_mesh_peak_footprint"] > 10 * 2**20
    assert props["image_to_mesh_trace"] == str(tmp_path / "out"
                                               / "typical_humanoid_dwarf.trace.jsonl")
    assert Path(props["image_to_mesh_trace"]).stat().st_size > 0
    assert v["output_files"] == ["typical_humanoid_dwarf.glb", "typical_humanoid_dwarf.trace.jsonl"]
    assert v["children_alive"] == []
    # The memory chart was plotted by the runner's interpreter and loaded into Blender.
    assert v["chart_result"] == ["FINISHED"] and v["chart_loaded"]
    assert Path(v["chart_png"]).stat().st_size > 1000
    assert v["second_output_free"].endswith("typical_humanoid_dwarf_2.glb")
    # The second Generate's object is named like its file, so the two can be matched.
    assert v["second_result"] == ["FINISHED"] and v["second_finished"]
    assert [o["name"] for o in v["second_objects"]] == ["typical_humanoid_dwarf_2"]
    second = v["second_objects"][0]
    assert second["location"] == pytest.approx(v["cursor"], abs=1e-5)
    assert second["props"]["image_to_mesh_trace"] == str(
        tmp_path / "out" / "typical_humanoid_dwarf_2.trace.jsonl")
    assert "typical_humanoid_dwarf_2.glb" in v["second_output_files"]
    # Check says which interpreter each backend uses and why, and what it can run.
    report = v["check_report"].splitlines()
    assert report[0] == f"builtin: runs with {PY} (Blender's own Python with the extension's " \
                        "bundled wheels)", report
    assert report[1].startswith("  Python 3.") and report[2] == "  builtin: ready", report
    assert report[3].startswith("pixal3d: not available — The Pixal3D backend needs a Python "
                                "with PyTorch"), report


def test_zero_setup_generate_with_only_bpy_installed(built_zip, tmp_path, shared_images):
    """The zero-setup check: a virtual environment holding only bpy (5.x) — no torch,
    SciPy, trimesh, Pillow or psutil — installs the zip with Blender's own installer and
    Generate with every preference at its default imports a textured object; no process is
    left."""
    bare = bpy5_python()
    for module in ("torch", "scipy", "trimesh", "PIL", "psutil", "matplotlib"):
        probe = subprocess.run([str(bare), "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} is importable in {bare}: not a bare venv"
    img = image(shared_images, "typical_humanoid_dwarf")
    v = scenario("zero_setup", built_zip, tmp_path, img, python=bare, timeout=300,
                 fresh_install=True)
    assert v["install_result"] == ["FINISHED"] and v["enabled"], v
    assert v["preflight"] == "" and v["result"] == ["FINISHED"], v
    assert v["argv0"] == v["sys_executable"] == str(bare)  # Blender's own Python
    site = str(tmp_path / "user" / "extensions" / ".local" / "lib" / "python3.11" / "site-packages")
    runtime = str(tmp_path / "repo" / "image_to_mesh" / "runtime")
    assert v["env_pythonpath"] == os.pathsep.join([runtime, site])  # nothing inherited
    assert v["finished"] and v["final"]["status"] == "done", v["final"]
    assert [o["name"] for o in v["new_objects"]] == ["typical_humanoid_dwarf"]
    obj = v["new_objects"][0]
    assert obj["base_color_image_size"] == [512, 512] and obj["base_color_image_packed"]
    assert obj["vertices"] > 1000
    assert v["output"] == str(tmp_path / "home" / "Image to Mesh" / "typical_humanoid_dwarf.glb")
    assert v["children_alive"] == []
    assert not v["torch_in_blender"]


def test_undo_removes_only_the_import_and_redo_brings_it_back(built_zip, tmp_path,
                                                              shared_images, bpy_python):
    v = scenario("undo", built_zip, tmp_path, image(shared_images, "typical_humanoid_dwarf"),
                 python=bpy_python)
    assert v["finished"] and v["result"] == ["FINISHED"]
    name = "typical_humanoid_dwarf"
    assert "UserThing" in v["before"] and name not in v["before"]
    assert set(v["after_import"]) == set(v["before"]) | {name}
    # textures and materials are named after the image, not Image_0 / Material_0
    assert v["materials"] == [name] and v["texture_name"] == f"{name}_base_color"
    # one Ctrl+Z: the mesh goes, the user's previous action stays
    assert v["undo"] == ["FINISHED"] and v["after_undo"] == v["before"]
    # redo: the mesh is back, textured, where it was
    assert v["redo"] == ["FINISHED"] and v["after_redo"] == v["after_import"]
    assert v["redone"]["base_color_image_size"] == [512, 512]
    assert v["redone"]["location"] == v["imported"]["location"]
    assert v["undo_again"] == ["FINISHED"] and v["after_undo_again"] == v["before"]
    # the completion notice went through an operator report (status bar and Info log; stdout
    # in background mode), not only into the sidebar
    assert f"Info: Image to Mesh: {name} imported (" in v["_stdout"]


def test_results_survive_uninstalling_the_extension(built_zip, tmp_path, shared_images):
    v = scenario("uninstall", built_zip, tmp_path, image(shared_images, "typical_humanoid_dwarf"))
    assert "deletes when the extension is uninstalled" in v["inside_user_dir"]
    assert v["finished"] and v["result"] == ["FINISHED"]
    out = tmp_path / "home" / "Image to Mesh" / "typical_humanoid_dwarf.glb"
    assert v["output"] == str(out)
    assert v["uninstall"] == ["FINISHED"] and not v["installed_after"]
    assert not v["user_dir_after"]  # Blender did delete the extension's user folder …
    assert out.stat().st_size > 1000 and Path(v["trace"]).stat().st_size > 0  # … not results
    assert v["children_alive"] == []


def test_headless_inside_blender_needs_nothing_installed(built_zip, tmp_path, shared_images):
    """``blender -b -P <extension>/headless.py -- IMAGE --glb … --blend …`` without --python,
    in the venv holding only bpy: the runner runs in Blender's own Python with the wheels."""
    img = image(shared_images, "typical_humanoid_goblin")
    v = scenario("headless_inside", built_zip, tmp_path, img, python=bpy5_python(), timeout=300)
    assert v["code"] == 0, v["_stdout"][-3000:]
    assert v["glb_bytes"] > 10_000 and v["blend_bytes"] > 10_000
    assert v["meshes"] == ["typical_humanoid_goblin"]
    assert v["children_alive"] == []


def test_installed_headless_run_by_a_bpy_only_python_uses_the_bundled_wheels(built_zip, tmp_path,
                                                                            shared_images):
    """``python <installed extension>/headless.py IMAGE --glb …`` with the venv holding only bpy
    (no Pillow, psutil …), bpy not imported before the script: the runner runs with that Python
    and the wheels Blender installed, as the panel does — not exit 34 asking for `pip install
    -e`, and no warning about the runner's hello."""
    v = scenario("install_only", built_zip, tmp_path, python=bpy5_python(), timeout=300)
    assert v["enabled"], v
    env = dict(os.environ, BLENDER_USER_RESOURCES=str(tmp_path / "user"),
               HOME=str(tmp_path / "home"))
    script = tmp_path / "repo" / "image_to_mesh" / "headless.py"
    glb = tmp_path / "out" / "h.glb"
    glb.parent.mkdir()
    proc = subprocess.run([str(bpy5_python()), str(script), image(shared_images,
                           "typical_humanoid_goblin"), "--glb", str(glb), "--texture-size", "512"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert glb.stat().st_size > 10_000
    assert "warning" not in proc.stderr and "pip install" not in proc.stderr, proc.stderr[-3000:]


def test_cancel_mid_run_leaves_nothing(built_zip, tmp_path, shared_images, bpy_python):
    v = scenario("cancel", built_zip, tmp_path, image(shared_images, "typical_humanoid_goblin"),
                 python=bpy_python)
    assert v["status_at_cancel"] == "running" and v["stage_at_cancel"] is not None, v
    # While running, Generate has become Cancel (and batch cannot start).
    assert "image_to_mesh.cancel" in v["buttons_while_running"]
    assert "image_to_mesh.generate" not in v["buttons_while_running"]
    assert v["processes_before_cancel"] >= 2  # supervisor and worker
    assert v["ui_blocked_s"] < 0.5  # Cancel does not freeze Blender
    assert v["finished"]
    assert v["alive_2s_after_cancel"] == []
    assert v["status"] == "cancelled" and v["headline"] == "Cancelled"
    assert v["new_objects"] == []
    assert not (tmp_path / "out" / "typical_humanoid_goblin.glb").exists()


@pytest.mark.slow
def test_batch_continues_past_a_corrupt_file(built_zip, tmp_path, shared_images):
    stems = ["typical_humanoid_goblin", "typical_humanoid_dwarf", "goblin_on_white"]
    folder = batch_folder(tmp_path, shared_images, stems)
    # A non-ASCII name with spaces travels through the command line, the GLB and the import.
    (folder / "goblin_on_white.jpg").rename(folder / "gobelin sur blanc é.jpg")
    stems[2] = "gobelin sur blanc é"
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(2000))
    v = scenario("batch", built_zip, tmp_path, str(folder), timeout=300)
    assert v["result"] == ["FINISHED"] and v["finished"]
    assert v["progress_text"] == "4 / 4"
    assert [i[1] for i in v["items"]] == ["failed", "done", "done", "done"], v["items"]
    assert sorted(o["name"] for o in v["new_objects"]) == sorted(stems)
    assert all(o["collections"] == ["Batch batch"] for o in v["new_objects"])
    assert all(o["base_color_image_size"] == [512, 512] for o in v["new_objects"])
    # The failed first image (broken.png) takes no place: the first result is at the cursor,
    # the others 1.5 m apart along X, in run order.
    cx, cy, cz = v["cursor"]
    by_x = sorted(v["new_objects"], key=lambda o: o["location"][0])
    assert [o["name"] for o in by_x] == sorted(stems, key=str.lower)
    assert [o["location"] for o in by_x] == [pytest.approx([cx + 1.5 * i, cy, cz], abs=1e-5)
                                             for i in range(3)]
    assert v["root_children"] == ["Batch batch"]
    assert v["summary"].startswith("Batch: 3 of 4 done, 1 failed: broken.png (")
    assert "not_an_image" in v["summary"] or "image_truncated" in v["summary"]
    # the job box is headed by the batch's outcome, not by its last image's ("Done")
    assert v["panel_labels"][0] == "Done with failures: 3 of 4 done, 1 failed", v["panel_labels"]
    # the last image's rows are over with its batch_item (a batch sends no result event)
    assert v["last_rows"] and all(status == "done" for _, status in v["last_rows"]), \
        v["last_rows"]
    assert v["children_alive"] == []


@pytest.mark.slow
def test_batch_cancel_then_resume_skips_what_was_done(built_zip, tmp_path, shared_images):
    stems = ["typical_humanoid_dwarf", "typical_humanoid_goblin", "typical_humanoid_mech"]
    folder = batch_folder(tmp_path, shared_images, stems)
    v = scenario("batch_resume", built_zip, tmp_path, str(folder), timeout=400)
    assert v["first"] == ["FINISHED"] and v["first_finished"]
    first = [name for name, status in v["first_items"] if status == "done"]
    assert len(first) == 1 and v["first_items"][-1][1] in ("done", "cancelled"), v["first_items"]
    assert "cancelled" in v["first_summary"] and "Run Batch again" in v["first_summary"]
    assert list(v["after_first"]) == [Path(first[0]).stem]
    assert v["after_first"][Path(first[0]).stem] == pytest.approx([0, 0, 0])
    # The second run resumes through the runner's manifest: the finished image is skipped
    # (not redone), the others run, and their objects are placed after the existing one.
    assert v["second"] == ["FINISHED"] and v["second_finished"]
    statuses = dict(v["second_items"])
    assert statuses[first[0]] == "skipped" and sorted(statuses.values()).count("done") == 2
    assert "1 skipped (done by an earlier run)" in v["second_summary"]
    assert sorted(v["after_second"]) == sorted(stems)  # three objects, none twice
    xs = sorted(loc[0] for loc in v["after_second"].values())
    assert xs == pytest.approx([0.0, 1.5, 3.0])  # side by side, never on top of each other
    assert v["after_second"][Path(first[0]).stem] == pytest.approx([0, 0, 0])
    assert sorted(v["outputs"]) == sorted(f"{s}.glb" for s in stems)
    # run again with everything done and in the scene: every image skipped, and the panel
    # says the batch is done — not "starting…" at 0 % with nothing running
    assert v["third"] == ["FINISHED"] and v["third_finished"]
    assert sorted(status for _, status in v["third_items"]) == ["skipped"] * 3
    assert v["third_view"] == {"status": "done", "headline": "Done: 0 of 3 done, 3 skipped",
                               "progress": 1.0, "progress_text": "done"}, v["third_view"]
    assert all(status == "done" for _, status in v["second_rows"]), v["second_rows"]
    assert v["children_alive"] == []


@pytest.mark.slow
def test_output_folder_is_absolute_and_never_inside_the_addon(built_zip, tmp_path, shared_images):
    img = image(shared_images, "typical_humanoid_dwarf")
    v = scenario("output_dir", built_zip, tmp_path, img)
    addon_out = str(tmp_path / "repo" / "image_to_mesh" / "out")
    for text, words in [("relative_out", ["relative path", "absolute folder"]),
                        ("//out", ["not saved yet", "Save the .blend first"]),
                        (addon_out, ["inside the add-on's own folder"])]:
        case = v[text]
        assert case["result"][0].startswith("CANCELLED"), case
        assert not case["job"] and case["children"] == 0, case
        for w in words:
            assert w in case["preflight"] and w in case["panel_error"], (text, case)
    # Nothing made in Blender's working folder or in the extension's folder.
    assert "relative_out" not in v["cwd_entries"] and "out" not in v["cwd_entries"]
    assert v["addon_entries"] == []
    folder = v["folder_image"]
    assert folder["panel_error"] == f"Input image {tmp_path} is a folder; choose an image file."
    # "//renders" in a saved file: an absolute folder next to it, where the runner writes.
    renders = tmp_path / "scenes" / "renders"
    assert v["saved_resolved"] == str(renders)
    assert v["saved"]["result"] == ["FINISHED"] and v["saved"]["preflight"] == ""
    assert v["saved_argv_output"] == str(renders / "typical_humanoid_dwarf.glb")
    assert v["saved_finished"] and v["saved_status"] == "done"
    assert v["renders"] == ["typical_humanoid_dwarf.glb", "typical_humanoid_dwarf.trace.jsonl"]


def test_wrong_interpreter_is_reported_and_nothing_spawns(built_zip, tmp_path, shared_images):
    v = scenario("bad_interpreter", built_zip, tmp_path,
                 image(shared_images, "typical_humanoid_dwarf"))
    bad = str(tmp_path / "no-such-venv" / "bin" / "python")
    assert v["preflight"].startswith(f"Runner Python not found: {bad}")
    assert v["result"] == ["CANCELLED"]
    assert v["panel_error"] == v["preflight"] and v["status"] == "failed"
    assert "venv/bin/python" in v["panel_error"]  # says what to set it to
    assert v["children"] == [] and not v["job"] and not v["timer_registered"]
    assert v["check_report"].startswith("ERROR: Runner Python not found")


def test_disabling_the_addon_stops_the_runner(built_zip, tmp_path, shared_images):
    v = scenario("disable_while_running", built_zip, tmp_path,
                 image(shared_images, "typical_humanoid_dwarf"))
    assert v["processes_before"] >= 2
    assert v["disable_result"] == ["FINISHED"]
    assert v["alive_after"] == [] and not v["timer_registered"]


def test_quitting_blender_stops_the_runner(built_zip, tmp_path, shared_images):
    v = scenario("quit_while_running", built_zip, tmp_path,
                 image(shared_images, "typical_humanoid_dwarf"))
    assert len(v["tree"]) >= 2
    end = time.monotonic() + 2.0
    while time.monotonic() < end and any(psutil.pid_exists(p) for p in v["tree"]):
        time.sleep(0.05)
    left = []
    for pid in v["tree"]:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    assert left == []


def test_panel_and_preferences_draw_every_state(built_zip, tmp_path):
    """The panel's draw() in each state, on a recording stand-in for UILayout (a real UILayout
    exists only while Blender's UI draws; background mode has none). Every property, operator
    and icon it asks for is checked against the real RNA inside the scenario."""
    fixture = HERE / "fixtures" / "builtin_goblin_512.ndjson"
    v = scenario("draw", built_zip, tmp_path, str(fixture))
    draws = v["draws"]
    bad = [(k, e) for k, log in draws.items() for e in log if e[0].startswith("BAD_")]
    assert bad == []

    def ops(state):
        return [e[1] for e in draws[state] if e[0] == "operator"]

    def labels(state):
        return [e[1] for e in draws[state] if e[0] == "label"]

    assert ops("idle") == ["image_to_mesh.generate", "image_to_mesh.open_chart",
                           "image_to_mesh.batch"]
    assert not [e for e in draws["idle"] if e[0] == "progress"]
    events = [json.loads(x) for x in fixture.read_text().splitlines()]
    last_mem = [e for e in events if e["event"] == "memory"][-1]
    # Mid-way through the last stage (3 of 4 done + half of the 4th).
    assert ["progress", 0.875, "export (4/4) 50 %"] in draws["running"]
    assert "Running: export" in labels("running")
    assert (f"footprint {human_bytes(last_mem['footprint'])} · peak {human_bytes(last_mem['peak'])}"
            f" · export peak {human_bytes(last_mem['stage_peak'])}") in labels("running")
    # export's sub-steps, indented under its row, the last one running
    sub = draws["substeps"]
    at = sub.index(["label", "export"])
    assert sub[at + 2:at + 7] == [["separator", 2.0], ["label", "fill_holes"], ["label", "1.0 s"],
                                  ["separator", 2.0], ["label", "bake"]]  # bake: still running
    assert not [e for e in draws["running"] if e[0] == "separator"]
    assert ["progress", 1.0, "done"] in draws["done"]
    assert any("in 4.4 s, peak 360.5 MiB" in label for label in labels("done")), labels("done")
    assert "Batch: 3 of 4 done, 1 failed: broken.png" in labels("done")
    assert "The runner speaks protocol version 99; this" in labels("newer_protocol")
    # Pixal3D-mac advises against 1536_cascade on a Mac: the choice says so, and so does the
    # panel when it is chosen
    assert v["pipeline_items"] == {"1024_cascade": "1024_cascade",
                                   "1536_cascade": "1536_cascade (not recommended on Mac)"}
    assert any(x.startswith("1536_cascade is not recommended on a")
               for x in labels("pixal3d_1536"))
    assert not any("not recommended" in x for x in labels("idle"))
    # the Export sub-panel: a closed child of the panel, for Pixal3D only; its settings reach
    # the runner's command line (one left at its default, --export-process, is not passed)
    assert v["export_parent"] == "VIEW3D_PT_image_to_mesh" and v["export_closed"]
    assert v["export_poll"] == {"pixal3d": True, "builtin": False}
    # it shows the levers of the chosen export engine (the options table's ``engines``)
    assert [e[1] for e in draws["export_bounded"] if e[0] == "prop"] == [
        "export_engine", "texture_size", "export_budget", "keep_asset", "decimation_target"]
    assert [e[1] for e in draws["export_port"] if e[0] == "prop"] == [
        "export_engine", "texture_size", "export_process", "export_profile", "keep_asset",
        "decimation_target", "remesh", "remesh_resolution", "allow_dense_grid_sample",
        "strict_export"]
    argv = v["export_argv"]["port"]
    for flag, value in (("--export-profile", "fit"), ("--decimation-target", "250000"),
                        ("--remesh", "off"), ("--export-engine", "port"),
                        ("--remesh-resolution", "512")):
        assert argv[argv.index(flag) + 1] == value
    assert "--allow-dense-grid-sample" in argv and "--export-process" not in argv
    assert "--strict-export" in argv
    # the port's levers left set are not passed to the bounded engine (which refuses them)
    bounded = v["export_argv"]["bounded"]
    assert bounded[bounded.index("--decimation-target") + 1] == "250000"
    assert not {"--export-profile", "--remesh", "--remesh-resolution", "--export-engine",
                "--allow-dense-grid-sample", "--strict-export"} & set(bounded), bounded
    assert labels("bad_python")[0] == "Runner Python not found: /no/such/python."
    assert [e[1] for e in draws["preferences"] if e[0] == "prop"] == [
        "python", "check_deep", "pixal3d_dir", "output_dir", "cluster", "cluster_token_file",
        "wait_free_percent", "kill_free_percent", "swap_budget_gb", "start_timeout", "busy",
        "quiet_for"]
    # the cluster address and its token file (preferences) are offered in the Batch box, where
    # a batch is chosen
    assert ["prop", "cluster"] in draws["idle"] and ["prop", "cluster_token_file"] in draws["idle"]
    assert "builtin: ready" in labels("preferences")


def test_importer_joins_parts_drops_helper_nodes_and_keeps_placement(built_zip, tmp_path):
    v = scenario("importer", built_zip, tmp_path)
    assert v["new"] == [["parts", "MESH"]]  # two meshes joined, the helper node's empty gone
    assert v["vertex_count"] == v["expected_vertices"]
    assert v["location"] == [2.0, 3.0, 4.0]
    # Both parts sat 1 m up (glTF +Y) under the helper; joined and moved to the cursor they
    # span the 0.2 m of the box/ball around z = 4 m.
    assert v["z_min"] == pytest.approx(3.9, abs=1e-4) and v["z_max"] == pytest.approx(4.1, abs=1e-4)
    assert v["image_size"] == [64, 32]
    assert v["peak_prop"] == 5e9
    assert v["missing_error"].startswith("The runner's GLB is missing: ")
    assert v["second"] == ["parts_2", "parts_2"]  # not parts.001
    assert v["second_materials"] and all(m.startswith("parts_2") and "." not in m
                                         for m in v["second_materials"]), v["second_materials"]
