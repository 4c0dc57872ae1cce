"""The N-panel View3D › Sidebar › "Image to Mesh" and the scene settings it edits.

The panel only draws: the job's content comes from :meth:`state.JobState.view` (pure, tested on a
recorded event stream), the batch's from :class:`batch.BatchRun`.
"""
from __future__ import annotations

import bpy
from bpy.props import EnumProperty, IntProperty, PointerProperty, StringProperty

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
ROW_ICONS = {COMPLETE: "CHECKMARK", ACTIVE: "PLAY", "pending": "DOT"}


class ImageToMeshSettings(bpy.types.PropertyGroup):
    """Per-scene panel settings (saved with the .blend)."""
    image: StringProperty(name="Image", subtype="FILE_PATH", default="",
                          description="Picture of a character (PNG with transparency works best)")
    backend: EnumProperty(name="Backend", items=BACKEND_ITEMS, default="builtin")
    seed: IntProperty(name="Seed", default=0, min=0, description="Random seed of the run")
    texture_size: EnumProperty(name="Texture", items=TEXTURE_ITEMS, default="1024")
    pipeline_type: EnumProperty(name="Pipeline", items=PIPELINE_ITEMS, default="1024_cascade")
    batch_folder: StringProperty(name="Folder", subtype="DIR_PATH", default="",
                                 description="Folder of images for a batch run")


class VIEW3D_PT_image_to_mesh(bpy.types.Panel):
    """Image → textured mesh, with the runner's stages and memory"""
    bl_label = "Image to Mesh"
    bl_idname = "VIEW3D_PT_image_to_mesh"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Image to Mesh"

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


CLASSES = (ImageToMeshSettings, VIEW3D_PT_image_to_mesh)


def register_props() -> None:
    """Attach the settings to every scene."""
    bpy.types.Scene.image_to_mesh = PointerProperty(type=ImageToMeshSettings)


def unregister_props() -> None:
    """Remove the settings from scenes."""
    del bpy.types.Scene.image_to_mesh
