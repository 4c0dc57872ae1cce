"""Blender scenarios of the add-on's Re-export (tests/blender/test_reexport.py), one per fresh
process like ``scenarios.py`` (whose helpers they use): a stand-in Pixal3D run with "Keep asset
for re-export" through Generate, then Re-export of the imported object through the real
``python -m runner export``, its cancel, a bad and a missing asset.

Usage: ``python reexport_scenarios.py NAME ZIP WORKDIR [ARGS…]``; prints ``VERDICT {json}``.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path

import bpy
import scenarios as base
from scenarios import RecordingLayout, addon_prefs, alive, descendant_pids, drive, install, mod


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _draw_reexport() -> dict:
    """The Re-export sub-panel's draw (on the recording layout): its props and labels."""
    log: list = []
    panel = type("P", (), {"layout": RecordingLayout(log)})()
    bpy.types.VIEW3D_PT_image_to_mesh_reexport.draw(panel, bpy.context)
    return {"props": [e[1] for e in log if e[0] == "prop"],
            "labels": [e[1] for e in log if e[0] == "label"],
            "ops": [e[1] for e in log if e[0] == "operator"],
            "bad": [e for e in log if e[0].startswith("BAD_")]}


def _poll() -> list:
    """Whether Re-export can run now, and why not (the sentence the panel shows)."""
    return [bpy.ops.image_to_mesh.reexport.poll(), mod("ui.operators").reexport_unavailable(
        bpy.context)]


def _job_facts(ctl) -> dict:
    view = ctl.state.view()
    err = ctl.state.error or {}
    return {"status": view.status, "error_kind": err.get("kind"), "error": view.error_text,
            "hint": view.hint_text, "history": list(ctl.state.history),
            "substeps": [[r.name, r.status] for r in ctl.state.substeps.get("export", [])],
            "stages": [[r.name, r.status] for r in ctl.state.stages]}


def _faces(obj) -> int:
    return len(obj.data.polygons)


def _generate(work: Path, image: str, facts: dict):
    """Generate with the stand-in Pixal3D and the asset kept: the imported object."""
    s = bpy.context.scene.image_to_mesh
    s.image, s.backend, s.texture_size, s.keep_asset = image, "pixal3d", "512", True
    ctl = mod("ui.controller").CONTROLLER
    before = set(bpy.data.objects)
    facts["generate"] = sorted(bpy.ops.image_to_mesh.generate())
    facts["generate_finished"] = drive(240)
    facts["generate_job"] = _job_facts(ctl)
    new = [o for o in bpy.data.objects if o not in before]
    facts["generate_objects"] = [o.name for o in new]
    return new[0] if len(new) == 1 else None


def _reexport(ctl, facts: dict, key: str, on_tick=None) -> list:
    """Press Re-export and run the job to its end; the new objects."""
    before = set(bpy.data.objects)
    facts[key] = {"result": sorted(bpy.ops.image_to_mesh.reexport())}
    job = ctl.job
    facts[key]["argv"] = list(job.argv) if job is not None else None
    facts[key]["output"] = ctl.state.output
    facts[key]["finished"] = drive(240, on_tick)
    facts[key].update(_job_facts(ctl))
    return [o for o in bpy.data.objects if o not in before]


def sc_reexport(zip_path, work, image, pixal3d_dir, big_asset):
    """Generate (stand-in Pixal3D, asset kept) → Re-export at another decimation target, with
    port levers left set in the panel → a cancel mid re-export → a bad asset → a missing
    asset."""
    work = Path(work)
    facts = install(zip_path, work)
    prefs = addon_prefs()
    prefs.output_dir, prefs.pixal3d_dir = str(work / "out"), pixal3d_dir
    ctl = mod("ui.controller").CONTROLLER
    imp = mod("ui.importer")
    facts["draw_nothing_selected"] = _draw_reexport()
    facts["poll_nothing_selected"] = _poll()
    source = _generate(work, image, facts)
    if source is None:
        base.verdict(**facts)
        return
    asset = Path(source[imp.PROP_ASSET]) if imp.PROP_ASSET in source else None
    facts["source"] = {"name": source.name, "faces": _faces(source), "glb": source[imp.PROP_GLB],
                       "asset": str(asset) if asset else None,
                       "location": list(source.location),
                       "collections": [c.name for c in source.users_collection]}
    glb_sha = _sha(Path(source[imp.PROP_GLB]))
    facts["poll_ready"] = _poll()
    facts["draw_ready"] = _draw_reexport()

    # 1. Another decimation target (a third of the faces); port levers left set in the panel
    # (the bounded export would refuse them) are not passed.
    s = bpy.context.scene.image_to_mesh
    s.decimation_target = max(100, _faces(source) // 3)
    s.export_profile, s.remesh_resolution = "fit", "512"
    facts["target"] = s.decimation_target
    new = _reexport(ctl, facts, "first")
    bpy.context.view_layer.update()
    facts["first"]["objects"] = [{"name": o.name, "faces": _faces(o), "glb": o.get(imp.PROP_GLB),
                                  "asset": o.get(imp.PROP_ASSET), "location": list(o.location),
                                  "collections": [c.name for c in o.users_collection],
                                  "backend": o.get(imp.PROP_BACKEND),
                                  "image": o.get(imp.PROP_IMAGE),
                                  "textured": imp.base_color_image(o) is not None}
                                 for o in new]
    facts["first"]["active"] = bpy.context.view_layer.objects.active.name
    facts["source_after"] = {"exists": source.name in bpy.data.objects,
                             "faces": _faces(source),
                             "glb_unchanged": _sha(Path(source[imp.PROP_GLB])) == glb_sha}
    facts["python"] = sys.executable

    # 2. Cancel mid re-export (a bigger asset in the kept file's place: its export takes
    # seconds): no GLB, no job folder, no process left.
    bpy.context.view_layer.objects.active = source
    shutil.copyfile(big_asset, asset)
    s.decimation_target = 0
    tree: list = []

    def cancel_in_a_substep():
        rows = ctl.state.substeps.get("export", [])
        if not tree and any(r.status == "running" for r in rows):
            tree.extend(descendant_pids())
            facts["cancel_at"] = [[r.name, r.status] for r in rows]
            bpy.ops.image_to_mesh.cancel()

    t0 = time.monotonic()
    new = _reexport(ctl, facts, "cancel", cancel_in_a_substep)
    time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
    out = Path(facts["cancel"]["output"])
    facts["cancel"]["processes_at_cancel"] = len(tree)
    facts["cancel"]["alive_after"] = alive(tree)
    facts["cancel"]["children_alive"] = descendant_pids()
    facts["cancel"]["glb_exists"] = out.exists()
    facts["cancel"]["leftovers"] = sorted(p.name for p in out.parent.iterdir()
                                          if ".job-" in p.name or p.name.startswith(out.stem)
                                          and p.suffix == ".glb")
    facts["cancel"]["objects"] = [o.name for o in new]

    # 3. A bad asset (not an npz): the runner's bad_asset, said clearly; nothing written.
    asset.write_bytes(b"this is not an npz file\n" * 10)
    facts["bad_poll"] = _poll()
    new = _reexport(ctl, facts, "bad")
    facts["bad"]["objects"] = [o.name for o in new]
    facts["bad"]["glb_exists"] = Path(facts["bad"]["output"]).exists()

    # 4. The asset gone: Re-export is greyed out and says why; pressing it anyway is refused.
    asset.unlink()
    facts["missing_poll"] = _poll()
    facts["missing_draw"] = _draw_reexport()
    try:
        facts["missing_press"] = sorted(bpy.ops.image_to_mesh.reexport())
    except RuntimeError as exc:  # bpy.ops raises when poll() fails: the poll message
        facts["missing_press"] = str(exc)
    facts["children_alive"] = descendant_pids()
    base.verdict(**facts)


def sc_placement(zip_path, work):
    """Where Re-export puts its object (``controller.beside``) along a chain: the original O,
    a re-export R1 of O, then a re-export of R1, then of O again; the X of each place (the
    objects are 2 m cubes: a step of 2.5 m), and an object of another asset far right that
    must not count."""
    work = Path(work)
    facts = install(zip_path, work)
    imp, ctl = mod("ui.importer"), mod("ui.controller")

    def cube(x: float, asset: str):
        bpy.ops.mesh.primitive_cube_add(size=2.0, location=(x, 1.0, 0.5))
        obj = bpy.context.active_object
        obj[imp.PROP_ASSET] = asset
        bpy.context.view_layer.update()
        return obj

    def place(source) -> list:
        location, collection = ctl.beside(source, {"asset": source[imp.PROP_ASSET]})
        return [round(v, 6) for v in location]

    original = cube(2.0, "/assets/goblin.asset.npz")
    cube(40.0, "/assets/other.asset.npz")
    first = place(original)
    r1 = cube(first[0], "/assets/goblin.asset.npz")
    second = place(r1)
    cube(second[0], "/assets/goblin.asset.npz")
    facts["places"] = [first, second, place(original), place(r1)]
    base.verdict(**facts)


SCENARIOS = {n[3:]: f for n, f in globals().items() if n.startswith("sc_")}

if __name__ == "__main__":
    name, zip_path, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    SCENARIOS[name](zip_path, work, *sys.argv[4:])
