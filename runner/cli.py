"""Command line of ``python -m runner IMAGE -o OUT.glb …`` (one image) and the parts the
``batch`` and ``check`` commands share: the argument parser that reports errors as protocol
events, the backend options, and the process-wide setup (cancel sources, stdout emitter).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import backends
from .cancel import Cancel
from .errors import RunnerError
from .protocol import Emitter, make

DEFAULT_GRACE = 1.0
"""The runner's default ``--grace`` (seconds between SIGTERM and SIGKILL when stopping the
worker's group): short, so a cancel is complete within 2 s."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors raise ``RunnerError('usage')`` instead of printing and
    exiting, so the caller can report them as an ``error`` event (``--help`` still prints)."""

    def error(self, message):
        raise RunnerError("usage", f"{self.prog}: {message}")


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by a single run and ``batch``: backend, seed, texture size, height,
    overwrite, the backends' own options and the guard's options (``stageload.guard``)."""
    from stageload.guard import add_guard_arguments

    parser.add_argument("--backend", default=backends.DEFAULT, choices=backends.names(),
                        help="which image-to-mesh method runs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed (default: the backend's: builtin 0, pixal3d 42)")
    parser.add_argument("--texture-size", type=int, default=None, metavar="PX",
                        help="base-colour texture side in pixels (default: the backend's: "
                             "builtin 1024, pixal3d 2048)")
    parser.add_argument("--height", type=float, default=None, metavar="M", dest="height_m",
                        help="height of the mesh in metres (default: the backend's, 1 m)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output file (default: refuse)")
    parser.add_argument("--ignore-stdin", action="store_true",
                        help="do not cancel when stdin (a pipe) reaches end-of-file")
    group = parser.add_argument_group("backend options")
    for opt in backends.all_options():
        group.add_argument(opt.flag, dest=opt.dest, default=opt.default, choices=opt.choices,
                           help=opt.help)
    add_guard_arguments(parser)
    parser.set_defaults(guard_grace=DEFAULT_GRACE)


def backend_options(ns: argparse.Namespace) -> dict:
    """The backend options (``dest`` → value) from parsed arguments."""
    return {opt.dest: getattr(ns, opt.dest, None) for opt in backends.all_options()}


def guard_config(ns: argparse.Namespace):
    """``GuardConfig.from_args`` with its ``ConfigError`` turned into a usage error."""
    from stageload.guard import ConfigError, GuardConfig

    try:
        return GuardConfig.from_args(ns)
    except (ConfigError, OSError, ValueError) as exc:
        raise RunnerError("usage", str(exc)) from None


def setup(ns: argparse.Namespace | None = None) -> tuple[Emitter, Cancel]:
    """The stdout emitter and the installed cancel sources for this process."""
    cancel = Cancel()
    emitter = Emitter(on_broken=lambda: cancel.cancel("stdout closed by the reader"))
    cancel.install(stdin=not (ns is not None and getattr(ns, "ignore_stdin", False)))
    return emitter, cancel


def build_parser() -> ArgumentParser:
    """Parser of the single-image command."""
    parser = ArgumentParser(
        prog="python -m runner",
        description="Image → textured GLB in a guarded worker process; NDJSON events on stdout "
                    "(runner/PROTOCOL.md). Other commands: `python -m runner batch DIR -o OUTDIR`, "
                    "`python -m runner check`.")
    parser.add_argument("image", help="the input image (PNG, JPEG, WebP …)")
    parser.add_argument("-o", "--output", required=True, help="the GLB to write (…/name.glb)")
    parser.add_argument("--trace", default=None,
                        help="JSONL trace path (default: OUT.trace.jsonl next to the output)")
    add_job_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m runner IMAGE -o OUT.glb …``: returns the exit status (runner/errors.py)."""
    from .supervisor import RUNNER_VERSION, Job, run_job

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = None
    try:
        ns = parser.parse_args(argv)
        config = guard_config(ns)
    except RunnerError as err:
        return usage_failure(err, "single")
    emitter, cancel = setup(ns)
    job = Job(image=Path(ns.image), output=Path(ns.output), backend=ns.backend,
              trace=Path(ns.trace) if ns.trace else None, seed=ns.seed,
              texture_size=ns.texture_size, height_m=ns.height_m, overwrite=ns.overwrite,
              options=backend_options(ns))
    hello = make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode="single",
                 backend=ns.backend, image=str(Path(ns.image).absolute()),
                 output=str(Path(ns.output).expanduser().absolute()),
                 trace=str(job.resolved_trace()),
                 stages=backends.get(ns.backend).planned_stages(job.options),
                 python=sys.executable)
    emitter.emit(hello)
    try:
        outcome = run_job(job, emitter.emit, cancel, config, preamble=[hello])
    except Exception as exc:  # a bug: one error event, the traceback on stderr only
        return internal_failure(emitter, exc)
    finally:
        cancel.uninstall()
    emitter.emit(outcome.final)
    return outcome.exit_code


def internal_failure(emitter: Emitter, exc: BaseException) -> int:
    """Report an unexpected exception: traceback on stderr, ``error`` kind ``internal``."""
    import traceback

    traceback.print_exc(file=sys.stderr)
    err = RunnerError("internal", f"Unexpected {type(exc).__name__}: {exc}")
    emitter.emit(make("error", **err.fields()))
    return err.exit_code


def usage_failure(err: RunnerError, mode: str) -> int:
    """Report a command-line error: ``hello`` then ``error`` on stdout, the message on stderr."""
    from .supervisor import RUNNER_VERSION

    emitter = Emitter()
    emitter.emit(make("hello", runner=RUNNER_VERSION, pid=os.getpid(), mode=mode, backend=None,
                      image=None, output=None, trace=None, stages=[], python=sys.executable))
    try:
        print(err.message, file=sys.stderr)
    except (OSError, ValueError):
        pass
    emitter.emit(make("error", **err.fields()))
    return err.exit_code
