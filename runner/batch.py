"""``python -m runner batch DIR -o OUTDIR``: every image of a folder, one after another, each a
full guarded job (admission, worker, budget), with a resumable JSON manifest.

Manifest ``OUTDIR/manifest.json`` (written atomically — temporary file + ``os.replace`` — after
each image)::

    {"version": 1, "runner": "0.1.0", "input_dir": "...", "output_dir": "...", "backend": "...",
     "updated": <time.time()>,
     "images": {"<file name>": {"image": path, "output": path, "trace": path,
                                "status": "done" | "failed", "seconds": float,
                                "peak": bytes | null, "error": {kind, message, hint, exit_code} | null,
                                "finished": <time.time()>}}}

Resuming: an image whose entry says ``done`` and whose GLB still exists is skipped unless
``--overwrite``; failed (and cancelled) images are tried again. An existing GLB that the manifest
does not record as done is never replaced without ``--overwrite`` (that image fails with
``output_exists``). Outputs are ``OUTDIR/<stem>.glb`` and ``OUTDIR/<stem>.trace.jsonl``; when two
images share a stem (``a.png``, ``a.jpg``) each gets ``<stem>-<suffix>``.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from . import backends
from .cli import (ArgumentParser, add_job_arguments, backend_options, guard_config,
                  internal_failure, setup, usage_failure)
from .errors import RunnerError
from .inputs import IMAGE_SUFFIXES
from .protocol import make

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


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


def load_manifest(path: Path) -> dict:
    """The manifest at ``path``; an empty one when missing or unreadable (logged)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as exc:
        print(f"runner: ignoring unreadable manifest {path}: {exc}", file=sys.stderr)
        return {}


def write_manifest(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temporary file in the same folder, then
    ``os.replace``). Raises ``RunnerError('disk_full'|'output_unwritable')``."""
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        import errno
        kind = "disk_full" if exc.errno == errno.ENOSPC else "output_unwritable"
        raise RunnerError(kind, f"Cannot write the manifest {path} ({exc.strerror or exc}).") from None


def build_parser() -> ArgumentParser:
    """Parser of ``python -m runner batch``."""
    parser = ArgumentParser(prog="python -m runner batch",
                            description="Every image in DIR → OUTDIR/<name>.glb, one after "
                                        "another, each under the guard; resumable manifest.")
    parser.add_argument("input_dir", metavar="DIR", help="folder of images")
    parser.add_argument("-o", "--output-dir", required=True, metavar="OUTDIR",
                        help="folder for the GLBs, traces and manifest.json")
    add_job_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m runner batch DIR -o OUTDIR …``: returns 0 when every image is done or
    skipped, ``batch_failed`` (5) when any failed, another kind's code for a batch-level error
    (missing folder, cancel …)."""
    from .supervisor import RUNNER_VERSION, Job, Outcome, run_job

    try:
        ns = build_parser().parse_args(argv)
        config = guard_config(ns)
    except RunnerError as err:
        return usage_failure(err, "batch")
    emitter, cancel = setup(ns)
    started = time.time()
    in_dir = Path(ns.input_dir).expanduser().absolute()
    out_dir = Path(ns.output_dir).expanduser().absolute()
    manifest_path = out_dir / MANIFEST
    stages = backends.get(ns.backend).planned_stages(backend_options(ns))
    hello = make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode="batch",
                 backend=ns.backend, image=None, output=None, trace=None, stages=stages,
                 input_dir=str(in_dir), output_dir=str(out_dir), manifest=str(manifest_path),
                 python=sys.executable)
    emitter.emit(hello)

    def fail(err: RunnerError) -> int:
        emitter.event("error", **err.fields())
        return err.exit_code

    try:
        if not in_dir.is_dir():
            return fail(RunnerError("input_missing", f"The folder {in_dir} does not exist."))
        images = find_images(in_dir)
        if not images:
            return fail(RunnerError("input_missing", f"No images ({', '.join(IMAGE_SUFFIXES)}) "
                                    f"in {in_dir}.", "Choose a folder that contains images."))
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return fail(RunnerError("output_unwritable", f"Cannot create {out_dir} "
                                    f"({exc.strerror or exc})."))
        manifest = load_manifest(manifest_path)
        entries = manifest.get("images") if isinstance(manifest.get("images"), dict) else {}
        manifest = {"version": MANIFEST_VERSION, "runner": RUNNER_VERSION,
                    "input_dir": str(in_dir), "output_dir": str(out_dir),
                    "backend": ns.backend, "updated": time.time(), "images": entries}
        names = output_names(images)
        counts = {"done": 0, "failed": 0, "skipped": 0}
        count = len(images)
        for index, image in enumerate(images, 1):
            if cancel:
                break
            output = out_dir / f"{names[image]}.glb"
            trace = out_dir / f"{names[image]}.trace.jsonl"
            entry = entries.get(image.name) or {}
            if (not ns.overwrite and entry.get("status") == "done" and output.exists()
                    and entry.get("output") == str(output)):
                counts["skipped"] += 1
                emitter.event("batch_item", index=index, count=count, image=str(image),
                              status="skipped", output=str(output), trace=entry.get("trace"),
                              seconds=0.0, peak=entry.get("peak"), error=None)
                continue
            job = Job(image=image, output=output, backend=ns.backend, trace=trace,
                      seed=ns.seed, texture_size=ns.texture_size, height_m=ns.height_m,
                      overwrite=ns.overwrite, options=backend_options(ns))
            item_hello = {**hello, "mode": "batch_item", "image": str(image),
                          "output": str(output), "trace": str(trace), "item": index}
            began = time.time()
            try:
                outcome = run_job(job, emitter.emit, cancel, config, preamble=[item_hello],
                                  tag={"item": index})
            except Exception as exc:  # a bug on this image must not stop the others
                import traceback

                traceback.print_exc(file=sys.stderr)
                err = RunnerError("internal", f"Unexpected {type(exc).__name__}: {exc}")
                outcome = Outcome(ok=False, final=err.fields(), exit_code=err.exit_code,
                                  output=None, trace=None, seconds=time.time() - began,
                                  peak=None, error=err)
            if outcome.error is not None and outcome.error.kind == "cancelled":
                status = "cancelled"
            else:
                status = "done" if outcome.ok else "failed"
            counts["done" if outcome.ok else "failed"] += 1
            error = None if outcome.ok else {k: outcome.final.get(k) for k in
                                             ("kind", "message", "hint", "exit_code")}
            entries[image.name] = {"image": str(image), "output": str(output),
                                   "trace": outcome.trace, "status": status,
                                   "seconds": round(outcome.seconds, 3), "peak": outcome.peak,
                                   "error": error, "finished": time.time()}
            manifest["updated"] = time.time()
            write_manifest(manifest_path, manifest)
            emitter.event("batch_item", index=index, count=count, image=str(image),
                          status="failed" if status == "cancelled" else status,
                          output=str(output) if outcome.ok else None, trace=outcome.trace,
                          seconds=round(outcome.seconds, 3), peak=outcome.peak, error=error)
        if cancel:
            return fail(RunnerError("cancelled", f"Batch cancelled ({cancel.reason}); the "
                                    "manifest records what was finished."))
        write_manifest(manifest_path, manifest)
        emitter.event("batch_done", done=counts["done"], failed=counts["failed"],
                      skipped=counts["skipped"], count=count, manifest=str(manifest_path),
                      seconds=round(time.time() - started, 3))
        return 0 if counts["failed"] == 0 else RunnerError("batch_failed", "").exit_code
    except RunnerError as err:
        return fail(err)
    except Exception as exc:  # a bug: one error event, the traceback on stderr only
        return internal_failure(emitter, exc)
    finally:
        cancel.uninstall()
