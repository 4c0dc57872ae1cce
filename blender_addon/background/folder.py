"""``headless.py FOLDER --glb OUTDIR [--blend OUT.blend] [--cluster ADDRESS]``: a folder batch
without Blender's window, the same ``python -m runner batch`` job Run Batch starts (the one job
description, ``job.JobSpec.batch_argv``), on this machine or — with ``--cluster`` (the options
table's, as the preference is) — on a Ray cluster's nodes.

Blocking, like the single run: the runner's events are read here; each GLB is imported into one
scene (collection ``Batch <folder>``, side by side) as its ``batch_item`` arrives, so a
``--blend`` holds every image that finished; stderr gets one line per placement, stage (with the
node it runs on) and finished image. The runner's manifest in OUTDIR makes a second run resume.
Exit status: 0 when every image is done (or was done before), else the runner's (5 some image
failed, 37 cluster_unavailable …, docs/blender.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..runner_client import config, events, job_spec, nodes, process, state

PREFIX = "image-to-mesh"


class BatchFailed(Exception):
    """The batch as a whole failed: ``code`` the exit status (``headless.Failure`` reports it)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def _say(text: str) -> None:
    print(f"{PREFIX}: {text}", file=sys.stderr, flush=True)


def check_args(ns, exit_code) -> None:
    """Refuse what a batch cannot take (``exit_code(kind)`` gives the status): no ``--glb``
    output folder, ``--glb`` naming a file, ``--preview``, ``--trace`` (each image's trace goes
    next to its GLB), a ``--blend`` that exists (without ``--overwrite``) or whose folder
    cannot be made; a missing ``--blend`` folder is created. Raises :class:`BatchFailed`."""
    if ns.glb is None:
        raise BatchFailed(f"{ns.image} is a folder: give --glb OUTDIR, the folder for its GLBs "
                          "(and manifest, so the batch can resume).", exit_code("usage"))
    if ns.glb.exists() and not ns.glb.is_dir():
        raise BatchFailed(f"--glb {ns.glb} is a file; for a batch give a folder.",
                          exit_code("usage"))
    for flag, value in (("--preview", ns.preview), ("--trace", ns.trace)):
        if value is not None:
            raise BatchFailed(f"{flag} is for one image; a batch writes each image's trace "
                              "next to its GLB. Leave it out, or give one image.",
                              exit_code("usage"))
    if ns.blend is not None and ns.blend.suffix.lower() != ".blend":
        raise BatchFailed(f"--blend {ns.blend}: end the name in .blend.", exit_code("usage"))
    if ns.blend is not None and ns.blend.exists() and not ns.overwrite:
        raise BatchFailed(f"{ns.blend} exists; choose another name or pass --overwrite.",
                          exit_code("output_exists"))
    if ns.blend is not None:  # made now, as the runner makes OUTDIR: not found after the work
        try:
            ns.blend.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            what = ("a file, not a folder" if isinstance(exc, FileExistsError)
                    else exc.strerror or str(exc))
            raise BatchFailed(f"Cannot create the folder of --blend, {ns.blend.parent} "
                              f"({what}). Choose a folder you can write to.",
                              exit_code("output_unwritable")) from None


def run(ns, interpreter, runtime: Path, exit_code) -> int:
    """Run the batch of the folder ``ns.image`` into ``ns.glb`` with ``interpreter`` (a
    ``config.Interpreter``), importing each result; save ``--blend``. Returns the exit status;
    raises :class:`BatchFailed` when no image could run. A ``BaseException`` (the signal
    handler's cancel) stops the runner and every node's job before it propagates."""
    import bpy

    from ..ui import importer  # imports bpy
    try:
        settings = job_spec.settings_from(ns, command="batch")
    except config.ConfigError as exc:
        raise BatchFailed(str(exc), exit_code("usage")) from None
    folder, out = ns.image, ns.glb
    spec = job_spec.JobSpec(image=folder, output=out, trace=out, settings=settings,
                           overwrite=ns.overwrite)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    root = importer.ensure_collection(bpy.context.scene)
    coll = importer.ensure_collection(bpy.context.scene, f"Batch {folder.name}", parent=root)
    job = process.RunnerProcess(spec.batch_argv(interpreter.python, folder, out),
                                process.runner_env(runtime, interpreter.extra_path),
                                cwd=runtime)
    where = f" on the cluster {settings.cluster}" if settings.cluster else ""
    _say(f"batch of {folder}{where} into {out}")
    try:
        job.start()
    except process.SpawnError as exc:
        raise BatchFailed(str(exc), 1) from None
    feed = _Feed(settings, coll, importer)
    try:
        for kind, payload in job.iter_blocking():
            if kind == process.EVENT:
                feed.event(payload)
            elif kind == process.BAD_LINE:
                _say(f"warning: {payload}")
    except BaseException:
        job.cancel(block=True)  # SIGTERM + stdin closed: the runner cancels every node's job
        job.close()
        raise
    died_hint = state.command_line_died_hint(interpreter.python)
    return feed.finish(job, ns, died_hint)


class _Feed:
    """The batch's events, as they come: per-node lines, imports, the outcome."""

    def __init__(self, settings, coll, importer):
        self.settings, self.coll, self.importer = settings, coll, importer
        self.nodes = nodes.NodeBoard()
        self.state = state.JobState()  # the batch's own error (e.g. the cluster's)
        self.done = self.failed = 0
        self.imported: list[str] = []

    def event(self, ev: dict) -> None:
        kind = ev.get("event")
        if kind == "batch_item":
            self.nodes.apply(ev)
            self.item(ev)
        elif self.nodes.apply(ev):
            if kind in ("placed", "stage") and ev.get("parent") is None:
                for text, busy in self.nodes.lines():
                    if busy:
                        _say(f"node {text}")
        elif kind == "error" and ev.get("item") is None:
            self.state.apply(ev)
        elif kind == "stage" and ev.get("parent") is None:
            _say(f"image {ev.get('item')}: stage {ev.get('stage')} "
                 f"({int(ev.get('index') or 0) + 1}/{ev.get('count') or '?'})")
        elif kind == "warning" and ev.get("message"):
            _say(f"warning: {ev['message']}")

    def item(self, ev: dict) -> None:
        """A finished image: import it (done, or skipped and not yet in this scene), say so."""
        ev, _notes = events.clean(ev)
        image, status, output = Path(str(ev.get("image") or "?")), ev.get("status"), \
            ev.get("output")
        node = ev.get("node")
        on = f" on {node['host']}" if isinstance(node, dict) else ""
        if status in ("done", "skipped") and isinstance(output, str):
            importer = self.importer
            meta = {"backend": self.settings.backend, "seed": self.settings.seed,
                    "peak": ev.get("peak") if isinstance(ev.get("peak"), int) else None,
                    "trace": str(ev.get("trace") or ""), "image": str(image)}
            try:
                obj = importer.import_glb(output, Path(output).stem, (0.0, 0.0, 0.0),
                                          self.coll, meta, after_existing=True)
            except importer.MeshImportError as exc:
                self.failed += 1
                _say(f"{image.name}: {status}{on}, but the import failed: {exc}")
                return
            self.done += 1
            self.imported.append(obj.name)
            _say(f"{image.name}: {status}{on}, imported as {obj.name}")
            return
        self.failed += 1
        err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
        _say(f"{image.name}: {status}{on}: {err.get('kind')}: {err.get('message')}")

    def finish(self, job, ns, died_hint: str) -> int:
        """Save ``--blend``, report; the exit status (raises :class:`BatchFailed` when the
        batch never ran; ``died_hint``: what to do when the runner died without an answer)."""
        import bpy

        rc = job.poll()
        if rc and not (self.done or self.failed):  # no-op when an error event said why
            self.state.finish_process(rc, job.stderr_tail(), hint=died_hint)
        if self.state.error and not (self.done or self.failed):
            err = self.state.error
            raise BatchFailed(" ".join(x for x in (err.get("message"), err.get("hint")) if x),
                              int(err.get("exit_code") or rc or 1))
        if ns.blend and self.imported:
            paths = bpy.context.preferences.filepaths
            versions, paths.save_version = paths.save_version, 0  # no OUT.blend1 backup
            try:
                bpy.ops.wm.save_as_mainfile(filepath=str(ns.blend), check_existing=False,
                                            compress=True)
            finally:
                paths.save_version = versions
            _say(f"saved {ns.blend}")
        _say(f"batch: {self.done} imported, {self.failed} failed")
        if self.failed:
            return rc or 1
        return 0
