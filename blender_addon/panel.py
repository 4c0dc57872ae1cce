"""The N-panel View3D › Sidebar › "Image to Mesh" and the scene settings it edits.

The panel only draws: the job's content comes from :meth:`state.JobState.view` (pure, tested on a
recorded event stream), the batch's from :class:`batch.BatchRun`.
"""
from __future__ import annotations

import bpy
from bpy.props import (BoolProperty, EnumProperty, IntProperty, PointerProperty,
                       StringProperty)

from .controller import CONTROLLER
from .preferences import wrap_label as _wrap
from .operators import (IMAGE_TO_MESH_OT_batch, IMAGE_TO_MESH_OT_cancel,
                        IMAGE_TO_MESH_OT_generate, IMAGE_TO_MESH_OT_open_chart, preflight_error)
from .state import ACTIVE, COMPLETE, FAILED, IDLE

BACKEND_ITEMS = [
    ("builtin", "Built-in (silhouette inflation)",
     "Inflates the character's silhouette into a rounded, textured body: no weights, CPU, "
     "seconds. Not Pixal3D"),
    ("pixal3d", "Pixal3D (staged)",
     "TencentARC's Pixal3D through Pixal3D-mac, loading one stage's models at a time; needs the "
     "Pixal3D-mac folder in the preferences"),
]
TEXTURE_ITEMS = [(s, f"{s} px", f"Base-colour texture of {s} × {s} pixels")
                 for s in ("512", "1024", "2048")]
#: Pixal3D-mac's own advice against 1536_cascade on a Mac (INVESTIGATION_FACTS.md §3 at
#: e5fbf2d5, quoted in docs/pixal3d.md); a run with it also starts with the runner's
#: ``warning`` event.
NOT_ON_MAC = ("1536_cascade is not recommended on a Mac: Pixal3D-mac's own notes report a "
              "catastrophic shatter (147k connected components on an M5 Max). Use "
              "1024_cascade.")
PIPELINE_ITEMS = [  # stageload.pixal3d's plans
    ("1024_cascade", "1024_cascade", "Pixal3D pipeline type 1024_cascade (recommended)"),
    ("1536_cascade", "1536_cascade (not recommended on Mac)", NOT_ON_MAC),
]
# The pixal3d backend's export levers (runner/backends/__init__.py, docs/pixal3d.md "Export");
# the first item of each is the runner's default, which the add-on does not pass.
EXPORT_PROCESS_ITEMS = [
    ("own", "Own process", "Export in a fresh process once the model process has exited and "
     "given all its memory back (the runner's default)"),
    ("in-process", "In the model process", "Export in the model process, as the port does"),
]
EXPORT_PROFILE_ITEMS = [
    ("port", "Port", "The port's own export values"),
    ("fit", "Fit", "The low-memory export a peer validated on a 36 GB Mac: remesh at "
     "min(512, grid), free temporaries between steps"),
]
REMESH_RESOLUTION_ITEMS = [
    ("grid", "Grid", "Remesh at the pipeline's grid resolution (the port's way)"),
    ("512", "512", "Remesh at min(512, grid): 4x fewer faces into cleanup; refused with the "
     "reason where the port cannot do it"),
]
ROW_ICONS = {COMPLETE: "CHECKMARK", ACTIVE: "PLAY", "pending": "DOT"}


class ImageToMeshSettings(bpy.types.PropertyGroup):
    """Per-scene panel settings (saved with the .blend)."""
    image: StringProperty(name="Image", subtype="FILE_PATH", default="",
                          description="Picture of a character (PNG with transparency works best)")
    backend: EnumProperty(name="Backend", items=BACKEND_ITEMS, default="builtin")
    seed: IntProperty(name="Seed", default=0, min=0, description="Random seed of the run")
    texture_size: EnumProperty(name="Texture", items=TEXTURE_ITEMS, default="1024")
    pipeline_type: EnumProperty(name="Pipeline", items=PIPELINE_ITEMS, default="1024_cascade")
    export_process: EnumProperty(name="Export in", items=EXPORT_PROCESS_ITEMS, default="own")
    export_profile: EnumProperty(name="Profile", items=EXPORT_PROFILE_ITEMS, default="port")
    decimation_target: IntProperty(
        name="Decimation target", default=0, min=0, max=100_000_000,
        description="Faces the port simplifies the mesh to; 0 = the port's own (1,000,000)")
    remesh: BoolProperty(name="Remesh", default=True,
                         description="The port's dual-contouring remesh (the port's default: on)")
    remesh_resolution: EnumProperty(name="Remesh resolution", items=REMESH_RESOLUTION_ITEMS,
                                    default="grid")
    allow_dense_grid_sample: BoolProperty(
        name="Allow dense grid sample", default=False,
        description="Export even when the port would build the dense grid-sample volume "
        "(25.8 GB at 1024) because flex_gemm is missing")
    batch_folder: StringProperty(name="Folder", subtype="DIR_PATH", default="",
                                 description="Folder of images for a batch run")


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
        if s.backend == "pixal3d":
            col.prop(s, "pipeline_type")
            if s.pipeline_type == "1536_cascade":
                box = col.box()
                box.alert = True
                _wrap(box, NOT_ON_MAC, "ERROR", 44)

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

        view = CONTROLLER.state.view()
        if view.status != IDLE:
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
            if view.note_text:  # the runner speaks a newer protocol than this add-on
                _wrap(box, view.note_text, "ERROR", 44)
        layout.operator(IMAGE_TO_MESH_OT_open_chart.bl_idname, icon="GRAPH")

        box = layout.box()
        box.label(text="Batch", icon="FILE_FOLDER")
        box.prop(s, "batch_folder")
        batch = CONTROLLER.batch
        if batch is not None:
            box.label(text=f"{batch.progress_text()} images")
            box.progress(factor=len(batch.items) / max(1, batch.count), type="BAR",
                         text=batch.progress_text())
        if CONTROLLER.batch_summary:
            _wrap(box, CONTROLLER.batch_summary, "INFO", 44)
        row = box.row()
        row.enabled = not CONTROLLER.running and not problem
        row.operator(IMAGE_TO_MESH_OT_batch.bl_idname, icon="PLAY")


class VIEW3D_PT_image_to_mesh_export(_Sidebar, bpy.types.Panel):
    """The Pixal3D export's memory levers (runner options, docs/pixal3d.md "Export")"""
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
        for name in ("export_process", "export_profile", "decimation_target", "remesh"):
            col.prop(s, name)
        sub = col.column()
        sub.enabled = s.remesh
        sub.prop(s, "remesh_resolution")
        col.prop(s, "allow_dense_grid_sample")


CLASSES = (ImageToMeshSettings, VIEW3D_PT_image_to_mesh, VIEW3D_PT_image_to_mesh_export)


def register_props() -> None:
    """Attach the settings to every scene."""
    bpy.types.Scene.image_to_mesh = PointerProperty(type=ImageToMeshSettings)


def unregister_props() -> None:
    """Remove the settings from scenes."""
    del bpy.types.Scene.image_to_mesh
