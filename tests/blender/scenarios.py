"""Blender scenarios for tests/blender/test_addon.py, one per fresh process (bpy can be
imported only once per process).

Usage: ``python scenarios.py NAME ZIP WORKDIR [ARGS…]``. Each scenario installs the built zip
through Blender's own extension install operator into a temporary repository (the process runs
with ``BLENDER_USER_RESOURCES`` pointing into WORKDIR, so the user's Blender config is never
touched), does its work with the real runner, and prints one line ``VERDICT {json}`` last.
Facts are measured here; the assertions live in the test module.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import bpy

try:  # the zero-setup scenarios run in a virtual environment that holds only bpy
    import psutil
except ImportError:
    psutil = None

REPO_MODULE = "test_repo"
PKG = f"bl_ext.{REPO_MODULE}.image_to_mesh"


def verdict(**facts) -> None:
    print("VERDICT " + json.dumps(facts, default=str), flush=True)


def install(zip_path: str, work: Path) -> dict:
    """Create a local repository in ``work/repo`` and install + enable the zip into it."""
    prefs = bpy.context.preferences
    prefs.use_preferences_save = False
    prefs.extensions.repos.new(name="Test Repo", module=REPO_MODULE,
                               custom_directory=str(work / "repo"), source="USER")
    result = bpy.ops.extensions.package_install_files(filepath=zip_path, repo=REPO_MODULE,
                                                      enable_on_install=True)
    return {"install_result": sorted(result), "enabled": PKG in prefs.addons.keys()}


def mod(name: str):
    return sys.modules[f"{PKG}.{name}"]


def addon_prefs():
    return bpy.context.preferences.addons[PKG].preferences


def _proc_children() -> dict[int, list[int]]:
    """ppid → pids of live (non-zombie) processes, from /proc (Linux; used without psutil)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def descendant_pids() -> list[int]:
    """Live (non-zombie) descendants of this process: psutil when installed, else /proc."""
    if psutil is not None:
        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        return out
    kids, todo, out = _proc_children(), [os.getpid()], []
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pids: list[int]) -> list[int]:
    """The pids of ``pids`` still running (zombies count as gone): psutil, else /proc."""
    out = []
    for pid in pids:
        if psutil is not None:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.NoSuchProcess:
                pass
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2:].split()[0] != "Z":
            out.append(pid)
    return out


def settings(image: str, texture: str = "512", seed: int = 7):
    s = bpy.context.scene.image_to_mesh
    s.image, s.texture_size, s.seed, s.backend = image, texture, seed, "builtin"
    return s


def drive(timeout: float, on_tick=None) -> bool:
    """Call the registered timer callback like Blender's event loop would, until it stops."""
    tick = mod("ui.controller").tick
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not bpy.app.timers.is_registered(tick):
            return True
        if on_tick:
            on_tick()
        if tick() is None:
            bpy.app.timers.unregister(tick)
            return True
        time.sleep(0.05)
    return False


def object_facts(obj) -> dict:
    imp = mod("ui.importer")
    img = imp.base_color_image(obj)
    return {
        "name": obj.name, "type": obj.type,
        "collections": [c.name for c in obj.users_collection],
        "location": list(obj.location),
        "parent": obj.parent.name if obj.parent else None,
        "base_color_image_size": list(img.size) if img else None,
        "base_color_image_packed": bool(img and img.packed_file),
        "props": {k: obj[k] for k in obj.keys() if k.startswith("image_to_mesh_")},
        "vertices": len(obj.data.vertices) if obj.type == "MESH" else 0,
    }


# --------------------------------------------------------------------------- scenarios
def sc_register(zip_path, work):
    facts = install(zip_path, work)
    ops = ["generate", "cancel", "batch", "reexport", "open_chart", "check"]
    facts["ops"] = {o: _op_registered(o) for o in ops}
    facts["panel"] = hasattr(bpy.types, "VIEW3D_PT_image_to_mesh")
    facts["prefs_type"] = type(addon_prefs()).__name__
    facts["token_file_subtype"] = addon_prefs().bl_rna.properties["cluster_token_file"].subtype
    facts["scene_settings"] = hasattr(bpy.context.scene, "image_to_mesh")
    facts["installed_files"] = sorted(os.listdir(work / "repo" / "image_to_mesh"))
    facts["runtime"] = str(mod("runner_client.config").runtime_dir())
    facts["interpreters"] = {b: [i.python, list(i.extra_path), i.why]
                             if not isinstance(i, str) else i
                             for b, i in mod("ui.preferences").check_plan(addon_prefs())}
    facts["sys_executable"] = sys.executable
    site = mod("ui.preferences").wheel_site_packages()
    facts["wheel_site_entries"] = sorted(os.listdir(site)) if site else None
    facts["output_dir"] = str(mod("ui.preferences").output_dir(addon_prefs()))
    # The timer's redraw tags only the sidebar (UI) region of each 3D View (real screen data:
    # the bpy module keeps the factory window, though it never draws it).
    areas = [a for w in bpy.context.window_manager.windows for a in w.screen.areas]
    facts["redraw_tagged"] = mod("ui.controller")._redraw()
    facts["view3d_areas"] = sum(a.type == "VIEW_3D" for a in areas)
    facts["regions_per_view3d"] = [len(a.regions) for a in areas if a.type == "VIEW_3D"]
    facts["torch_in_blender"] = "torch" in sys.modules
    facts["runner_in_blender"] = any(m == "runner" or m.startswith(("runner.", "stageload"))
                                     for m in sys.modules)
    result = bpy.ops.preferences.addon_disable(module=PKG)
    facts["disable_result"] = sorted(result)
    facts["after_disable"] = {
        "enabled": PKG in bpy.context.preferences.addons.keys(),
        "panel": hasattr(bpy.types, "VIEW3D_PT_image_to_mesh"),
        "ops": [o for o in ops if _op_registered(o)],
        "scene_settings": hasattr(bpy.types.Scene, "image_to_mesh"),
    }
    verdict(**facts)


def _op_registered(name: str) -> bool:
    try:
        getattr(bpy.ops.image_to_mesh, name).get_rna_type()
        return True
    except (KeyError, AttributeError):
        return False


def sc_generate(zip_path, work, image):
    facts = install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    # addon_prefs().python stays empty: the default interpreter must be found by itself.
    settings(image, texture="512", seed=7)
    cursor = (1.5, -2.0, 0.75)
    bpy.context.scene.cursor.location = cursor
    before = set(o.name for o in bpy.data.objects)
    result = bpy.ops.image_to_mesh.generate()
    ctl = mod("ui.controller")
    facts["result"] = sorted(result)
    facts["timer_registered"] = bpy.app.timers.is_registered(ctl.tick)
    facts["running_after_start"] = ctl.CONTROLLER.running
    # Record what the panel would show after every event, and every status the job takes
    # (JobState.history, appended where the status changes) — transitions, not samples of a
    # timer, so a fast step (importing) cannot be missed under load.
    seen = {"statuses": [], "progress": [], "rows": [], "memory_texts": 0}
    state = ctl.CONTROLLER.state
    apply = state.apply

    def recording_apply(ev):
        apply(ev)
        v = state.view()
        if not seen["progress"] or seen["progress"][-1] != v.progress:
            seen["progress"].append(v.progress)
        rows = [r[1] for r in v.stage_rows]
        if not seen["rows"] or seen["rows"][-1] != rows:
            seen["rows"].append(rows)
        seen["memory_texts"] += bool(v.memory_text)

    state.apply = recording_apply
    facts["finished"] = drive(120)
    del state.apply
    seen["statuses"] = list(state.history)
    seen["progress"].append(state.view().progress)
    view = ctl.CONTROLLER.state.view()
    facts["final"] = {"status": view.status, "error": view.error_text, "hint": view.hint_text,
                      "result_text": view.result_text, "progress": view.progress}
    facts["seen"] = seen
    new = [o for o in bpy.data.objects if o.name not in before]
    facts["new_objects"] = [object_facts(o) for o in new]
    facts["cursor"] = list(cursor)
    facts["output_files"] = sorted(p.name for p in (work / "out").iterdir())
    facts["children_alive"] = descendant_pids()
    # The memory chart of the last run.
    chart = bpy.ops.image_to_mesh.open_chart()
    facts["chart_result"] = sorted(chart)
    png = mod("ui.operators").chart_path(ctl.CONTROLLER.last_trace)
    facts["chart_png"] = str(png)
    facts["chart_loaded"] = any(Path(bpy.path.abspath(i.filepath)) == png
                                for i in bpy.data.images)
    # The preferences' Check button, answered by the real `runner check`.
    bpy.ops.image_to_mesh.check()
    prefs_mod = mod("ui.preferences")
    end = time.monotonic() + 120
    while time.monotonic() < end and prefs_mod.check_poll() is not None:
        time.sleep(0.1)
    facts["check_report"] = addon_prefs().check_report
    # A second Generate never overwrites the first result.
    facts["second_output_free"] = str(mod("runner_client.config").free_output_paths(work / "out",
                                                                      Path(image).stem)[0])
    # ... and its object is named like its file (…_2), at the cursor like the first.
    before = set(o.name for o in bpy.data.objects)
    facts["second_result"] = sorted(bpy.ops.image_to_mesh.generate())
    facts["second_finished"] = drive(120)
    facts["second_objects"] = [object_facts(o) for o in bpy.data.objects if o.name not in before]
    facts["second_output_files"] = sorted(p.name for p in (work / "out").iterdir())
    verdict(**facts)


def sc_zero_setup(zip_path, work, image):
    """Install the zip and press Generate with every preference at its default, in whatever
    interpreter runs this (the test uses a virtual environment holding only bpy)."""
    facts = install(zip_path, work)
    before_import = {m: m in sys.modules for m in ("scipy", "trimesh", "PIL", "psutil", "torch")}
    settings(image, texture="512", seed=3)
    before = set(o.name for o in bpy.data.objects)
    facts["preflight"] = mod("ui.preferences").preflight_error(bpy.context)
    facts["result"] = sorted(bpy.ops.image_to_mesh.generate())
    ctl = mod("ui.controller")
    facts["argv0"] = ctl.CONTROLLER.job.argv[0] if ctl.CONTROLLER.job else None
    facts["env_pythonpath"] = (ctl.CONTROLLER.job.env.get("PYTHONPATH")
                               if ctl.CONTROLLER.job else None)
    facts["finished"] = drive(180)
    view = ctl.CONTROLLER.state.view()
    facts["final"] = {"status": view.status, "error": view.error_text, "hint": view.hint_text}
    facts["new_objects"] = [object_facts(o) for o in bpy.data.objects if o.name not in before]
    facts["output"] = ctl.CONTROLLER.state.output
    facts["children_alive"] = descendant_pids()
    facts["blender_modules_before"] = before_import
    facts["torch_in_blender"] = "torch" in sys.modules
    facts["sys_executable"] = sys.executable
    verdict(**facts)


def _names() -> list[str]:
    return sorted(o.name for o in bpy.data.objects)


def sc_undo(zip_path, work, image):
    """Undo and redo around Generate: one Ctrl+Z removes exactly the imported mesh (not the
    user's previous action), redo brings it back with its texture."""
    facts = install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    settings(image, texture="512")
    thing = bpy.data.objects.new("UserThing", None)  # the user's previous action …
    bpy.context.scene.collection.objects.link(thing)
    bpy.ops.ed.undo_push(message="user adds UserThing")  # … as Blender records it
    facts["before"] = _names()
    facts["result"] = sorted(bpy.ops.image_to_mesh.generate())
    facts["finished"] = drive(120)
    facts["after_import"] = _names()
    name = mod("ui.controller").CONTROLLER.last_object
    obj = bpy.data.objects[name]
    facts["imported"] = object_facts(obj)
    facts["materials"] = [s.material.name for s in obj.material_slots if s.material]
    img = mod("ui.importer").base_color_image(obj)
    facts["texture_name"] = img.name if img else None
    facts["undo"] = sorted(bpy.ops.ed.undo())
    facts["after_undo"] = _names()
    facts["redo"] = sorted(bpy.ops.ed.redo())
    facts["after_redo"] = _names()
    redone = bpy.data.objects.get(name)
    facts["redone"] = object_facts(redone) if redone else None
    facts["undo_again"] = sorted(bpy.ops.ed.undo())
    facts["after_undo_again"] = _names()
    verdict(**facts)


def sc_uninstall(zip_path, work, image):
    """Results in the default output folder survive uninstalling the extension; an output
    folder inside the extension's user folder (deleted on uninstall) is refused."""
    facts = install(zip_path, work)
    settings(image, texture="512")
    user_dir = bpy.utils.extension_path_user(PKG, create=True)
    addon_prefs().output_dir = os.path.join(user_dir, "output")
    facts["inside_user_dir"] = mod("ui.preferences").preflight_error(bpy.context)
    addon_prefs().output_dir = ""  # the default
    facts["result"] = sorted(bpy.ops.image_to_mesh.generate())
    facts["finished"] = drive(120)
    ctl = mod("ui.controller").CONTROLLER
    facts["output"], facts["trace"] = ctl.state.output, ctl.state.trace
    facts["extension_user_dir"] = user_dir
    facts["uninstall"] = sorted(bpy.ops.extensions.package_uninstall(
        repo_directory=str(work / "repo"), pkg_id="image_to_mesh"))
    facts["installed_after"] = os.path.exists(work / "repo" / "image_to_mesh")
    facts["user_dir_after"] = os.path.exists(user_dir)
    facts["children_alive"] = descendant_pids()
    verdict(**facts)


def sc_headless_inside(zip_path, work, image):
    """The installed extension's headless.py run inside Blender (what ``blender -b -P
    …/headless.py -- IMAGE …`` does: bpy already imported) with no --python: the built-in
    backend must run in Blender's own Python with the wheels Blender installed."""
    import importlib.util

    facts = install(zip_path, work)
    script = work / "repo" / "image_to_mesh" / "headless.py"
    spec = importlib.util.spec_from_file_location("image_to_mesh_headless", script)
    headless = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(headless)
    glb, blend = work / "out" / "h.glb", work / "out" / "h.blend"
    glb.parent.mkdir()
    facts["code"] = headless.main([image, "--glb", str(glb), "--blend", str(blend),
                                   "--texture-size", "512"])
    facts["glb_bytes"] = glb.stat().st_size if glb.exists() else 0
    facts["blend_bytes"] = blend.stat().st_size if blend.exists() else 0
    facts["meshes"] = [o.name for o in bpy.data.objects if o.type == "MESH"]
    facts["children_alive"] = descendant_pids()
    verdict(**facts)


def sc_install_only(zip_path, work):
    """Install the zip with Blender's own installer (its wheels go to the user extensions
    folder's .local site-packages) and stop: a later process runs the installed script."""
    verdict(**install(zip_path, work))


def sc_output_dir(zip_path, work, image):
    """Output folder preferences that are relative, ``//`` in an unsaved file, or inside the
    add-on are refused before anything spawns; ``//`` in a saved file becomes an absolute folder
    next to it, where the runner writes. Also: an image path that is a folder."""
    facts = install(zip_path, work)
    ctl, prefs = mod("ui.controller"), mod("ui.preferences")
    addon_dir = work / "repo" / "image_to_mesh"
    settings(image)

    def press() -> dict:
        try:
            result = sorted(bpy.ops.image_to_mesh.generate())
        except RuntimeError as exc:  # operator errors are raised in background mode
            result = ["CANCELLED: " + str(exc)]
        return {"preflight": prefs.preflight_error(bpy.context), "result": result,
                "panel_error": ctl.CONTROLLER.state.view().error_text,
                "job": ctl.CONTROLLER.job is not None, "children": len(descendant_pids())}

    facts["cwd"] = os.getcwd()
    for text in ("relative_out", "//out", str(addon_dir / "out")):
        addon_prefs().output_dir = text
        facts[text] = press()
    facts["cwd_entries"] = sorted(os.listdir(os.getcwd()))
    facts["addon_entries"] = sorted(str(p.relative_to(addon_dir)) for p in addon_dir.rglob("*")
                                    if p.suffix in (".glb", ".jsonl") or p.name in
                                    ("out", "relative_out"))
    addon_prefs().output_dir = str(work / "out")
    settings(str(work))
    facts["folder_image"] = press()
    settings(image)
    (work / "scenes").mkdir()
    bpy.ops.wm.save_as_mainfile(filepath=str(work / "scenes" / "shot.blend"))
    addon_prefs().output_dir = "//renders"
    facts["saved_resolved"] = str(mod("ui.preferences").output_dir(addon_prefs()))
    facts["saved"] = press()
    facts["saved_argv_output"] = str(ctl.CONTROLLER.spec.output) if ctl.CONTROLLER.spec else None
    facts["saved_finished"] = drive(120)
    facts["saved_status"] = ctl.CONTROLLER.state.view().status
    renders = work / "scenes" / "renders"
    facts["renders"] = sorted(p.name for p in renders.iterdir()) if renders.is_dir() else None
    verdict(**facts)


def sc_cancel(zip_path, work, image):
    facts = install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    settings(image, texture="1024")
    before = set(o.name for o in bpy.data.objects)
    bpy.ops.image_to_mesh.generate()
    ctl = mod("ui.controller")
    tick = ctl.tick
    # Run until the worker has begun a stage: the job is really mid-run.
    end = time.monotonic() + 60
    while time.monotonic() < end:
        tick()
        if ctl.CONTROLLER.state.stage is not None or not ctl.CONTROLLER.running:
            break
        time.sleep(0.02)
    log = []
    bpy.types.VIEW3D_PT_image_to_mesh.draw(type("P", (), {"layout": RecordingLayout(log)})(),
                                           bpy.context)
    facts["buttons_while_running"] = [x[1] for x in log if x[0] == "operator"]
    facts["status_at_cancel"] = ctl.CONTROLLER.state.status
    facts["stage_at_cancel"] = ctl.CONTROLLER.state.stage
    tree = descendant_pids()
    facts["processes_before_cancel"] = len(tree)
    t0 = time.monotonic()
    facts["cancel_result"] = sorted(bpy.ops.image_to_mesh.cancel())
    facts["ui_blocked_s"] = time.monotonic() - t0
    facts["finished"] = drive(30)
    remaining = 2.0 - (time.monotonic() - t0)
    if remaining > 0:
        time.sleep(remaining)
    facts["alive_2s_after_cancel"] = alive(tree)
    facts["status"] = ctl.CONTROLLER.state.view().status
    facts["headline"] = ctl.CONTROLLER.state.view().headline
    facts["new_objects"] = [o.name for o in bpy.data.objects if o.name not in before]
    verdict(**facts)


def sc_batch(zip_path, work, folder):
    facts = install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    s = settings("", texture="512")
    s.batch_folder = folder
    cursor = (2.0, -1.0, 0.5)
    bpy.context.scene.cursor.location = cursor
    facts["cursor"] = list(cursor)
    before = set(o.name for o in bpy.data.objects)
    facts["result"] = sorted(bpy.ops.image_to_mesh.batch())
    ctl = mod("ui.controller")
    facts["finished"] = drive(240)
    facts["items"] = [[i.image.name, i.status] for i in ctl.CONTROLLER.batch.items]
    facts["progress_text"] = ctl.CONTROLLER.batch.progress_text()
    facts["summary"] = ctl.CONTROLLER.batch_summary
    log = []  # what the panel draws once the batch has ended: its labels, in order
    bpy.types.VIEW3D_PT_image_to_mesh.draw(type("P", (), {"layout": RecordingLayout(log)})(),
                                           bpy.context)
    facts["panel_labels"] = [entry[1] for entry in log if entry[0] == "label"]
    facts["last_rows"] = [list(row[:2]) for row in ctl.CONTROLLER.view().stage_rows]
    new = [o for o in bpy.data.objects if o.name not in before]
    facts["new_objects"] = [object_facts(o) for o in new]
    root = bpy.data.collections.get("Image to Mesh")
    facts["root_children"] = [c.name for c in root.children] if root else None
    facts["children_alive"] = descendant_pids()
    verdict(**facts)


def sc_batch_resume(zip_path, work, folder):
    """Cancel a batch after its first import, then Run Batch again: the runner's manifest
    skips the finished image, the rest run, and the new objects go after the existing one."""
    facts = install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    s = settings("", texture="512")
    s.batch_folder = folder
    bpy.context.scene.cursor.location = (0.0, 0.0, 0.0)
    ctl = mod("ui.controller").CONTROLLER
    facts["first"] = sorted(bpy.ops.image_to_mesh.batch())
    facts["first_finished"] = drive(240, on_tick=lambda: ctl.batch.items and ctl.running
                                      and ctl.cancel())
    facts["first_items"] = [[i.image.name, i.status] for i in ctl.batch.items]
    facts["first_summary"] = ctl.batch_summary
    facts["after_first"] = {o.name: list(o.location) for o in bpy.data.objects
                            if "image_to_mesh_glb" in o}
    facts["second"] = sorted(bpy.ops.image_to_mesh.batch())
    facts["second_finished"] = drive(240)
    facts["second_items"] = [[i.image.name, i.status] for i in ctl.batch.items]
    facts["second_summary"] = ctl.batch_summary
    facts["after_second"] = {o.name: list(o.location) for o in bpy.data.objects
                             if "image_to_mesh_glb" in o}
    facts["second_rows"] = [list(row[:2]) for row in ctl.view().stage_rows]
    facts["outputs"] = sorted(p.name for p in (work / "out").rglob("*.glb"))
    # a third run: every image was done before and is in the scene — nothing runs
    facts["third"] = sorted(bpy.ops.image_to_mesh.batch())
    facts["third_finished"] = drive(120)
    facts["third_items"] = [[i.image.name, i.status] for i in ctl.batch.items]
    third = ctl.view()
    facts["third_view"] = {"status": str(third.status), "headline": third.headline,
                           "progress": third.progress, "progress_text": third.progress_text}
    facts["children_alive"] = descendant_pids()
    verdict(**facts)


def sc_bad_interpreter(zip_path, work, image):
    facts = install(zip_path, work)
    addon_prefs().python = str(work / "no-such-venv" / "bin" / "python")
    settings(image)
    facts["preflight"] = mod("ui.preferences").preflight_error(bpy.context)
    try:
        facts["result"] = sorted(bpy.ops.image_to_mesh.generate())
    except RuntimeError as exc:  # operator errors are raised in background mode
        facts["result"] = ["CANCELLED"]
        facts["raised"] = str(exc)
    ctl = mod("ui.controller")
    v = ctl.CONTROLLER.state.view()
    facts["panel_error"] = v.error_text
    facts["status"] = v.status
    facts["timer_registered"] = bpy.app.timers.is_registered(ctl.tick)
    facts["children"] = descendant_pids()
    facts["job"] = ctl.CONTROLLER.job is not None
    # The Check button says the same.
    try:
        bpy.ops.image_to_mesh.check()
    except RuntimeError:
        pass  # reported as an error; the text is in the preferences
    facts["check_report"] = addon_prefs().check_report
    verdict(**facts)


def start_until_worker(image) -> list[int]:
    """Press Generate and tick until the runner has started its worker; the process ids."""
    settings(image, texture="1024")
    bpy.ops.image_to_mesh.generate()
    tick = mod("ui.controller").tick
    end = time.monotonic() + 60
    while time.monotonic() < end and len(descendant_pids()) < 2:
        tick()
        time.sleep(0.05)
    return descendant_pids()


def sc_disable_while_running(zip_path, work, image):
    facts = install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    tree = start_until_worker(image)
    ctl = mod("ui.controller")
    facts["processes_before"] = len(tree)
    t0 = time.monotonic()
    facts["disable_result"] = sorted(bpy.ops.preferences.addon_disable(module=PKG))
    facts["disable_seconds"] = time.monotonic() - t0
    time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
    facts["alive_after"] = alive(tree)
    facts["timer_registered"] = bpy.app.timers.is_registered(ctl.tick)
    verdict(**facts)


def sc_quit_while_running(zip_path, work, image):
    """Start a job, report the process tree, then exit the interpreter (Blender quitting)."""
    install(zip_path, work)
    addon_prefs().output_dir = str(work / "out")
    verdict(tree=start_until_worker(image))
    sys.exit(0)  # no unregister: only the atexit hook / closed pipe can stop the runner


class RecordingLayout:
    """Stands in for ``bpy.types.UILayout``, which exists only while Blender draws a region (never
    in background mode). Records what a draw() call asks for and checks each request against
    the real RNA: property names exist on the data, operators are registered, icons are valid
    enum items, ``progress`` gets a factor in 0..1."""

    ICONS = set(bpy.types.UILayout.bl_rna.functions["label"].parameters["icon"].enum_items.keys())

    def __init__(self, log):
        self.log = log
        self.alert = self.enabled = False
        self.scale_y = 1.0

    def _icon(self, icon):
        if icon not in self.ICONS:
            self.log.append(("BAD_ICON", icon))

    def _child(self, *a, **k):
        return RecordingLayout(self.log)

    row = column = box = grid_flow = split = _child

    def label(self, text="", icon="NONE"):
        self._icon(icon)
        self.log.append(("label", text))

    def prop(self, data, name, text=None, **k):
        ok = name in data.bl_rna.properties.keys()
        self.log.append(("prop", name) if ok else ("BAD_PROP", name))

    def operator(self, idname, text=None, icon="NONE", **k):
        self._icon(icon)
        cat, name = idname.split(".")
        self.log.append(("operator", idname) if _op_registered(name) and cat == "image_to_mesh"
                        else ("BAD_OPERATOR", idname))

    def separator(self, factor=1.0, **k):
        ok = "separator" in bpy.types.UILayout.bl_rna.functions.keys() and factor >= 0
        self.log.append(("separator", factor) if ok else ("BAD_SEPARATOR", factor))

    def progress(self, factor=0.0, type="BAR", text=""):
        self.log.append(("progress", round(factor, 4), text) if 0 <= factor <= 1
                        else ("BAD_PROGRESS", factor))


def sc_draw(zip_path, work, fixture):
    """Draw the panel and the preferences in each state the UI can be in."""
    install(zip_path, work)
    ctl = mod("ui.controller").CONTROLLER
    panel_cls = bpy.types.VIEW3D_PT_image_to_mesh
    draws = {}

    def draw_panel(key):
        log = []
        panel = type("P", (), {"layout": RecordingLayout(log)})()
        panel_cls.draw(panel, bpy.context)
        draws[key] = log

    draw_panel("idle")
    events = [json.loads(x) for x in Path(fixture).read_text().splitlines() if x.strip()]
    ctl.state.begin("goblin.png", now=events[0]["t"])
    for ev in events[:-1]:
        ctl.state.apply(ev)
    ctl.state.stage_fraction = 0.5  # mid-stage
    draw_panel("running")
    t = events[-2]["t"]
    for i, sub in enumerate(("fill_holes", "bake")):  # runner/PROTOCOL.md: sub-steps of export
        ctl.state.apply({"v": 1, "event": "stage", "t": t + i, "stage": sub, "index": i,
                         "count": 2, "parent": "export"})
    draw_panel("substeps")
    ctl.state.apply(events[-1])
    ctl.state.mark_done()
    ctl.batch_summary = "Batch: 3 of 4 done, 1 failed: broken.png (not_an_image: …)"
    draw_panel("done")
    ctl.state.apply({"v": 99, "event": "memory", "t": events[-1]["t"], "footprint": 1})
    draw_panel("newer_protocol")
    s = bpy.context.scene.image_to_mesh
    s.backend, s.pipeline_type = "pixal3d", "1536_cascade"
    draw_panel("pixal3d_1536")
    export_cls = bpy.types.VIEW3D_PT_image_to_mesh_export
    for engine in ("bounded", "port"):  # the levers of the chosen export engine
        s.export_engine = engine
        export_log = []
        export_cls.draw(type("P", (), {"layout": RecordingLayout(export_log)})(), bpy.context)
        draws[f"export_{engine}"] = export_log
    export_poll = {"pixal3d": export_cls.poll(bpy.context)}
    s.export_profile, s.decimation_target, s.remesh = "fit", 250000, False
    s.remesh_resolution, s.allow_dense_grid_sample, s.strict_export = "512", True, True
    export_argv = {}
    for engine in ("port", "bounded"):
        s.export_engine = engine
        export_argv[engine] = mod("runner_client.job_spec").JobSpec(
            image=work / "a.png", output=work / "a.glb", trace=work / "a.jsonl",
            settings=mod("runner_client.job_spec").settings_from(s, addon_prefs())).argv("/py")
    pipeline_items = {i.identifier: i.name for i in
                      s.bl_rna.properties["pipeline_type"].enum_items}
    s.backend = "builtin"
    export_poll["builtin"] = export_cls.poll(bpy.context)
    addon_prefs().python = "/no/such/python"
    draw_panel("bad_python")
    plog = []
    prefs = addon_prefs()
    prefs.check_report = "Python 3.11.7 · torch 2.13.0\nbuiltin: ready"
    proxy = type("P", (), {"layout": RecordingLayout(plog),
                           "__getattr__": lambda self, name: getattr(prefs, name)})()
    type(prefs).draw(proxy, bpy.context)
    draws["preferences"] = plog
    verdict(draws=draws, expected_progress=round(ctl.state.progress(), 4),
            pipeline_items=pipeline_items, export_poll=export_poll, export_argv=export_argv,
            export_parent=export_cls.bl_parent_id,
            export_closed="DEFAULT_CLOSED" in export_cls.bl_options)


def sc_importer(zip_path, work):
    """A GLB with a helper node (a translated, rotated parent of two meshes) and a textured
    part, as other exporters write them: one object, no empties, world placement kept."""
    import numpy as np
    import trimesh
    from PIL import Image

    install(zip_path, work)
    box = trimesh.creation.box((0.2, 0.2, 0.2))
    uv = np.random.default_rng(0).random((len(box.vertices), 2))
    tex = Image.new("RGB", (64, 32), (200, 30, 30))
    box.visual = trimesh.visual.TextureVisuals(uv=uv, image=tex)
    ball = trimesh.creation.icosphere(subdivisions=2, radius=0.1)
    scene = trimesh.Scene()
    helper = trimesh.transformations.translation_matrix((0.0, 1.0, 0.0))  # glTF +Y up: 1 m up
    scene.graph.update(frame_to="helper", frame_from=scene.graph.base_frame, matrix=helper)
    scene.add_geometry(box, node_name="box", geom_name="box", parent_node_name="helper")
    scene.add_geometry(ball, node_name="ball", geom_name="ball", parent_node_name="helper",
                       transform=trimesh.transformations.translation_matrix((0.5, 0, 0)))
    glb = work / "parts.glb"
    glb.write_bytes(scene.export(file_type="glb"))
    imp = mod("ui.importer")
    before = set(bpy.data.objects)
    coll = imp.ensure_collection(bpy.context.scene)
    obj = imp.import_glb(glb, "parts", (2.0, 3.0, 4.0), coll, {"backend": "x", "seed": 1,
                                                              "peak": 5e9, "trace": "t"})
    new = [o for o in bpy.data.objects if o not in before]
    bpy.context.view_layer.update()  # matrix_world follows location only after an update
    world = [obj.matrix_world @ v.co for v in obj.data.vertices]
    zs = sorted(v.z for v in world)
    facts = {"new": [(o.name, o.type) for o in new], "location": list(obj.location),
             "z_min": zs[0], "z_max": zs[-1], "vertex_count": len(world),
             "expected_vertices": len(box.vertices) + len(ball.vertices),
             "image_size": (list(imp.base_color_image(obj).size)
                            if imp.base_color_image(obj) else None),
             "peak_prop": obj[imp.PROP_PEAK]}
    # The same name again (one image's output in a second folder): the project's _2, not .001
    again = imp.import_glb(glb, "parts", (0.0, 0.0, 0.0), coll, {"backend": "x", "seed": 1,
                                                                 "peak": None, "trace": "t"})
    facts["second"] = [again.name, again.data.name]
    facts["second_materials"] = [s.material.name for s in again.material_slots if s.material]
    try:
        imp.import_glb(work / "missing.glb", "x", (0, 0, 0), coll, {})
    except imp.MeshImportError as exc:
        facts["missing_error"] = str(exc)
    verdict(**facts)


def _draw_panel_log() -> list:
    log = []
    panel = type("P", (), {"layout": RecordingLayout(log)})()
    bpy.types.VIEW3D_PT_image_to_mesh.draw(panel, bpy.context)
    return log


def sc_cluster_batch(zip_path, work, folder, address):
    """Run Batch with the cluster address preference set: per-node lines, every transition of
    them (the board's history), each GLB imported as its batch_item arrives: every call the
    controller makes to the importer is recorded as it happens (the GLB, the objects in the
    target collection before and after, whether the batch was still running), so no import
    can fall between two samples."""
    facts = install(zip_path, work)
    imp = mod("ui.importer")
    imports, import_glb = [], imp.import_glb

    def recording_import(glb, name, location, collection, *args, **kwargs):
        before = len(collection.objects)
        running = ctl.running and not ctl.batch.ended
        obj = import_glb(glb, name, location, collection, *args, **kwargs)
        imports.append([obj.name, before, len(collection.objects), running])
        return obj

    imp.import_glb = recording_import  # the controller calls importer.import_glb by attribute
    prefs = addon_prefs()
    prefs.output_dir, prefs.cluster = str(work / "out"), address
    s = settings("", texture="512")
    s.batch_folder = folder
    ctl = mod("ui.controller").CONTROLLER
    facts["generate_argv"] = mod("runner_client.job_spec").JobSpec(
        image=work / "a.png", output=work / "a.glb", trace=work / "a.jsonl",
        settings=mod("ui.operators").make_launch(bpy.context).settings).argv("/py")
    facts["result"] = sorted(bpy.ops.image_to_mesh.batch())
    facts["argv"] = list(ctl.job.argv) if ctl.job is not None else None
    lines_seen = []

    def watch():
        lines = ctl.nodes.lines()
        if lines and lines not in lines_seen:
            lines_seen.append(lines)
            if sum(busy for _text, busy in lines) == 2:  # both nodes at work: draw the panel
                facts["panel_running"] = _draw_panel_log()

    facts["finished"] = drive(240, on_tick=watch)
    watch()
    imp.import_glb = import_glb
    facts["imports"] = imports
    coll = bpy.data.collections.get(f"Batch {Path(folder).name}")
    facts["batch_objects"] = sorted(o.name for o in coll.objects) if coll else []
    facts["lines_seen"] = lines_seen
    facts["history"] = ctl.nodes.history
    facts["node_ids"] = sorted(ctl.nodes.nodes)
    facts["items"] = [[i.image.name, i.status, i.detail] for i in ctl.batch.items]
    facts["summary"] = ctl.batch_summary
    manifest = Path(facts["argv"][facts["argv"].index("-o") + 1]) / "manifest.json"
    facts["manifest"] = json.loads(manifest.read_text()) if manifest.exists() else None
    facts["children_alive"] = descendant_pids()
    verdict(**facts)


def sc_cluster_refused(zip_path, work, folder):
    """A cluster address that is not one: Run Batch refuses it and says how (Generate is not
    stopped by it); one that is, with Ray missing from the runner's Python: the runner's
    cluster_unavailable reaches the panel."""
    facts = install(zip_path, work)
    prefs = addon_prefs()
    prefs.output_dir, prefs.cluster = str(work / "out"), "head-without-port"
    s = settings("", texture="512")
    s.batch_folder = folder
    ops = mod("ui.operators")
    ctl = mod("ui.controller").CONTROLLER
    try:  # an operator that reports an ERROR raises in background mode
        facts["bad_result"] = sorted(bpy.ops.image_to_mesh.batch())
    except RuntimeError as exc:
        facts["bad_result"], facts["bad_report"] = ["CANCELLED"], str(exc)
    facts["bad_error"] = (ctl.state.error or {}).get("message")
    facts["bad_panel"] = _draw_panel_log()
    facts["generate_argv"] = mod("runner_client.job_spec").JobSpec(
        image=work / "a.png", output=work / "a.glb", trace=work / "a.jsonl",
        settings=ops.make_launch(bpy.context).settings).argv("/py")
    prefs.cluster = "127.0.0.1:9"
    facts["result"] = sorted(bpy.ops.image_to_mesh.batch())
    facts["argv"] = list(ctl.job.argv) if ctl.job is not None else None
    facts["finished"] = drive(120)
    facts["error"] = ctl.state.error
    facts["summary"] = ctl.batch_summary
    facts["panel"] = _draw_panel_log()
    verdict(**facts)


def sc_defaults(zip_path, work, image, backend, pixal3d_dir="", python=""):
    """Generate with every job option at the panel's default: only the image and the backend
    are chosen (and, for Pixal3D, the folder and an interpreter with torch, which are places,
    not options). Reports the GLB the runner wrote and the command line the add-on used."""
    facts = install(zip_path, work)
    prefs = addon_prefs()
    prefs.output_dir = str(work / "out")
    prefs.pixal3d_dir, prefs.python = pixal3d_dir, python
    scene = bpy.context.scene.image_to_mesh
    scene.image, scene.backend = image, backend
    facts["result"] = sorted(bpy.ops.image_to_mesh.generate())
    ctl = mod("ui.controller").CONTROLLER
    facts["argv"] = list(ctl.job.argv) if ctl.job is not None else None
    facts["finished"] = drive(600)
    view = ctl.state.view()
    facts["final"] = {"status": view.status, "error": view.error_text, "hint": view.hint_text}
    facts["output"] = ctl.state.output
    verdict(**facts)


def sc_deep_check(zip_path, work, pixal3d_dir, python):
    """The preferences' Check with Deep on, answered by the real runner's deep check on the
    port folder given (the stand-in) with the interpreter given; its text and the reports the
    output folder holds afterwards."""
    facts = install(zip_path, work)
    prefs = addon_prefs()
    prefs.output_dir = str(work / "out")
    prefs.pixal3d_dir, prefs.python = pixal3d_dir, python
    prefs.check_deep = True
    facts["result"] = sorted(bpy.ops.image_to_mesh.check())
    facts["while_running"] = prefs.check_report
    prefs_mod = mod("ui.preferences")
    end = time.monotonic() + 900
    while time.monotonic() < end and prefs_mod.check_poll() is not None:
        time.sleep(0.2)
    facts["check_report"] = addon_prefs().check_report
    facts["reports"] = sorted(str(p) for p in (work / "out").rglob("self-check *.json"))
    verdict(**facts)


SCENARIOS = {n[3:]: f for n, f in globals().items() if n.startswith("sc_")}

if __name__ == "__main__":
    name, zip_path, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    SCENARIOS[name](zip_path, work, *sys.argv[4:])
