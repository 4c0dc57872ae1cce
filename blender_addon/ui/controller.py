"""The one job (or batch) the add-on runs at a time, driven by a ``bpy.app.timers`` callback.

Threads: the runner's stdout is read on :class:`process.RunnerProcess`'s reader thread into a
queue; :func:`tick` — registered with ``bpy.app.timers`` and so run on Blender's main thread —
drains the queue into :class:`state.JobState`, tags the panel for redraw and, when the runner has
finished, imports the GLB. Nothing here touches Blender data from another thread.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import bpy

from ..runner_client import config
from ..runner_client.batch_state import BatchRun
from ..runner_client.job_spec import JobSettings, JobSpec
from ..runner_client.nodes import NodeBoard
from ..runner_client.process import BAD_LINE, EOF, EVENT, RunnerProcess, SpawnError, runner_env
from ..runner_client.state import CANCELLED, DONE, FAILED, RUNNING, STARTING, JobState
from ..runner_client.view import PanelView
from . import importer

TICK_SECONDS = 0.1
CANCEL_GRACE = 8.0  # > the runner's own SIGTERM→SIGKILL grace (stageload.guard: 5 s)


@dataclass
class Launch:
    """Everything one run needs besides the image: interpreter, runtime folder, settings.

    ``extra_path``: folders after ``runtime`` on the runner's PYTHONPATH (the bundled wheels);
    ``output_dir``: folder for GLBs and traces; ``location``: where the object goes (metres);
    ``collection``: name of the collection the result goes into (under "Image to Mesh" unless it
    is that one); ``settings``: the job's :class:`job.JobSettings` (every option of the
    runner's options table, checked)."""
    python: str
    runtime: Path
    output_dir: Path
    location: tuple[float, float, float]
    extra_path: tuple[str, ...] = ()
    collection: str = importer.ROOT_COLLECTION
    settings: JobSettings = field(default_factory=JobSettings)


class Controller:
    """Holds the running job (one image, or a whole folder as one ``runner batch``), its
    :class:`JobState` (the image now running), an optional :class:`BatchRun` (the batch's own
    state: its images' outcomes, the image now running, its stage plan), and the results.
    A single module-level instance, :data:`CONTROLLER`, serves the UI; its fields change
    through its methods only (the operators call them)."""

    def __init__(self) -> None:
        self.state = JobState()
        self.job: RunnerProcess | None = None
        self.spec: JobSpec | None = None
        self.launch: Launch | None = None
        self.batch: BatchRun | None = None
        self.batch_summary: str = ""
        self.nodes = NodeBoard()  # a cluster batch's nodes: which image runs where
        self.last_object: str = ""
        self.source: str = ""  # a re-export's: the object it re-exports (its name)
        self.last_trace: str = ""
        self.bad_lines: list[str] = []
        self._eof = False

    # ------------------------------------------------------------------ queries
    @property
    def running(self) -> bool:
        """True while a job or a batch is in progress (a runner may be alive)."""
        return self.job is not None

    def view(self, now: float | None = None) -> PanelView:
        """What the panel's job box draws now: the job's view (``JobState.view``); once a batch
        has ended, headed by the batch's outcome (``BatchRun.view``: "Done with failures: 9 of
        15 done, 6 failed", the last error still shown), not by its last image's."""
        view = self.state.view(now)
        return view if self.batch is None else self.batch.view(view)

    # ------------------------------------------------------------------ refusing
    def refuse(self, message: str, image: str = "", forget_batch: bool = False) -> None:
        """Record a settings problem found before anything was spawned (the panel shows it
        as the job's failure); ``forget_batch``: a refused batch also clears the last batch's
        results from the Batch box."""
        if forget_batch:
            self.batch, self.batch_summary = None, ""
        self.state.begin(image)
        self.state.fail("settings", message)

    # ------------------------------------------------------------------ starting
    def start_single(self, image: Path, launch: Launch) -> None:
        """Start one run of ``image``. A failure to start is recorded in :attr:`state` (the
        panel shows it) and re-raised as :class:`config.ConfigError` / :class:`SpawnError`."""
        self.batch, self.batch_summary = None, ""
        self.state.begin(str(image))
        try:
            glb, trace = config.free_output_paths(launch.output_dir, image.stem)
        except config.ConfigError as exc:
            self.state.fail("settings", str(exc))
            raise
        spec = JobSpec(image=image, output=glb, trace=trace, settings=launch.settings)
        self._spawn(spec.argv(launch.python), spec, launch)
        self.state.output, self.state.trace = str(glb), str(trace)
        self.last_trace = str(trace)

    def start_reexport(self, source, asset: Path, launch: Launch) -> None:
        """Re-export ``source`` (the Blender object imported from a kept asset) from ``asset``
        (its ``.asset.npz``, checked by ``importer.recorded_asset``) with ``launch.settings``'
        export levers: ``python -m runner export`` (a :class:`JobSpec` of kind ``export``),
        writing a new GLB beside the asset, ``NAME_reexport.glb`` (``_2`` … when taken:
        never the user's file); the result is imported beside ``source``. Raises like
        :meth:`start_single`."""
        self.batch, self.batch_summary = None, ""
        self.state.begin(str(asset))
        base = asset.name[: -len(importer.ASSET_SUFFIX)] if \
            asset.name.endswith(importer.ASSET_SUFFIX) else asset.stem
        try:
            glb, trace = config.free_output_paths(asset.parent, f"{base}_reexport")
        except config.ConfigError as exc:
            self.state.fail("settings", str(exc))
            raise
        spec = JobSpec(image=asset, output=glb, trace=trace, settings=launch.settings,
                       kind="export")
        self.source = source.name
        self._spawn(spec.argv(launch.python), spec, launch)
        self.state.output, self.state.trace = str(glb), str(trace)
        self.last_trace = str(trace)

    def start_batch(self, folder: Path, count: int, launch: Launch) -> None:
        """Run every image of ``folder`` (``count`` of them) as one ``runner batch`` job into
        ``config.batch_output_dir``; its manifest makes a second run resume (images done
        before are skipped). Results go into ``launch.collection``, after any object already
        there. With a cluster address in ``launch.settings`` the runner runs the images on
        that Ray cluster's nodes at once: their events go to :attr:`nodes` (one line per node)
        and each GLB is imported as its ``batch_item`` arrives. Raises like
        :meth:`start_single`."""
        self.batch, self.batch_summary = BatchRun(folder, count), ""
        self.nodes = NodeBoard()
        self.state.begin(str(folder))
        out = config.batch_output_dir(launch.output_dir, folder)
        spec = JobSpec(image=folder, output=out, trace=out, settings=launch.settings,
                       kind="batch")
        self._spawn(spec.argv(launch.python), spec, launch)

    def _spawn(self, argv: list[str], spec: JobSpec, launch: Launch) -> None:
        self.launch, self._eof = launch, False
        job = RunnerProcess(argv, runner_env(launch.runtime, launch.extra_path),
                            cwd=launch.runtime)
        try:
            job.start()
        except SpawnError as exc:
            self.state.fail("spawn", str(exc),
                            "Set the runner's Python in the add-on preferences and press Check.")
            if self.batch is not None:
                self.batch.ended = True
            raise
        self.spec, self.job = spec, job
        if not bpy.app.timers.is_registered(tick):
            bpy.app.timers.register(tick, first_interval=TICK_SECONDS, persistent=True)

    # ------------------------------------------------------------------ cancel / shutdown
    def cancel(self, block: bool = False) -> None:
        """Stop the current job (and the rest of a batch). ``block``: wait until the runner has
        exited (unregister, quit); otherwise the timer keeps reaping it in the background."""
        if self.batch is not None and not self.batch.finished:
            self.batch.cancelled = True
        if self.job is not None:
            self.job.cancel(grace=CANCEL_GRACE, block=block)
            self.state.mark_cancelled()
            if block:
                self._finish_job()

    def crashed(self, exc: Exception) -> None:
        """The timer raised ``exc`` (a bug): the job fails saying so, its runner is stopped in
        the background, and the traceback goes to the system console."""
        self.state.fail("internal", f"Image to Mesh failed while updating: {exc!r}")
        if self.job is not None:
            self.job.cancel(grace=CANCEL_GRACE)
            self.job = None
        import traceback  # only on this rare path

        traceback.print_exc()

    def shutdown(self) -> None:
        """Stop everything now (add-on disabled, Blender quitting): no runner is left alive."""
        self.cancel(block=True)
        try:
            if bpy.app.timers.is_registered(tick):
                bpy.app.timers.unregister(tick)
        except Exception:  # at interpreter exit bpy may already be torn down
            pass

    # ------------------------------------------------------------------ main-thread work
    def tick(self) -> float | None:
        """Apply queued events (a batch's finished images are imported as they come); at the
        runner's end, import or record the outcome. Returns the seconds until the next call,
        None to stop."""
        job = self.job
        if job is None:
            return None
        for kind, payload in job.drain():
            if kind == EVENT:
                self._event(payload)
            elif kind == BAD_LINE:
                self.bad_lines.append(str(payload))
                print(f"Image to Mesh: {payload}")
            elif kind == EOF:
                self._eof = True
        _redraw()
        if not self._eof or job.poll() is None:
            return TICK_SECONDS  # still running, or stdout closed and the process exiting
        self._finish_job()
        _redraw()
        return None

    def _event(self, ev: dict) -> None:
        """One event: a single run's go to :attr:`state`; a batch's are routed per image, a
        cluster batch's jobs' (they carry ``node``, several images at once) to
        :attr:`nodes`."""
        if self.batch is None:
            self.state.apply(ev)
            return
        kind = ev.get("event")
        if kind == "hello":
            stages = ev.get("stages")
            self.batch.stages = list(stages) if isinstance(stages, list) else []
        elif kind == "batch_item":
            self.nodes.apply(ev)
            self._batch_item(ev)
        elif kind == "batch_done":
            self.batch.ended = True
        elif self.nodes.apply(ev):  # a cluster job's: the Batch box's node lines show it
            if kind == "placed" and self.state.status == STARTING:
                self.state.transition(RUNNING)  # the batch runs; no single image's stages
        else:
            self._begin_item(ev.get("item"), ev.get("path"), ev)
            self.state.apply(ev)

    def _begin_item(self, index, image, ev: dict) -> None:
        """Reset :attr:`state` for the batch's image ``index`` when it is a new one."""
        if index is None or index == self.batch.item:
            return
        self.batch.item = index
        self.state.begin(str(image or ""))
        self.state.apply({"event": "hello", "v": ev.get("v"), "t": ev.get("t"),
                          "stages": self.batch.stages})

    def _batch_item(self, ev: dict) -> None:
        """A batch image is finished: import it (done, or skipped but not in the scene yet),
        record the outcome, say so."""
        image = Path(str(ev.get("image") or "?"))
        status, output = ev.get("status"), ev.get("output")
        self._begin_item(ev.get("index"), image, ev)
        detail = ""
        err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
        if status == "failed":
            detail = f"{err.get('kind')}: {err.get('message')}"
            self.state.apply({"v": ev.get("v"), "event": "error", "t": ev.get("t"), **err})
        elif status in ("done", "skipped") and isinstance(output, str):
            # no result event in a batch: the item's batch_item ends its rows (the last stage
            # would stay running after the batch otherwise)
            self.state.complete(ev.get("t") if isinstance(ev.get("t"), (int, float)) else None)
            if status == "skipped" and importer.imported(output):
                self.state.mark_skipped()  # nothing runs or imports: not "starting…" for good
            else:
                self.state.output = output
                self.state.trace = str(ev.get("trace") or "")
                self.last_trace = self.state.trace
                if isinstance(ev.get("peak"), (int, float)):
                    self.state.peak = ev["peak"]
                name = self._import_result(image)
                err = self.state.error or {}
                status, detail = ((status, name) if name else
                                  ("failed", f"{err.get('kind')}: {err.get('message')}"))
        self.batch.record(image, str(status), detail, ev.get("count")
                          if isinstance(ev.get("count"), int) else None)

    def _finish_job(self) -> None:
        job = self.job
        if job is None:
            return
        rc = job.wait(timeout=10)
        job.close(timeout=1.0)
        self.job = None
        if self.batch is not None:
            self._finish_batch(rc, job)
            return
        self.state.finish_process(rc, job.stderr_tail())
        if self.state.status == CANCELLED or job.cancel_requested:
            self.state.mark_cancelled()
        elif self.state.result is not None:
            self._import_result(Path(self.spec.image))
        _notify(self.state, self.last_object)

    def _finish_batch(self, rc: int | None, job: RunnerProcess) -> None:
        batch = self.batch
        if job.cancel_requested:
            batch.cancelled = True
            self.state.mark_cancelled()
        elif not batch.ended:  # the runner died without batch_done
            self.state.finish_process(rc, job.stderr_tail())
        if self.state.error and self.state.status == FAILED and not batch.items:
            err = self.state.error  # e.g. cluster_unavailable: the batch never started
            batch.error = " ".join(x for x in (err.get("message"), err.get("hint")) if x)
        batch.ended = True
        self.batch_summary = batch.summary()
        notify("WARNING" if batch.cancelled else "INFO", f"Image to Mesh: {self.batch_summary}")

    def _import_result(self, image: Path) -> str:
        """Import the finished GLB of :attr:`state` (its object named like the GLB, placed at
        the cursor, or in a batch after the objects already in the batch's collection), push
        one undo step for it, and return the object's name; "" when the import failed (the
        state says why)."""
        spec, launch = self.spec, self.launch
        self.state.mark_importing()
        meta = {"backend": spec.backend, "seed": spec.seed, "peak": self.state.peak,
                "trace": self.state.trace, "image": str(image), "asset": self._kept_asset()}
        location, collection = launch.location, None
        source = bpy.data.objects.get(self.source) if spec.kind == "export" else None
        if source is not None:
            location, collection = beside(source, meta)
        try:
            obj = importer.import_glb(self.state.output, Path(self.state.output).stem,
                                      location, collection or self._collection(), meta,
                                      after_existing=self.batch is not None)
        except (importer.MeshImportError, RuntimeError) as exc:
            self.state.fail("import_failed", str(exc),
                            "Open the GLB with File › Import › glTF to see Blender's message.")
            return ""
        self.state.mark_done()
        self.last_object = obj.name
        _undo_push(f"Image to Mesh: import {obj.name}")
        if self.batch is not None:
            _notify(self.state, obj.name)
        return obj.name

    def _kept_asset(self) -> str | None:
        """The asset the imported object can be re-exported from: a re-export's own asset; a
        run's ``result`` ``info.asset`` (``--keep-asset``); a batch image's ``NAME.asset.npz``
        beside its GLB when the job kept assets. The importer records it only when the file
        exists (``importer.asset_file``)."""
        spec = self.spec
        if spec.kind == "export":
            return str(spec.image)
        if not spec.settings.values().get("keep_asset"):
            return None
        info = (self.state.result or {}).get("info")
        if self.batch is None and isinstance(info, dict) and isinstance(info.get("asset"), str):
            return info["asset"]
        glb = Path(self.state.output)
        return str(glb.with_name(glb.stem + importer.ASSET_SUFFIX))

    def _collection(self) -> bpy.types.Collection:
        scene = bpy.context.scene
        root = importer.ensure_collection(scene)
        name = self.launch.collection
        return root if name == importer.ROOT_COLLECTION else \
            importer.ensure_collection(scene, name, parent=root)


def beside(source, meta: dict) -> tuple[tuple, bpy.types.Collection | None]:
    """Where a re-export of ``source`` goes: ``source``'s collection, one step along X past
    the right-most of ``source`` and every object re-exported from the same asset
    (``meta["asset"]``), at ``source``'s Y and Z — so a re-export of a re-export lands next to
    the last one, never a step further; with ``source``'s backend, seed and image in ``meta``
    (updated). The step (metres) is ``source``'s width plus 0.5, at least
    ``importer.BATCH_SPACING``."""
    for key, prop in (("backend", importer.PROP_BACKEND), ("seed", importer.PROP_SEED),
                      ("image", importer.PROP_IMAGE)):
        value = source.get(prop)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            meta[key] = value
    asset = meta.get("asset")
    family = [o for o in bpy.data.objects
              if asset is not None and o.get(importer.PROP_ASSET) == asset]
    right = max(float(o.location.x) for o in [source, *family])
    step = max(importer.BATCH_SPACING, float(source.dimensions.x) + 0.5)
    _x, y, z = source.location
    collection = source.users_collection[0] if source.users_collection else None
    return (right + step, y, z), collection


def _redraw(wm=None) -> int:
    """Tag the sidebar region (``UI``) of every 3D View for redraw so the panel shows the new
    state — only that region, not the whole viewport (10 times a second during a run).
    ``wm``: the window manager (default: the context's). Returns the number of regions
    tagged."""
    wm = bpy.context.window_manager if wm is None else wm
    if wm is None:
        return 0
    tagged = 0
    for win in wm.windows:
        for area in win.screen.areas:
            if area.type != "VIEW_3D":
                continue
            for region in area.regions:
                if region.type == "UI":
                    region.tag_redraw()
                    tagged += 1
    return tagged


def _undo_push(message: str) -> None:
    """Make the import one undo step of its own (``bpy.ops.ed.undo_push``): the import runs in
    a timer, after the Generate operator has returned, so without a step Ctrl+Z would also
    revert the user's previous action and redo could never bring the mesh back."""
    with importer.window_context():
        bpy.ops.ed.undo_push(message=message)


def _notify(state: JobState, name: str) -> None:
    """Say how a job ended in the status bar and the Info log (``image_to_mesh.notify``
    reports it), not only in the sidebar, which may be closed."""
    if state.status == DONE:
        level, text = "INFO", f"Image to Mesh: {name} imported ({state.output})"
    elif state.status == CANCELLED:
        level, text = "WARNING", "Image to Mesh: cancelled"
    else:
        err = state.error or {}
        level, text = "ERROR", f"Image to Mesh failed: {err.get('message') or err.get('kind')}"
    notify(level, text)


def notify(level: str, text: str) -> None:
    """Report ``text`` at ``level`` (INFO / WARNING / ERROR) through the notify operator, so it
    reaches the status bar and the Info editor from a timer (operators report there; a timer
    cannot) — and stdout in background mode."""
    try:
        with importer.window_context():
            bpy.ops.image_to_mesh.notify(level=level, message=text)
    except (AttributeError, RuntimeError, KeyError):  # unregistered while shutting down
        print(text)


CONTROLLER = Controller()


def tick() -> float | None:
    """The ``bpy.app.timers`` callback (a module-level function so it can be unregistered)."""
    try:
        return CONTROLLER.tick()
    except Exception as exc:  # a timer that raises is dropped silently by Blender: say why
        CONTROLLER.crashed(exc)
        return None
