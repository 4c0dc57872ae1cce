"""``python -m runner export ASSET.npz -o OUT.glb``: export a saved asset again (a Pixal3D run's
``--keep-asset`` file, or the port's ``--save-mesh``) with the bounded export engine, through
the same job run as a Pixal3D run (``runner.job.run.JobRun`` with a
``runner.job.inputs.AssetInput``): the guard's admission, the export process in its own process
group (``runner.worker.run`` in export mode, no torch), its memory sampled from outside, the trace,
and the same events as a run's export — ``stage`` ``export`` (a one-stage plan, with the
process's ``pid``), its sub-steps with ``parent`` ``export``, ``progress``, ``memory``, then
``result`` or ``error``. No Pixal3D install is needed.

Before anything runs the levers are checked, once, as the asset enters
(``AssetInput.enter``: a budget below the engine's minimum is ``usage``, exit 2), and the
asset's size and headers against the budget (``runner.job.inputs.check_asset``:
``bounded_export.asset.inspect_asset``, ``budget.check_file``): a bad or too large asset
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

from meshfacts.errors import RunnerError
from meshfacts.events import make
from meshfacts.job_options import JobOptions
from runner.commands.cli import (
    DEFAULT_GRACE,
    ArgumentParser,
    add_json_argument,
    guard_config,
    require_path,
    run_and_report,
    setup,
    usage_failure,
)
from runner.commands.option_args import add_arguments, given
from runner.job.inputs import AssetInput
from runner.job.records import Job
from runner.job.run import RUNNER_VERSION, JobRun
from stageload.guard import add_guard_arguments

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
  39       the export process's interpreter could not be started at all
  40-42    the export failed: an unexpected error, the export process killed (e.g. out
           of memory) or crashed
  47, 48   out of memory, a system limit (open files, threads)
  130      cancelled (signal, closed stdin with --cancel-on-stdin-eof, parent gone)
"""
"""``python -m runner export --help``'s epilog: only the statuses an export can end with (no
image, backend, batch or Pixal3D kinds; tests/runner/test_job_options.py checks it against
``meshfacts.errors.KINDS``)."""


def build_parser() -> ArgumentParser:
    """Parser of ``python -m runner export`` (the export levers from the options table, the
    guard's options)."""
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


def main(argv: list[str] | None = None) -> int:
    """``python -m runner export ASSET -o OUT.glb …``: returns the exit status."""
    parser = build_parser()
    try:
        ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        require_path(ns.output, "output")
        options = JobOptions.parse(None, given(ns))  # no backend: the export levers only
        asset = AssetInput.enter(ns.asset, options)
        config = guard_config(ns)
    except RunnerError as err:
        return usage_failure(err, "export", argv)
    emitter, cancel = setup(ns)
    # no backend runs: hello and result say backend null (the export process is the engine)
    job = Job(input=asset, output=Path(ns.output), options=options,
              trace=Path(ns.trace) if ns.trace else None, overwrite=ns.overwrite)
    hello = make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode="export",
                 backend=None, image=None, asset=str(Path(ns.asset).absolute()),
                 output=str(Path(ns.output).expanduser().absolute()),
                 trace=str(job.resolved_trace()), stages=list(AssetInput.STAGES),
                 python=sys.executable)
    emitter.emit(hello)
    return run_and_report(emitter, cancel,
                          lambda: JobRun(job, emitter.emit, cancel, config,
                                         preamble=[hello]).run())
