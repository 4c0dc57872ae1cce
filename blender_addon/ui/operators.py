"""Operators: Generate, Cancel, Batch over a folder, Re-export a kept asset, Open memory chart.

Each operator only validates and starts work; the runner runs in its own process and the
controller's timer does the rest on the main thread.
"""
from __future__ import annotations

from pathlib import Path

import bpy

from ..runner_client import config
from ..runner_client import job_spec as job
from ..runner_client.process import SpawnError, run_quick, runner_env
from . import importer
from .controller import CONTROLLER, Launch
from .preferences import get_prefs, interpreter_for, output_dir


def make_launch(context, collection: str = importer.ROOT_COLLECTION,
                command: str = "run", interpreter_backend: str | None = None) -> Launch:
    """A :class:`Launch` from the preferences and the scene's panel settings: the one job
    description (``job.settings_from``: every option of the runner's options table that the
    runner's ``command`` takes — ``run`` for Generate, ``batch`` for Run Batch, which alone
    reads the cluster address, ``export`` for Re-export — checked) and the interpreter for its
    backend (or for ``interpreter_backend``: a re-export runs with the built-in backend's, as
    it needs no torch), resolved now.

    Raises :class:`config.ConfigError` (a setting the runner would refuse; interpreter, runtime
    or output folder unusable) before anything is spawned."""
    prefs = get_prefs(context)
    settings = job.settings_from(context.scene.image_to_mesh, prefs, command=command)
    interpreter = interpreter_for(prefs, interpreter_backend or settings.backend)
    return Launch(python=interpreter.python, extra_path=interpreter.extra_path,
                  runtime=config.runtime_dir(), output_dir=output_dir(prefs),
                  location=tuple(context.scene.cursor.location), collection=collection,
                  settings=settings)


class _WhenIdle:
    """Mixin for the operators that start a job: available only while none is running."""

    @classmethod
    def poll(cls, context):
        return not CONTROLLER.running


class IMAGE_TO_MESH_OT_generate(_WhenIdle, bpy.types.Operator):
    """Turn the chosen image into a textured mesh at the 3D cursor (runs in the background)"""
    bl_idname = "image_to_mesh.generate"
    bl_label = "Generate"
    # An undo step for pressing Generate; the import, which lands later from a timer, pushes
    # its own (controller._undo_push), so Ctrl+Z removes exactly the mesh and redo restores it.
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        s = context.scene.image_to_mesh
        try:
            image = config.validate_image(bpy.path.abspath(s.image))
            launch = make_launch(context)
        except config.ConfigError as exc:
            return _refuse(self, str(exc), s.image)
        try:
            CONTROLLER.start_single(image, launch)
        except (config.ConfigError, SpawnError) as exc:  # already recorded in the state
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        return {"FINISHED"}


def _refuse(op, message: str, image: str = "", forget_batch: bool = False) -> set[str]:
    """Record a settings problem found before spawning (the panel shows it: see
    ``Controller.refuse``) and report it."""
    CONTROLLER.refuse(message, image, forget_batch=forget_batch)
    op.report({"ERROR"}, message)
    return {"CANCELLED"}


class IMAGE_TO_MESH_OT_cancel(bpy.types.Operator):
    """Stop the running job (and the rest of a batch); nothing is imported"""
    bl_idname = "image_to_mesh.cancel"
    bl_label = "Cancel"

    @classmethod
    def poll(cls, context):
        return CONTROLLER.running

    def execute(self, context):
        CONTROLLER.cancel()
        return {"FINISHED"}


class IMAGE_TO_MESH_OT_batch(_WhenIdle, bpy.types.Operator):
    """Run every image of the batch folder, one after another (with a cluster address in the
    preferences: at once on the Ray cluster's nodes); failures do not stop the rest. Running it
    again resumes: images already done with the same settings are skipped"""
    bl_idname = "image_to_mesh.batch"
    bl_label = "Run Batch"
    bl_options = {"REGISTER", "UNDO"}  # each imported object then pushes its own undo step

    def execute(self, context):
        s = context.scene.image_to_mesh
        try:
            folder = Path(bpy.path.abspath(s.batch_folder)).expanduser()
            images = config.list_images(folder)
            if not images:
                raise config.ConfigError(f"No images (PNG, JPEG, WebP …) in {folder}")
            launch = make_launch(context, collection=f"Batch {folder.name or folder}",
                                 command="batch")
        except config.ConfigError as exc:
            return _refuse(self, str(exc), forget_batch=True)
        try:
            CONTROLLER.start_batch(folder, len(images), launch)  # failures: per image
        except SpawnError as exc:  # already recorded in the state
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        where = f" on the cluster {launch.settings.cluster}" if launch.settings.cluster else ""
        self.report({"INFO"}, f"Batch of {len(images)} images started{where}")
        return {"FINISHED"}


class IMAGE_TO_MESH_OT_reexport(bpy.types.Operator):
    """Export the active object's kept asset again with the Export levers (decimation target,
    texture, budget) into a new GLB, imported beside it; minutes less than generating again"""
    bl_idname = "image_to_mesh.reexport"
    bl_label = "Re-export"
    bl_options = {"REGISTER", "UNDO"}  # the import, later from the timer, pushes its own step

    @classmethod
    def poll(cls, context):
        why = reexport_unavailable(context)
        if why:
            cls.poll_message_set(why)  # Blender shows it in the greyed button's tooltip
        return not why

    def execute(self, context):
        obj = context.active_object
        asset, why = importer.recorded_asset(obj)  # again: the file may be gone since poll
        if asset is None:
            return _refuse(self, why, str(obj.get(importer.PROP_ASSET, "")) if obj else "")
        try:
            launch = make_launch(context, command="export",
                                 interpreter_backend=REEXPORT_INTERPRETER)
        except config.ConfigError as exc:
            return _refuse(self, str(exc), str(asset))
        try:
            CONTROLLER.start_reexport(obj, asset, launch)
        except (config.ConfigError, SpawnError) as exc:  # already recorded in the state
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        self.report({"INFO"}, f"Re-exporting {obj.name} from {asset.name}")
        return {"FINISHED"}


#: The backend whose interpreter runs ``runner export`` (no torch needed: the bounded export
#: engine; Blender's own Python with the bundled wheels unless the Runner Python is set).
REEXPORT_INTERPRETER = "builtin"


def reexport_unavailable(context) -> str:
    """Why Re-export cannot run now ("" when it can): a job is running, or the active object
    has no recorded, existing kept asset (``importer.recorded_asset``)."""
    if CONTROLLER.running:
        return "A job is running: wait for it or cancel it first."
    return importer.recorded_asset(context.active_object)[1]


def chart_path(trace: str | Path) -> Path:
    """Where the chart of ``trace`` goes: next to it, ``<name>.chart.png``."""
    trace = Path(trace)
    name = trace.name[: -len(".trace.jsonl")] if trace.name.endswith(".trace.jsonl") else trace.stem
    return trace.with_name(f"{name}.chart.png")


class IMAGE_TO_MESH_OT_open_chart(bpy.types.Operator):
    """Plot the last run's memory trace (footprint over time, stage bands) and show it"""
    bl_idname = "image_to_mesh.open_chart"
    bl_label = "Memory Chart"

    @classmethod
    def poll(cls, context):
        return bool(CONTROLLER.last_trace) and Path(CONTROLLER.last_trace).is_file()

    def execute(self, context):
        trace = Path(CONTROLLER.last_trace)
        png = chart_path(trace)
        try:
            # matplotlib is among the bundled wheels: the built-in backend's interpreter plots.
            interpreter = interpreter_for(get_prefs(context), "builtin")
            runtime = config.runtime_dir()
            rc, out, err = run_quick([interpreter.python, "-m", "stageload", "plot", str(trace),
                                      "-o", str(png)],
                                     runner_env(runtime, interpreter.extra_path), cwd=runtime,
                                     timeout=120)
        except (config.ConfigError, SpawnError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if rc != 0 or not png.is_file():
            tail = (err.strip().splitlines() or ["no output"])[-1]
            self.report({"ERROR"}, f"Could not plot {trace.name}: {tail}")
            return {"CANCELLED"}
        img = bpy.data.images.load(str(png), check_existing=True)
        img.reload()
        shown = False
        for win in context.window_manager.windows:
            for area in win.screen.areas:
                if area.type == "IMAGE_EDITOR":
                    area.spaces.active.image = img
                    shown = True
        if not shown and not bpy.app.background:
            bpy.ops.wm.path_open(filepath=str(png))
        self.report({"INFO"}, f"Memory chart: {png}")
        return {"FINISHED"}


class IMAGE_TO_MESH_OT_notify(bpy.types.Operator):
    """Report a message in the status bar and the Info log (used by the add-on's timer)"""
    bl_idname = "image_to_mesh.notify"
    bl_label = "Image to Mesh Notice"
    bl_options = {"INTERNAL"}

    level: bpy.props.EnumProperty(items=[(x, x.title(), "") for x in ("INFO", "WARNING",
                                                                       "ERROR")])
    message: bpy.props.StringProperty()

    def execute(self, context):
        self.report({self.level}, self.message)
        return {"FINISHED"}


CLASSES = (IMAGE_TO_MESH_OT_notify, IMAGE_TO_MESH_OT_generate, IMAGE_TO_MESH_OT_cancel,
           IMAGE_TO_MESH_OT_batch, IMAGE_TO_MESH_OT_reexport,
           IMAGE_TO_MESH_OT_open_chart)
