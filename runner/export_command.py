"""``python -m runner export ASSET.npz -o OUT.glb``: export a saved asset again (a Pixal3D run's
``--keep-asset`` file, or the port's ``--save-mesh``) with the bounded export engine, through
the same supervisor as a run: the guard's admission, the export process in its own process
group (``runner.worker`` in export mode, no torch), its memory sampled from outside, the trace,
and the same events as a run's export — ``stage`` ``export`` (a one-stage plan, with the
process's ``pid``), its sub-steps with ``parent`` ``export``, ``progress``, ``memory``, then
``result`` or ``error``. No Pixal3D install is needed.

Before anything runs the levers are checked (a budget below the engine's minimum is ``usage``,
exit 2) and the asset's size and headers against the budget
(``runner.export_engine.asset.inspect_asset``, ``budget.check_file``): a bad or too large asset
is ``bad_asset`` (exit 18) with nothing written, no trace either. A bad value found later (NaN
vertices, faces past the vertices: the export process's ``load`` step) is ``bad_asset`` too and
leaves nothing either: no GLB, no temporary files, no default trace, no folder the job made —
only a trace asked for with ``--trace``, complete and ending with the error.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .cancel import cancel_error
from .claims import claim_all
from .cli import (
    ArgumentParser,
    guard_config,
    require_path,
    run_and_report,
    setup,
    usage_failure,
)
from .errors import RunnerError
from .job import Job, WorkerJob
from .jobrun import RUNNER_VERSION, JobRun
from .jobtrace import log
from .outputs import (
    check_output,
    check_path_limits,
    discard,
    job_dir,
    sweep_stale_job_dirs,
    trace_conflict,
)
from .protocol import make

PLAN = ("export",)
"""The export command's stage plan: one stage."""

EXIT_EPILOG = """\
exit status (the last stdout line is the result or error event; every kind, and what
to do, in runner/PROTOCOL.md and docs/runner.md):
  0        the GLB was written (result event)
  1        internal error: a bug (traceback on stderr)
  2        usage: bad command line or lever (e.g. --export-budget below 256M)
  3, 4     the guard stopped the export / never admitted it (--start-timeout)
  11       the asset does not exist
  18       the asset is not the port's saved asset, or is too large for --export-budget
  20-23    the output: exists (add --overwrite), cannot be written, disk full, not .glb
  34       this Python lacks pyfqmr, which a budget too small for one decimation call
           needs (the decimation in pieces)
  40-42    the export failed: an unexpected error, the export process killed (e.g. out
           of memory) or crashed
  47, 48   out of memory, a system limit (open files, threads)
  130      cancelled (signal, closed stdin with --cancel-on-stdin-eof, parent gone)
"""
"""``python -m runner export --help``'s epilog: only the statuses an export can end with (no
image, backend, batch or Pixal3D kinds; tests/runner/test_job_options.py checks it against
``runner.errors.KINDS``)."""


class ExportRun(JobRun):
    """One asset → GLB job: ``JobRun`` with the asset in place of the image and only the
    export process (``job.image`` is the asset; ``job.options`` the export levers)."""

    def run(self):
        made = _missing_folders(self.job.output, self.job.resolved_trace())
        try:
            try:
                self.validate()
                self.admit()
                info = self.commit_output(self.outcome(self.spawn()))
            except RunnerError as err:
                return self.finish(err)
            return self.finish(None, info)
        finally:
            self.close()
            if self.refused:
                _remove_empty(made)

    refused = False

    def finish(self, error: RunnerError | None, info: dict | None = None):
        """``JobRun.finish``; an export refused for its asset (``REFUSED``) leaves nothing: the
        default trace (no ``--trace`` given) is removed with the folders this job made (in
        ``run``). A trace the user asked for is kept, complete, ending with the error."""
        outcome = super().finish(error, info)
        if error is not None and error.kind in REFUSED:
            self.refused = True
            if self.job.trace is None and self.trace.path is not None:
                discard(self.trace.path)
                outcome.trace = outcome.final["trace"] = None
        return outcome

    def validate(self) -> None:
        """The asset (size and headers, against the budget), the output and the trace; then
        opens the trace and publishes ``asset``."""
        job = self.job
        trace_conflict(job.resolved_trace(), job.image, job.output, "asset")
        facts = check_asset(Path(job.image), job.options, job.texture_size)
        self.output = check_output(job.output, job.overwrite)
        trace_path = job.resolved_trace()
        check_path_limits(trace_path, "trace")
        self.claims = claim_all([self.output, trace_path])
        check_output(self.output, job.overwrite)
        self.open_trace(trace_path, job.overwrite)  # a failed run's leftover is replaced
        self.publish(make("asset", **facts))
        if self.cancel:
            raise cancel_error(self.cancel, "before the export process started")

    def spawn(self):
        """The export process on the asset, writing a partial GLB in a private job folder."""
        for stale in sweep_stale_job_dirs(self.output.parent):
            log(f"removed {stale.name}, left by a runner that was killed")
        try:
            self.job_dir = job_dir(self.output)
        except OSError as exc:
            raise RunnerError("output_unwritable", f"Cannot create a temporary folder next to "
                              f"{self.output} ({exc.strerror or exc}).") from None
        self.partial = self.job_dir / f"{self.output.stem}.glb"
        job = self.job
        options = {k: v for k, v in job.options.items() if v is not None}
        work = WorkerJob(backend="pixal3d", image=str(Path(job.image).absolute()),
                         output=str(self.partial), texture_size=job.texture_size, mode="export",
                         handover=str(Path(job.image).absolute()),
                         options={**options, "export_engine": "bounded", "stages": list(PLAN)})
        return self.launch("export", work, "the export process",
                           hint="Check the interpreter path.")


REFUSED = ("bad_asset",)
"""The kinds of a refused export: the asset cannot be exported as it is (found from its
headers before the trace opens, or from its values in the export process's ``load`` step)."""


def _missing_folders(*paths: Path) -> list[Path]:
    """The folders above ``paths`` that do not exist yet, deepest first."""
    missing: list[Path] = []
    for path in paths:
        folder = Path(path).expanduser().absolute().parent
        while not folder.exists() and folder not in missing:
            missing.append(folder)
            folder = folder.parent
    return sorted(missing, key=lambda f: len(f.parts), reverse=True)


def _remove_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty now; never raises."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def check_asset(path: Path, options: dict, texture_size=None) -> dict:
    """The ``asset`` event's facts (``path``, ``bytes``, ``faces``, ``vertices``, ``voxels``,
    ``predicted_peak``) after the cheap checks — the file's size and headers, and the budget's
    plan for the levers (``options``: ``decimation_target``, ``export_budget``), no array
    read. Raises ``RunnerError`` ``input_missing`` or ``bad_asset`` (the engine's message,
    naming the key)."""
    from .backends.bounded_export import levers
    from .export_engine import BadAsset
    from .export_engine.asset import inspect_asset
    from .export_engine.budget import check_file, plan

    path = path.expanduser().absolute()
    if not path.exists():
        raise RunnerError("input_missing", f"The asset {path} does not exist.",
                          "Check the path of the asset (.npz).")
    chosen = levers(texture_size, options.get("decimation_target"), options.get("export_budget"))
    try:
        if not path.is_file():
            raise BadAsset(None, f"{path} is not a file")
        check_file(path.stat().st_size, chosen.budget)
        members = inspect_asset(path)
        faces, voxels = members["faces"].shape[0], members["coords"].shape[0]
        predicted = plan(faces=faces, voxels=voxels, target=chosen.decimation_target,
                         texture=chosen.texture_size, file_bytes=path.stat().st_size,
                         budget=chosen.budget).peak
    except BadAsset as err:
        raise RunnerError("bad_asset", err.message, err.hint,
                          **({"key": err.key} if err.key else {})) from None
    return {"path": str(path), "bytes": path.stat().st_size, "faces": faces,
            "vertices": members["vertices"].shape[0], "voxels": voxels,
            "predicted_peak": predicted}


def build_parser() -> ArgumentParser:
    """Parser of ``python -m runner export`` (the export levers from the options table, the
    guard's options)."""
    from stageload.guard import add_guard_arguments

    from .cli import DEFAULT_GRACE, add_json_argument
    from .option_args import add_arguments

    parser = ArgumentParser(
        prog="python -m runner export", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A saved asset (.npz: a Pixal3D run's --keep-asset, the port's --save-mesh)\n"
                    "→ textured GLB with the bounded export engine, in a guarded process;\n"
                    "NDJSON events on stdout (runner/PROTOCOL.md).", epilog=EXIT_EPILOG)
    parser.add_argument("asset", help="the asset (.npz) to export")
    parser.add_argument("-o", "--output", required=True, help="the GLB to write (…/name.glb)")
    parser.add_argument("--trace", default=None,
                        help="JSONL trace path (default: OUT.trace.jsonl next to the output)")
    add_arguments(parser, "export")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output file and trace (default: refuse)")
    parser.add_argument("--cancel-on-stdin-eof", action="store_true",
                        help="cancel when stdin (a pipe the caller keeps open) reaches EOF")
    add_json_argument(parser)
    add_guard_arguments(parser)
    parser.set_defaults(guard_grace=DEFAULT_GRACE)
    return parser


def export_options(ns: argparse.Namespace) -> dict:
    """The levers as the runner passes them, checked now (``RunnerError('usage')``)."""
    from .backends.bounded_export import levers

    levers(ns.texture_size, ns.decimation_target, ns.export_budget)
    return {"decimation_target": ns.decimation_target, "export_budget": ns.export_budget}


def main(argv: list[str] | None = None) -> int:
    """``python -m runner export ASSET -o OUT.glb …``: returns the exit status."""
    parser = build_parser()
    try:
        ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        require_path(ns.output, "output")
        options = export_options(ns)
        config = guard_config(ns)
    except RunnerError as err:
        return usage_failure(err, "export", argv)
    emitter, cancel = setup(ns)
    job = Job(image=Path(ns.asset), output=Path(ns.output), backend="pixal3d",
              trace=Path(ns.trace) if ns.trace else None, texture_size=ns.texture_size,
              overwrite=ns.overwrite, options=options)
    hello = make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode="export",
                 backend="pixal3d", image=None, asset=str(Path(ns.asset).absolute()),
                 output=str(Path(ns.output).expanduser().absolute()),
                 trace=str(job.resolved_trace()), stages=list(PLAN), python=sys.executable)
    emitter.emit(hello)
    return run_and_report(emitter, cancel,
                          lambda: ExportRun(job, emitter.emit, cancel, config,
                                            preamble=[hello]).run())
