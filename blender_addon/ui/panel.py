"""The N-panel View3D › Sidebar › "Image to Mesh" and the scene settings it edits.

The panel only draws: the job's content comes from :meth:`state.JobState.view` (pure, tested on a
recorded event stream), the batch's from :class:`batch.BatchRun`.
"""
from __future__ import annotations

import bpy
from bpy.props import PointerProperty, StringProperty

from ..runner_client.facts import options
from ..runner_client.state import ACTIVE, COMPLETE, FAILED, IDLE
from . import importer
from .controller import CONTROLLER
from .operators import (
    IMAGE_TO_MESH_OT_batch,
    IMAGE_TO_MESH_OT_cancel,
    IMAGE_TO_MESH_OT_generate,
    IMAGE_TO_MESH_OT_open_chart,
    IMAGE_TO_MESH_OT_reexport,
    reexport_unavailable,
)
from .preferences import draw_cluster_address, get_prefs, preflight_error, table_properties
from .preferences import wrap_label as _wrap

#: Settings drawn only while another is on (the remesh resolution needs the remesh).
ENABLED_BY = {"remesh_resolution": "remesh"}
#: The main panel's options laid out by hand (the rest of its section follow, each applying to
#: the chosen backend only).
LAID_OUT = ("backend", "seed", "texture_size", "pipeline_type")
ROW_ICONS = {COMPLETE: "CHECKMARK", ACTIVE: "PLAY", "pending": "DOT", "failed": "ERROR",
             "cancelled": "CANCEL"}


class ImageToMeshSettings(bpy.types.PropertyGroup):
    """Per-scene panel settings (saved with the .blend): the image, the batch folder and every
    scene option of the runner's options table (``meshfacts/options.py``: backend, seed, texture,
    pipeline type, the export levers …)."""
    image: StringProperty(name="Image", subtype="FILE_PATH", default="",
                          description="Picture of a character (PNG with transparency works best)")
    batch_folder: StringProperty(name="Folder", subtype="DIR_PATH", default="",
                                 description="Folder of images for a batch run")
    __annotations__.update(table_properties("scene"))


def _draw_advice(layout, s, names) -> None:
    """The table's advice for a chosen value (e.g. against 1536_cascade on a Mac), in red."""
    for name in names:
        advice = options.get(name).advice.get(str(getattr(s, name)))
        if advice:
            box = layout.box()
            box.alert = True
            _wrap(box, advice, "ERROR", 44)


class _Sidebar:
    """Where the add-on's panels live: View3D › Sidebar › "Image to Mesh"."""
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Image to Mesh"


class VIEW3D_PT_image_to_mesh(_Sidebar, bpy.types.Panel):
    """Image → textured mesh, with the runner's stages and memory"""
    bl_label = "Image to Mesh"
    bl_idname = "VIEW3D_PT_image_to_mesh"

    def draw(self, context):
        layout = self.layout
        s = context.scene.image_to_mesh
        col = layout.column()
        col.prop(s, "image")
        col.prop(s, "backend")
        row = col.row(align=True)
        row.prop(s, "seed")
        row.prop(s, "texture_size", text="")
        shown = [o.name for o in options.addon_options("scene", "main")
                 if o.applies_to(s.backend) and o.name != "backend"]
        for name in shown:
            if name not in LAID_OUT[:3]:
                col.prop(s, name)
        _draw_advice(col, s, shown)

        problem = preflight_error(context)
        if problem:
            box = layout.box()
            box.alert = True
            _wrap(box, problem, "ERROR", 44)

        if CONTROLLER.running:
            layout.operator(IMAGE_TO_MESH_OT_cancel.bl_idname, icon="CANCEL")
        else:
            big = layout.row()
            big.scale_y = 1.4
            big.enabled = not problem
            big.operator(IMAGE_TO_MESH_OT_generate.bl_idname, icon="MESH_MONKEY")

        _draw_job(layout, CONTROLLER.view())
        layout.operator(IMAGE_TO_MESH_OT_open_chart.bl_idname, icon="GRAPH")
        _draw_batch(layout, s, problem)


def _draw_job(layout, view) -> None:
    """The running or last job (``view.PanelView``): stage rows with their sub-steps, the bar,
    memory, swap, guard, time, result, error, hint and notes; nothing while idle."""
    if view.status == IDLE:
        return
    box = layout.box()
    box.label(text=view.headline, icon="ERROR" if view.status == FAILED else "INFO")
    for name, status, secs in view.stage_rows:
        r = box.row()
        r.enabled = status != "pending"
        r.label(text=name, icon=ROW_ICONS.get(status, "DOT"))
        r.label(text=secs)
        for sub, sub_status, sub_secs in view.substep_rows.get(name, ()):
            r = box.row()
            r.enabled = sub_status != "pending"
            r.separator(factor=2.0)  # indented: a step inside the stage above
            r.label(text=sub, icon=ROW_ICONS.get(sub_status, "DOT"))
            r.label(text=sub_secs)
    box.progress(factor=view.progress, type="BAR", text=view.progress_text)
    for text, icon in ((view.memory_text, "MEMORY"), (view.swap_text, "DISK_DRIVE"),
                       (view.guard_text, "LOCKED"), (view.elapsed_text, "TIME")):
        if text:
            box.label(text=text, icon=icon)
    if view.result_text:
        _wrap(box, view.result_text, "CHECKMARK", 44)
    if view.error_text:
        sub = box.column()
        sub.alert = True
        _wrap(sub, view.error_text, "ERROR", 44)
    if view.hint_text:
        _wrap(box, view.hint_text, "QUESTION", 44)
    if view.note_text:  # the runner's warnings, a stall, a newer protocol than this add-on's
        _wrap(box, view.note_text, "ERROR", 44)


def _draw_batch(layout, s, problem: str) -> None:
    """The Batch box: folder, the cluster address (a preference: only a batch takes it),
    progress, one line per cluster node, summary and Run Batch (off while a job runs or a
    ``problem`` stops jobs)."""
    box = layout.box()
    box.label(text="Batch", icon="FILE_FOLDER")
    box.prop(s, "batch_folder")
    bad_cluster = draw_cluster_address(box, get_prefs(), width=44)
    batch = CONTROLLER.batch
    if batch is not None:
        box.label(text=f"{batch.progress_text()} images")
        box.progress(factor=len(batch.items) / max(1, batch.count), type="BAR",
                     text=batch.progress_text())
    for text, busy in CONTROLLER.nodes.lines():  # a cluster batch: which image runs where
        _wrap(box, text, "PLAY" if busy else "DOT", 44)
    if CONTROLLER.batch_summary:
        _wrap(box, CONTROLLER.batch_summary, "INFO", 44)
    row = box.row()
    row.enabled = not CONTROLLER.running and not problem and not bad_cluster
    row.operator(IMAGE_TO_MESH_OT_batch.bl_idname, icon="PLAY")

def export_levers(engine: str) -> list[str]:
    """The Export sub-panel's options for the export engine ``engine``, from the options
    table: the engine choice first, then every scene option of the ``export`` section or
    taken by ``runner export`` (the texture size) that applies to a Pixal3D job with that
    engine (``Option.engines``) — the bounded engine's budget, not the port's remesh."""
    shown = [o for o in options.table() if o.panel is not None and o.panel.where == "scene"
             and (o.panel.section == "export" or "export" in o.commands)
             and o.applies_to("pixal3d", engine)]
    return sorted((o.name for o in shown), key=lambda name: name != "export_engine")


def reexport_levers() -> list[str]:
    """The scene options ``python -m runner export`` takes (its ``commands``), in table order:
    what a Re-export passes."""
    return [o.name for o in options.addon_options("scene") if "export" in o.commands]


class VIEW3D_PT_image_to_mesh_export(_Sidebar, bpy.types.Panel):
    """The Pixal3D export's memory levers (runner options, docs/pixal3d.md "Export"): those of
    the chosen export engine"""
    bl_label = "Export"
    bl_idname = "VIEW3D_PT_image_to_mesh_export"
    bl_parent_id = VIEW3D_PT_image_to_mesh.bl_idname
    bl_options = {"DEFAULT_CLOSED"}

    @classmethod
    def poll(cls, context):
        return context.scene.image_to_mesh.backend == "pixal3d"

    def draw(self, context):
        s = context.scene.image_to_mesh
        col = self.layout.column()
        for name in export_levers(s.export_engine):
            if name in ENABLED_BY:
                sub = col.column()
                sub.enabled = bool(getattr(s, ENABLED_BY[name]))
                sub.prop(s, name)
            else:
                col.prop(s, name)


class VIEW3D_PT_image_to_mesh_reexport(_Sidebar, bpy.types.Panel):
    """Re-export the active object's kept asset with other levers (``runner export``)"""
    bl_label = "Re-export"
    bl_idname = "VIEW3D_PT_image_to_mesh_reexport"
    bl_parent_id = VIEW3D_PT_image_to_mesh.bl_idname
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        s = context.scene.image_to_mesh
        col = self.layout.column()
        asset, _ = importer.recorded_asset(context.active_object)
        if asset is not None:
            _wrap(col, f"{context.active_object.name} from {asset.name}", "FILE", 44)
        for name in reexport_levers():
            col.prop(s, name)
        why = reexport_unavailable(context)
        row = col.row()
        row.enabled = not why
        row.operator(IMAGE_TO_MESH_OT_reexport.bl_idname, icon="EXPORT")
        if why:
            _wrap(col, why, "INFO", 44)


CLASSES = (ImageToMeshSettings, VIEW3D_PT_image_to_mesh, VIEW3D_PT_image_to_mesh_export,
           VIEW3D_PT_image_to_mesh_reexport)


def register_props() -> None:
    """Attach the settings to every scene."""
    bpy.types.Scene.image_to_mesh = PointerProperty(type=ImageToMeshSettings)


def unregister_props() -> None:
    """Remove the settings from scenes."""
    del bpy.types.Scene.image_to_mesh
