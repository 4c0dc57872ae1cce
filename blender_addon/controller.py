"""The one job (or batch) the add-on runs at a time, driven by a ``bpy.app.timers`` callback.

Threads: the runner's stdout is read on :class:`process.RunnerProcess`'s reader thread into a
queue; :func:`tick` — registered with ``bpy.app.timers`` and so run on Blender's main thread —
drains the queue into :class:`state.JobState`, tags the panel for redraw and, when the runner has
finished, imports the GLB. Nothing here touches Blender data from another thread.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import bpy

from . import config, importer
from .batch import BatchRun
from .process import BAD_LINE, EOF, EVENT, RunnerProcess, SpawnError, runner_env
from .state import CANCELLED, DONE, FAILED, JobState

TICK_SECONDS = 0.1
CANCEL_GRACE = 8.0  # > the runner's own SIGTERM→SIGKILL grace (stageload.guard: 5 s)


@dataclass
class Launch:
    """Everything one run needs besides the image: interpreter, runtime folder, settings.

    ``extra_path``: folders after ``runtime`` on the runner's PYTHONPATH (the bundled wheels);

    ``output_dir``: folder for GLBs and traces; ``location``: where the object goes (metres);
    ``collection``: name of the collection the result goes into (under "Image to Mesh" unless it
    is that one); ``spec_kwargs``: :class:`config.JobSpec` fields other than the paths."""
    python: str
    runtime: Path
    output_dir: Path
    location: tuple[float, float, float]
    extra_path: tuple[str, ...] = ()
    collection: str = importer.ROOT_COLLECTION
    spec_kwargs: dict = field(default_factory=dict)


class Controller:
    """Holds the running job, its :class:`JobState`, an optional :class:`BatchRun`, and the
    results. A single module-level instance, :data:`CONTROLLER`, serves the UI."""

    def __init__(self) -> None:
        self.state = JobState()
        self.job: RunnerProcess | None = None
        self.spec: config.JobSpec | None = None
        self.launch: Launch | None = None
        self.batch: BatchRun | None = None
        self.batch_summary: str = ""
        self.last_object: str = ""
        self.last_trace: str = ""
        self.bad_lines: list[str] = []
        self._eof = False

    # ------------------------------------------------------------------ queries
    @property
    def running(self) -> bool:
        """True while a job or a batch is in progress (a runner may be alive)."""
        return self.job is not None or (self.batch is not None and not self.batch.finished)

    # ------------------------------------------------------------------ starting
    def start_single(self, image: Path, launch: Launch) -> None:
        """Start one run of ``image``. A failure to start is recorded in :attr:`state` (the
        panel shows it) and re-raised as :class:`config.ConfigError` / :class:`SpawnError`."""
        self.batch = None
        self.batch_summary = ""
        self._spawn(image, launch)

    def start_batch(self, folder: Path, images: list[Path], launch: Launch) -> None:
        """Run ``images`` one after another (results in ``launch.collection``)."""
        self.batch = BatchRun(folder, images)
        self.batch_summary = ""
        self._next_in_batch(launch)

    def _next_in_batch(self, launch: Launch) -> None:
        while self.batch is not None and not self.batch.finished:
            image = self.batch.next_image()
            try:
                self._spawn(image, launch)
                return
            except (config.ConfigError, SpawnError) as exc:
                self.batch.record("failed", str(exc))
                if isinstance(exc, SpawnError):
                    break  # the interpreter itself is unusable: the others would fail the same
        if self.batch is not None:
            self.batch_summary = self.batch.summary()
            notify("INFO", f"Image to Mesh: {self.batch_summary}")

    def _spawn(self, image: Path, launch: Launch) -> None:
        self.launch = launch
        self.state.begin(str(image))
        self._eof = False
        try:
            glb, trace = config.free_output_paths(launch.output_dir, image.stem)
            spec = config.JobSpec(image=image, output=glb, trace=trace, **launch.spec_kwargs)
            job = RunnerProcess(spec.argv(launch.python),
                                runner_env(launch.runtime, launch.extra_path), cwd=launch.runtime)
            job.start()
        except config.ConfigError as exc:
            self.state.fail("settings", str(exc))
            raise
        except SpawnError as exc:
            self.state.fail("spawn", str(exc),
                            "Set the runner's Python in the add-on preferences and press Check.")
            raise
        self.spec, self.job = spec, job
        self.state.output, self.state.trace = str(glb), str(trace)
        self.last_trace = str(trace)
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
        """Apply queued events; on the runner's end, import or record the failure and start the
        next image of a batch. Returns the seconds until the next call, None to stop."""
        job = self.job
        if job is None:
            return None
        for kind, payload in job.drain():
            if kind == EVENT:
                self.state.apply(payload)
            elif kind == BAD_LINE:
                self.bad_lines.append(str(payload))
                print(f"Image to Mesh: {payload}")
            elif kind == EOF:
                self._eof = True
        _redraw()
        if not self._eof or job.poll() is None:
            return TICK_SECONDS  # still running, or stdout closed and the process exiting
        self._finish_job()
        if self.batch is not None and not self.batch.finished and self.launch is not None:
            self._next_in_batch(self.launch)
        elif self.batch is not None and not self.batch_summary:
            self.batch_summary = self.batch.summary()
            notify("INFO", f"Image to Mesh: {self.batch_summary}")
        _redraw()
        return TICK_SECONDS if self.job is not None else None

    def _finish_job(self) -> None:
        job, spec, launch = self.job, self.spec, self.launch
        if job is None:
            return
        rc = job.wait(timeout=10)
        job.close(timeout=1.0)
        self.state.finish_process(rc, job.stderr_tail())
        self.job = None
        outcome, detail = "failed", ""
        if self.state.status == CANCELLED or job.cancel_requested:
            self.state.mark_cancelled()
            outcome = "cancelled"
        elif self.state.status == FAILED:
            err = self.state.error or {}
            detail = f"{err.get('kind')}: {err.get('message')}"
        elif self.state.result is not None and spec is not None and launch is not None:
            self.state.mark_importing()
            try:
                obj = self._import(spec, launch)
            except (importer.MeshImportError, RuntimeError) as exc:
                self.state.fail("import_failed", str(exc),
                                "Open the GLB with File › Import › glTF to see Blender's message.")
                detail = f"import_failed: {exc}"
            else:
                self.state.mark_done()
                self.last_object = obj.name
                outcome, detail = "done", obj.name
                _undo_push(f"Image to Mesh: import {obj.name}")
        _notify(self.state, detail if outcome == "done" else "")
        if self.batch is not None and not self.batch.cancelled and outcome != "cancelled":
            self.batch.record(outcome, detail)

    def _import(self, spec: config.JobSpec, launch: Launch) -> bpy.types.Object:
        with importer.window_context():
            return self._import_in_window(spec, launch)

    def _import_in_window(self, spec: config.JobSpec, launch: Launch) -> bpy.types.Object:
        scene = bpy.context.scene
        root = importer.ensure_collection(scene)
        coll = root if launch.collection == importer.ROOT_COLLECTION else \
            importer.ensure_collection(scene, launch.collection, parent=root)
        location = list(launch.location)
        if self.batch is not None:
            # Side by side along X, 1.5 m apart, so a batch's results do not overlap; only the
            # objects already imported count, so the first success is at the cursor even after
            # failed images.
            location[0] += 1.5 * sum(1 for i in self.batch.items if i.status == "done")
        meta = {"backend": spec.backend, "seed": spec.seed, "peak": self.state.peak,
                "trace": self.state.trace, "image": str(spec.image)}
        # Named like its GLB (goblin_2.glb → goblin_2), so a later run of the same image can be
        # told apart from the first and matched with its file and trace.
        return importer.import_glb(self.state.output, Path(self.state.output).stem, location,
                                   coll, meta)


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
        CONTROLLER.state.fail("internal", f"Image to Mesh failed while updating: {exc!r}")
        if CONTROLLER.job is not None:
            CONTROLLER.job.cancel(grace=CANCEL_GRACE)
            CONTROLLER.job = None
        import traceback
        traceback.print_exc()
        return None


def run_until_idle(timeout: float, step: float = TICK_SECONDS) -> bool:
    """Call :func:`tick` until it returns None (what Blender's event loop does with the timer);
    for scripts and tests, where no event loop runs. Returns False on ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if tick() is None:
            return True
        time.sleep(step)
    return False
