"""``Batch``: every image of a folder, one after another, each a full guarded job (admission,
worker, budget), with a resumable JSON manifest — ``python -m runner batch DIR -o OUTDIR``
(``runner/commands/batch.py``) without ``--cluster``, and the base of the cluster's batch
(``runner.cluster.batch.ClusterBatch``).

Manifest ``OUTDIR/manifest.json`` (``runner/batch/manifest.py``: merged into what is on disk under a
lock and written atomically after each image, so batches sharing a folder keep each other's
records)::

    {"version": 1, "runner": "0.1.0", "input_dir": "...", "output_dir": "...", "backend": "...",
     "updated": <time.time()>,
     "images": {"<file name>": {"image": path, "output": path, "trace": path,
                                "status": "done" | "failed" | "cancelled", "seconds": float,
                                "peak": bytes | null,
                                "error": {kind, message, hint, exit_code} | null,
                                "sha256": hex digest of the input file's bytes,
                                "options": {the options that shape the output},
                                "finished": <time.time()>,
                                "warnings": [the job's warning records: fallbacks, advice]}}}

Resuming: an image is skipped only when its entry says ``done``, its GLB still exists, and both
the input's ``sha256`` and the output-shaping ``options`` (``job_fingerprint``) are the same as
now; otherwise it runs again. The entry's ``output`` and ``trace`` are resolved relative to
OUTDIR (``manifest.relocated``), so a moved or copied output folder resumes too; a failure
never replaces a ``done`` record whose GLB is still there (``last_failure`` is added to it).
A re-run may replace the GLB and trace the manifest attributes to this batch; an existing GLB
or trace the manifest does not attribute to it is never replaced without ``--overwrite`` (that
image fails with ``output_exists``). ``--overwrite`` redoes every image.
Outputs are ``OUTDIR/<stem>.glb`` and ``OUTDIR/<stem>.trace.jsonl``; when two images share a
stem (``a.png``, ``a.jpg``) each gets ``<stem>-<suffix>`` (``a-png.glb``, ``a-jpg.glb``).
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import traceback
from pathlib import Path

from meshfacts.errors import RunnerError, explain
from meshfacts.events import make
from runner import backends
from runner.batch import MANIFEST, MANIFEST_VERSION
from runner.batch.manifest import load_manifest, manifest_entries, relocated, update_manifest
from runner.images.reading import IMAGE_SUFFIXES
from runner.job.inputs import ImageInput
from runner.job.records import Job, Outcome, explain_warning
from runner.job.run import RUNNER_VERSION, JobRun
from runner.job.trace import log


def find_images(folder: Path) -> list[Path]:
    """Image files directly in ``folder`` (suffixes in ``IMAGE_SUFFIXES``, hidden files
    skipped), sorted by name."""
    return sorted((p for p in folder.iterdir()
                   if p.is_file() and not p.name.startswith(".")
                   and p.suffix.lower() in IMAGE_SUFFIXES), key=lambda p: p.name)


def output_names(images: list[Path]) -> dict[Path, str]:
    """Image → output stem; unique even when two images share a stem."""
    stems: dict[str, int] = {}
    for p in images:
        stems[p.stem.lower()] = stems.get(p.stem.lower(), 0) + 1
    return {p: p.stem if stems[p.stem.lower()] == 1 else f"{p.stem}-{p.suffix.lstrip('.').lower()}"
            for p in images}


def file_sha256(path: Path) -> str | None:
    """Hex SHA-256 of the file's bytes (read in 1 MiB blocks), or None when it cannot be read
    (the job then reports why)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def changed_options(before, now: dict) -> list[str]:
    """The output-shaping options whose recorded value differs: ``["backend pixal3d → builtin",
    …]`` (``before`` the manifest's record, possibly not a dict)."""
    before = before if isinstance(before, dict) else {}
    return [f"{key} {before.get(key)} → {now.get(key)}" for key in sorted(set(before) | set(now))
            if before.get(key) != now.get(key)]


def replaced_because(entry: dict, digest: str | None, fingerprint: dict) -> str:
    """Why a GLB recorded as done is made again, in a person's words."""
    changed = changed_options(entry.get("options"), fingerprint)
    if changed:
        return "with other options (" + ", ".join(changed) + ")"
    if digest is None or entry.get("sha256") != digest:
        return "from another version of its image (the image changed since)"
    return "by a batch whose record is incomplete"


def job_fingerprint(options) -> dict:
    """The options that shape a GLB, as recorded in the manifest (``JobOptions.shaping``): the
    job's backend and each option that applies to it and whose ``affects_output`` is True
    (``seed``, ``texture_size``, ``pipeline_type``; not ``load``), defaults filled in. Two runs
    with equal fingerprints and equal input bytes give the same GLB."""
    return options.shaping()


class Batch:
    """One ``batch`` command: ``ns`` the parsed command line, ``options`` the job's
    ``JobOptions`` (each image's), ``config`` the ``GuardConfig``; events go to ``emitter``.
    Publishes ``hello`` at once; :meth:`run` does the rest."""

    def __init__(self, ns, options, config, emitter, cancel):
        self.ns, self.options, self.config = ns, options, config
        self.emitter, self.cancel = emitter, cancel
        self.started = time.time()
        self.in_dir = Path(ns.input_dir).expanduser().absolute()
        self.out_dir = Path(ns.output_dir).expanduser().absolute()
        self.manifest_path = self.out_dir / MANIFEST
        self.fingerprint = job_fingerprint(options)
        self.counts = {"done": 0, "failed": 0, "skipped": 0}
        self.header: dict = {}
        self.hello = make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode="batch",
                          backend=ns.backend, image=None, output=None, trace=None,
                          stages=backends.get(ns.backend).planned_stages(),
                          input_dir=str(self.in_dir), output_dir=str(self.out_dir),
                          manifest=str(self.manifest_path), python=sys.executable)
        emitter.emit(self.hello)

    def fail(self, err: RunnerError) -> int:
        """Report a batch-level failure: the ``runner: KIND: message — hint`` line on stderr
        and the ``error`` event (the last); returns its exit code."""
        explain(err.fields())
        self.emitter.event("error", **err.fields())
        return err.exit_code

    def run(self) -> int:
        """Every image in turn, then ``batch_done``; returns the exit status. Raises
        ``RunnerError`` for a batch-level failure."""
        self.check_backend()
        images = self.images()
        self.open_manifest()
        names = output_names(images)
        for index, image in enumerate(images, 1):
            if self.cancel:
                break
            self.item(index, len(images), image, names[image])
        return self.conclude(images)

    def conclude(self, images: list[Path]) -> int:
        """After the last image: the cancel error, or the manifest's header, the summary line
        and ``batch_done``; returns the exit status."""
        if self.cancel:
            raise RunnerError("cancelled", f"Batch cancelled ({self.cancel.reason}); the "
                              "manifest records what was finished.")
        update_manifest(self.manifest_path, {**self.header, "updated": time.time()})
        seconds = round(time.time() - self.started, 3)
        log(f"batch: {self.counts['done']} done, {self.counts['failed']} failed, "
            f"{self.counts['skipped']} skipped of {len(images)} in {seconds:.1f} s; manifest "
            f"{self.manifest_path}")
        self.emitter.event("batch_done", **self.counts, count=len(images),
                           manifest=str(self.manifest_path), seconds=seconds)
        return 0 if self.counts["failed"] == 0 else RunnerError("batch_failed", "").exit_code

    def check_backend(self) -> None:
        """Refuse the whole batch, before the output folder or manifest is touched, when the
        backend cannot run here with these options — as a single run refuses its one image
        (``runner.job.run.JobRun.validate``): not installed (``backend_unavailable``, 31), or its
        precheck fails (e.g. ``pixal3d_missing``, 32). Cheap: files and folders only."""
        backend = backends.get(self.ns.backend)
        if not backend.installed():
            raise RunnerError("backend_unavailable", f"The {backend.name} backend is not "
                              "installed here.", backend.install_hint or None)
        backend.run_precheck(self.options)

    def images(self) -> list[Path]:
        """The images of the input folder; creates the output folder. Raises ``RunnerError``
        (``input_missing`` for a missing folder, a file, or no images; ``output_unwritable``)."""
        in_dir, out_dir = self.in_dir, self.out_dir
        if in_dir.is_file():
            raise RunnerError("input_missing", f"{in_dir} is a file, not a folder.",
                              "batch takes a folder of images; for one image run "
                              "`python -m runner IMAGE -o OUT.glb`.")
        if not in_dir.is_dir():
            raise RunnerError("input_missing", f"The folder {in_dir} does not exist.",
                              "Check the path; batch takes a folder of images.")
        images = find_images(in_dir)
        if not images:
            raise RunnerError("input_missing", f"No images ({', '.join(IMAGE_SUFFIXES)}) in "
                              f"{in_dir}.", "Choose a folder that contains images.")
        if out_dir.exists() and not out_dir.is_dir():
            raise RunnerError("output_invalid", f"The output folder {out_dir} is a file, not a "
                              "folder; it was left untouched.", "Give -o a folder (a new one "
                              "is created), not a file.")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunnerError("output_unwritable", f"Cannot create {out_dir} "
                              f"({exc.strerror or exc}).") from None
        return images

    def open_manifest(self) -> None:
        """This batch's manifest header; the file is created (or its header updated) now, so
        a batch that finds nothing to do still leaves one. A manifest that is missing or has no
        records is rebuilt from the traces in the folder (``runner.batch.recovery``), so a deleted
        manifest resumes like a damaged one."""
        self.header = {"version": MANIFEST_VERSION, "runner": RUNNER_VERSION,
                       "input_dir": str(self.in_dir), "output_dir": str(self.out_dir),
                       "backend": self.ns.backend}
        update_manifest(self.manifest_path, {**self.header, "updated": time.time()},
                        rebuild_missing=True)

    def item(self, index: int, count: int, image: Path, stem: str) -> None:
        """One image: skipped when the manifest says it is done and unchanged, else run as a
        job; recorded in the manifest and reported as ``batch_item``."""
        planned = self.plan(index, count, image, stem)
        if planned is None:
            return
        job, digest = planned
        began = time.time()
        outcome = self.run_image(job, index, digest)
        self.record(index, count, image, job.output, outcome, digest, began)

    def plan(self, index: int, count: int, image: Path, stem: str) -> tuple[Job, str | None] | None:
        """The image's ``Job`` and input digest, or None when it is skipped (reported as a
        ``batch_item`` with ``status: "skipped"``)."""
        ns = self.ns
        output = self.out_dir / f"{stem}.glb"
        trace = self.out_dir / f"{stem}.trace.jsonl"
        # Read now, not once per batch: another batch may have finished this image meanwhile.
        recorded = manifest_entries(load_manifest(self.manifest_path)).get(image.name)
        recorded = recorded if isinstance(recorded, dict) else {}
        # paths relative to this folder: a moved or copied OUTDIR resumes like the original
        entry = relocated(recorded, self.out_dir)
        digest = file_sha256(image)
        ours = entry.get("output") == str(output)  # the manifest attributes it to us
        if (not ns.overwrite and entry.get("status") == "done" and output.exists() and ours
                and digest is not None and entry.get("sha256") == digest
                and entry.get("options") == self.fingerprint):
            if entry != recorded:  # the folder was moved: its record names the files here now
                update_manifest(self.manifest_path, {**self.header, "updated": time.time()},
                                image.name, entry)
            self.counts["skipped"] += 1
            self.emitter.event("batch_item", index=index, count=count, image=str(image),
                               status="skipped", output=str(output), trace=entry.get("trace"),
                               seconds=0.0, peak=entry.get("peak"), error=None)
            return None
        # A changed image or changed options: this batch may replace what it wrote itself
        # (a GLB recorded as done, a trace recorded for this image), nothing else.
        if not ns.overwrite and ours and entry.get("status") == "done" and output.exists():
            self.say_replaced(output, replaced_because(entry, digest, self.fingerprint))
        job = Job(input=ImageInput(image, backends.get(ns.backend)), output=output,
                  options=self.options, trace=trace,
                  overwrite=ns.overwrite or (ours and entry.get("status") == "done"),
                  replace_trace=ns.overwrite or entry.get("trace") == str(trace))
        return job, digest

    def say_replaced(self, output: Path, why: str) -> None:
        """A ``warning`` event (and its stderr line) before a GLB this batch recorded as done
        is made again: one forgotten option must not replace hours of work unannounced."""
        event = self.emitter.event(
            "warning", message=f"{output.name} was made {why}; it is made again and replaced "
            "(keep a copy first, or give the same options to skip it).",
            source="runner.batch", cause=why, differs="replaced")
        explain_warning(event)

    def item_hello(self, job: Job, index: int, digest: str | None) -> dict:
        """The ``hello`` an image's trace begins with (``mode: "batch_item"``, its ``image``,
        ``output``, ``trace``, ``item``, input ``sha256`` and ``options`` fingerprint): what
        ``runner.batch.recovery`` rebuilds a record from."""
        batch_hello = {k: v for k, v in self.hello.items() if k != "event"}
        return make("hello", **{**batch_hello, "mode": "batch_item",
                                "image": str(job.input.path), "output": str(job.output),
                                "trace": str(job.trace), "item": index,
                                "sha256": digest, "options": self.fingerprint})

    def run_image(self, job: Job, index: int, digest: str | None = None) -> Outcome:
        """Run one image's job (tagged with ``item``); a bug becomes an ``internal`` outcome
        so that the other images still run. The item's ``hello`` (the trace's first line)
        carries the input's ``sha256`` and the ``options`` fingerprint, so a damaged manifest
        can be rebuilt from the traces (``runner.batch.recovery``)."""
        item_hello = self.item_hello(job, index, digest)
        began = time.time()
        try:
            return JobRun(job, self.emitter.emit, self.cancel, self.config,
                          preamble=[item_hello], tag={"item": index}).run()
        except Exception as exc:  # a bug on this image must not stop the others

            traceback.print_exc(file=sys.stderr)
            err = RunnerError("internal", f"Unexpected {type(exc).__name__}: {exc}")
            return Outcome(ok=False, final=err.fields(), exit_code=err.exit_code, output=None,
                           trace=None, seconds=time.time() - began, peak=None, error=err)

    def record(self, index: int, count: int, image: Path, output: Path, outcome: Outcome,
               digest: str | None, began: float) -> None:
        """Merge one finished image into the manifest and report it as ``batch_item``
        (``began``: when the image's job started, seconds since the epoch)."""
        if outcome.error is not None and outcome.error.kind == "cancelled":
            status = "cancelled"
        else:
            status = "done" if outcome.ok else "failed"
        self.counts["done" if outcome.ok else "failed"] += 1
        error = None if outcome.ok else {k: outcome.final.get(k) for k in
                                         ("kind", "message", "hint", "exit_code")}
        if not outcome.ok:
            explain({**outcome.final, "message": f"{image.name}: {outcome.final.get('message')}"})
        entry = {"image": str(image), "output": str(output), "trace": outcome.trace,
                 "status": status, "seconds": round(outcome.seconds, 3), "peak": outcome.peak,
                 "error": error, "notes": list(outcome.notes), "sha256": digest,
                 "options": self.fingerprint,
                 "finished": time.time(), "warnings": list(outcome.warnings),
                 **outcome.extra}
        update_manifest(self.manifest_path, {**self.header, "updated": time.time()},
                        image.name, entry, since=began)
        self.emitter.event("batch_item", index=index, count=count, image=str(image),
                           status=status,
                           output=str(output) if outcome.ok else None, trace=outcome.trace,
                           seconds=round(outcome.seconds, 3), peak=outcome.peak, error=error,
                           warnings=list(outcome.warnings), **outcome.extra)
