"""Command line of ``python -m runner IMAGE -o OUT.glb …`` (one image) and the parts the
``batch`` and ``check`` commands share: the argument parser that reports errors as protocol
events, the backend options, and the process-wide setup (cancel sources, stdout emitter).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from meshfacts.errors import RunnerError, explain
from meshfacts.events import make
from meshfacts.job_options import JobOptions
from runner import backends
from runner.commands.option_args import add_arguments as add_table_arguments
from runner.commands.option_args import given
from runner.job.cancel import Cancel
from runner.job.inputs import ImageInput
from runner.job.records import Job
from runner.job.run import RUNNER_VERSION, JobRun
from runner.job.trace import log
from runner.protocol import Emitter, early_failure

DEFAULT_GRACE = 1.0
"""The runner's default ``--grace`` (seconds between SIGTERM and SIGKILL when stopping the
worker's group): short, so a cancel is complete within 2 s."""


_NEGATIVE = re.compile(r"^-(\d|\.\d|inf|nan)", re.IGNORECASE)
"""A value that starts like a negative number, size or percentage (``-5%``, ``-1G``, ``-.5``,
``-inf``): argparse takes only plain negative numbers (``-3``) for values, anything else
starting with ``-`` for an option."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors raise ``RunnerError('usage')`` instead of printing and
    exiting, so the caller can report them as an ``error`` event (``--help`` still prints).
    A negative-looking value after an option that takes one (``--wait-free -5%``) is read as
    that option's value (``--wait-free=-5%``), so its range check gives the real message
    instead of argparse's "expected one argument"."""

    def error(self, message):
        raise RunnerError("usage", f"{self.prog}: {message}")

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        joined, i = [], 0
        while i < len(args):
            token = args[i]
            action = self._option_string_actions.get(token) if isinstance(token, str) else None
            following = args[i + 1] if i + 1 < len(args) else None
            if (action is not None and action.nargs is None and isinstance(following, str)
                    and _NEGATIVE.match(following)
                    and following not in self._option_string_actions):
                joined.append(f"{token}={following}")
                i += 2
                continue
            joined.append(token)
            i += 1
        return super().parse_known_args(joined, namespace)


def add_job_arguments(parser: argparse.ArgumentParser, command: str = "run") -> None:
    """Options shared by a single run and ``batch``: the options table's (``meshfacts/options.py``:
    backend, seed, texture size, height, the backends' own options), overwrite, the stdin
    cancel and the guard's options (``stageload.guard``)."""
    from stageload.guard import add_guard_arguments

    add_table_arguments(parser, command)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output file, and an existing trace of an "
                             "earlier run (default: refuse)")
    parser.add_argument("--cancel-on-stdin-eof", action="store_true",
                        help="cancel the job when stdin (a pipe the caller keeps open) reaches "
                             "end-of-file; the Blender add-on uses this. Without it stdin is "
                             "never read")
    add_json_argument(parser)
    add_guard_arguments(parser)
    parser.set_defaults(guard_grace=DEFAULT_GRACE)


def add_json_argument(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """``--json``: the events on stdout even at a terminal (``runner.commands.console``);
    ``help_text``: the command's own words (default: a run's)."""
    parser.add_argument("--json", action="store_true",
                        help=help_text or "print the NDJSON events (runner/PROTOCOL.md) on "
                             "stdout even when it is a terminal, which otherwise gets a "
                             "progress line per stage (a batch: one line per image); a pipe or "
                             "a file always gets the events")


def backend_options(ns: argparse.Namespace) -> dict:
    """The backend options as given (``dest`` → value, None = not given)."""
    return {opt.dest: getattr(ns, opt.dest, None) for opt in backends.all_options()}


def validate_job(ns: argparse.Namespace) -> JobOptions:
    """The job's options, parsed once (``JobOptions.parse``: every value checked, an option of
    another backend refused, each default filled in) and the chosen backend's refusals of
    combinations (its precheck runs later, with the files). Raises ``RunnerError('usage')``
    — before ``hello`` is followed by anything else."""
    options = JobOptions.parse(ns.backend, given(ns))
    backend = backends.get(ns.backend)
    floor = backend.texture_floor
    if floor is not None and options.texture_size < floor:
        log(f"--texture-size {options.texture_size} is below the {backend.name} backend's "
            f"smallest texture; a {floor} px texture is made instead")
    return options


def guard_config(ns: argparse.Namespace):
    """``GuardConfig.from_args`` with its ``ConfigError`` turned into a usage error. The
    ``--log`` file's folder is checked here too, before the job writes anything (its trace
    included): the guard itself opens the log only once the job starts."""
    from stageload.guard import ConfigError, GuardConfig

    try:
        config = GuardConfig.from_args(ns)
    except (ConfigError, OSError, ValueError) as exc:
        raise RunnerError("usage", str(exc)) from None
    if config.log:
        folder = Path(config.log).expanduser().absolute().parent
        if not folder.is_dir():
            raise RunnerError("usage", f"--log {config.log}: the folder {folder} does not exist.",
                              "Create the folder first, or give --log a file in an existing "
                              "folder.")
    return config


def setup(ns: argparse.Namespace | None = None) -> tuple[Emitter, Cancel]:
    """The stdout emitter and the installed cancel sources for this process. A command that
    takes ``--json`` (a single run, ``batch``, ``export``) prints a person's lines at a
    terminal unless it was given (``runner.commands.console``); otherwise, and at a pipe, the
    events."""
    from runner.commands.console import make_emitter

    cancel = Cancel()
    json_events = getattr(ns, "json", None) is not False  # only commands with --json
    emitter = make_emitter(json_events,
                           on_broken=lambda: cancel.cancel("stdout closed by the reader"))
    cancel.install(stdin=bool(ns is not None and getattr(ns, "cancel_on_stdin_eof", False)))
    return emitter, cancel


EXIT_EPILOG = """\
exit status (the last stdout line is the result or error event; every kind, and what
to do, in runner/PROTOCOL.md and docs/runner.md):
  0        the GLB was written (result event)
  1        internal error: a bug (traceback on stderr)
  2        usage: bad command line or option value
  3, 4     the guard stopped the job / never admitted it (--start-timeout)
  10-17    the input image: missing, empty, not an image, truncated, too large or small …
  18       the asset of `runner export` is not the port's saved asset, or too large
  20-24    the output: exists (add --overwrite), cannot be written, disk full, not .glb,
           a batch manifest from a newer runner
  30-36    this machine: no torch, backend unavailable, Pixal3D folder missing or unknown,
           missing Pillow/NumPy/psutil, Pixal3D weights damaged or missing
           (`python -m runner check` says what)
  37       batch/check --cluster: Ray missing, the cluster unreachable or without a node
           that could run a job (docs/cluster.md)
  38       batch/check --cluster: the cluster's token missing here or refused
  39       the worker's interpreter could not be started at all (the message names it)
  40-50    the job failed: backend error, worker killed (e.g. out of memory) or crashed,
           empty matte, background not plain, export refused (would not fit), empty
           mesh (Pixal3D), out of memory, a system limit (open files, threads), stalled
           for --stall-timeout, export fallback refused (--strict-export)
  130      cancelled (signal, closed stdin with --cancel-on-stdin-eof, parent gone)
"""
"""``python -m runner --help``'s epilog: the exit statuses grouped (tests/runner/
test_job_options.py checks it against ``meshfacts.errors.KINDS``)."""


def build_parser() -> ArgumentParser:
    """Parser of the single-image command (its ``--help`` ends with ``EXIT_EPILOG``)."""
    parser = ArgumentParser(
        prog="python -m runner",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Image → textured GLB in a guarded worker process; NDJSON events on stdout\n"
                    "(runner/PROTOCOL.md). `python -m runner run IMAGE -o OUT.glb` is the same.\n"
                    "Other commands, each with its own --help:\n"
                    "  python -m runner batch DIR -o OUTDIR           every image of a folder, "
                    "resumable\n"
                    "  python -m runner export ASSET.npz -o OUT.glb   a saved asset → GLB\n"
                    "  python -m runner check                         what can run here",
        epilog=EXIT_EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {RUNNER_VERSION}")
    parser.add_argument("image", help="the input image (PNG, JPEG, WebP …)")
    parser.add_argument("-o", "--output", required=True, help="the GLB to write (…/name.glb)")
    parser.add_argument("--trace", default=None,
                        help="JSONL trace path (default: OUT.trace.jsonl next to the output)")
    add_job_arguments(parser, "run")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m runner IMAGE -o OUT.glb …``: returns the exit status (meshfacts/errors.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = None
    try:
        ns = parser.parse_args(argv)
        require_path(ns.output, "output")
        options = validate_job(ns)
        config = guard_config(ns)
    except RunnerError as err:
        return usage_failure(suggest_command(err, argv), "single", argv)
    emitter, cancel = setup(ns)
    job = Job(input=ImageInput(ns.image, backends.get(ns.backend)), output=Path(ns.output),
              options=options,
              trace=Path(ns.trace) if ns.trace else None, overwrite=ns.overwrite)
    hello = make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode="single",
                 backend=ns.backend, image=str(Path(ns.image).absolute()),
                 output=str(Path(ns.output).expanduser().absolute()),
                 trace=str(job.resolved_trace()),
                 stages=backends.get(ns.backend).planned_stages(), python=sys.executable)
    emitter.emit(hello)
    return run_and_report(emitter, cancel,
                          lambda: JobRun(job, emitter.emit, cancel, config,
                                         preamble=[hello]).run())


def run_and_report(emitter: Emitter, cancel: Cancel, run) -> int:
    """Run one job (``run()`` → ``Outcome``) after its ``hello``: its success line or its error
    on stderr, its final event on stdout, the cancel sources uninstalled; a bug in it is one
    ``internal`` error event. Returns the exit status (meshfacts/errors.py)."""
    try:
        outcome = run()
    except Exception as exc:  # a bug: one error event, the traceback on stderr only
        return internal_failure(emitter, exc)
    finally:
        cancel.uninstall()
    if getattr(emitter, "human", False):  # a terminal: the last stage's end, then the verdict
        emitter.emit(outcome.final)
    if outcome.ok:
        report_success(outcome)
    else:
        explain(outcome.final)
    if not getattr(emitter, "human", False):
        emitter.emit(outcome.final)
    return outcome.exit_code


def decimation_words(final: dict) -> str:
    """How the bounded export engine decimated, from the result event's
    ``info.export.decimation`` (``export_engine.export_asset``'s ``decimation``): ``",
    decimated in 4 pieces"`` or ``", decimated in one call"``, with ``" (6 twin faces
    dropped)"`` when ``twins`` > 0; ``""`` when the result has no such facts (the builtin
    backend) or they are not of that shape."""
    info = final.get("info")
    export = info.get("export") if isinstance(info, dict) else None
    facts = export.get("decimation") if isinstance(export, dict) else None
    if not isinstance(facts, dict):
        return ""
    pieces, twins = facts.get("pieces"), facts.get("twins")
    if facts.get("method") == "pieces" and isinstance(pieces, int) and pieces > 1:
        words = f", decimated in {pieces} pieces"
    elif facts.get("method") == "one call":
        words = ", decimated in one call"
    else:
        return ""
    if isinstance(twins, int) and not isinstance(twins, bool) and twins > 0:
        words += f" ({twins} twin faces dropped)"
    return words


def report_success(outcome) -> None:
    """One human line on stderr for a written GLB: ``runner: wrote PATH (SIZE), peak SIZE,
    SECONDS s[, decimated in N pieces]; trace PATH[; asset kept at PATH]`` (binary sizes,
    ``meshfacts.units.format_size``; the decimation as ``decimation_words`` says it)."""
    from meshfacts.units import format_size

    try:
        size = format_size(os.path.getsize(outcome.output))
    except OSError:
        size = "?"
    log(f"wrote {outcome.output} ({size}), peak {format_size(outcome.peak)}, "
        f"{outcome.seconds:.1f} s{decimation_words(outcome.final)}; trace {outcome.trace}"
        f"{kept_asset_words(outcome.final)}")


def kept_asset_words(final: dict) -> str:
    """"; asset kept at PATH" when the result's ``info.asset`` names the asset ``--keep-asset``
    kept beside the GLB (its final path, not the job folder the port's own line names); "" when
    there is none."""
    info = final.get("info")
    asset = info.get("asset") if isinstance(info, dict) else None
    return f"; asset kept at {asset}" if isinstance(asset, str) and asset else ""


def internal_failure(emitter: Emitter, exc: BaseException) -> int:
    """Report an unexpected exception: traceback on stderr, ``error`` kind ``internal`` — or,
    when its cause chain is a system limit (open files, processes/threads), ``resource_limit``
    naming it, without a traceback (``runner.job.limits``)."""
    import traceback

    from runner.job.limits import cause_chain, resource_error

    err = resource_error(cause_chain(exc), "The runner")
    if err is None:
        traceback.print_exc(file=sys.stderr)
        err = RunnerError("internal", f"Unexpected {type(exc).__name__}: {exc}")
    explain(err.fields())
    emitter.emit(make("error", **err.fields()))
    return err.exit_code


def require_path(text: str, what: str) -> None:
    """Refuse an empty ``-o`` (``-o ''``, which ``pathlib`` would read as the current folder):
    ``what`` is ``output`` (a GLB) or ``output folder``. Raises
    ``RunnerError('output_invalid')``."""
    if not text.strip():
        example = "-o out/NAME.glb" if what == "output" else "-o out/characters"
        raise RunnerError("output_invalid", f"The {what} path (-o) is empty.",
                          f"Give a path, e.g. {example}.")


COMMANDS = ("batch", "check", "export", "run")
"""The runner's subcommands (``runner/__main__.py``); a single run takes an image instead."""


def suggest_command(err: RunnerError, argv: list[str]) -> RunnerError:
    """A single run's usage error whose first word is no file but looks like a misspelt
    subcommand (``bacth``: ``difflib``'s close match) becomes ``did you mean batch?``; any
    other error is returned as it is."""
    import difflib

    first = argv[0] if argv else ""
    if err.kind != "usage" or not first or first.startswith("-") or os.path.lexists(first) \
            or Path(first).suffix:
        return err
    close = difflib.get_close_matches(first.lower(), COMMANDS, n=1, cutoff=0.6)
    if not close:
        return err
    command = " ".join(["python -m runner", close[0], *argv[1:2]] + (["…"] if argv[2:] else []))
    return RunnerError("usage", f"python -m runner: {first!r} is neither an image nor a "
                       f"command; did you mean {close[0]}?",
                       f"Run `{command}`, or `python -m runner {close[0]} --help` for its "
                       f"options.")


def usage_failure(err: RunnerError, mode: str, argv: list[str] | None = None) -> int:
    """Report a command-line error: ``hello`` then ``error`` on stdout, the message on stderr
    (``protocol.early_failure``). The usual usage hint points to the command's own ``--help``
    (``python -m runner batch --help`` for ``mode`` ``batch``, …). ``argv`` (a single run's
    or a batch's command line): at a terminal without ``--json`` in it, stdout gets no events
    (the stderr line is the person's answer)."""
    from meshfacts.errors import KINDS
    from runner.commands.console import Console, wanted

    if err.kind == "usage" and err.hint == KINDS["usage"].hint and mode != "single":
        err.hint = f"Run `python -m runner {mode} --help` for the options."
    human = argv is not None and wanted("--json" in argv)
    return early_failure(err, mode, Console() if human else None)
