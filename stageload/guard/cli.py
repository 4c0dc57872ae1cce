"""``python -m stageload guard [options] -- COMMAND...`` (documented in docs/guard.md)."""
from __future__ import annotations

import argparse
import shlex
import signal
import sys

from .config import ConfigError, GuardConfig, add_guard_arguments
from .guard import Guard

#: Exit code for a usage error (bad option, no command): argparse's own convention.
EXIT_USAGE = 2
_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Parser(argparse.ArgumentParser):
    """argparse with friendlier wording for the two mistakes people make most."""

    def error(self, message: str):
        if "expected one argument" in message:
            message += (" (a value that starts with '-' must be joined with '=', e.g. "
                        "--swap-budget=VALUE; sizes, amounts and seconds are never negative)")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The guard's argument parser (options only; the command follows ``--``)."""
    parser = _Parser(
        prog="python -m stageload guard",
        usage="python -m stageload guard [options] -- COMMAND [ARG ...]",
        description="Start COMMAND only when there is memory to spare, and stop its whole process "
                    "tree before swap runs away. Sizes need a unit (18G, 512M, 1024B; binary "
                    "multiples, shown as GiB/MiB); amounts are a size or a percent (40%); a "
                    "value that starts with - must be joined with =, e.g. --swap-budget=VALUE. "
                    "Exit codes: the command's own; 3 stopped by the budget; 4 gave up waiting "
                    "(--start-timeout); 127 could not start; 128+N the guard got signal N (the "
                    "command is stopped first); 2 bad options. A command may exit 3 or 4 itself: "
                    "with --log FILE the last line, {\"state\": \"exited\", \"exit_code\": N, "
                    "\"by\": \"command\"|\"guard\"}, says which.",
    )
    add_guard_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the guard command line; returns the exit code (see :func:`build_parser`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if "--" in argv:
        split = argv.index("--")
        options, command = argv[:split], argv[split + 1:]
    else:
        options, command = argv, []
    if any(a in ("-h", "--help") for a in options):
        parser.print_help()
        return 0
    try:
        ns, extra = parser.parse_known_args(options)
    except SystemExit as exc:  # argparse already printed the message
        return int(exc.code or 0) if exc.code not in (None, 0) else EXIT_USAGE
    if extra:
        parser.print_usage(sys.stderr)
        text = f"guard: unrecognized arguments: {' '.join(extra)}"
        if not command and not extra[0].startswith("-"):
            text += ("; put -- before the command: python -m stageload guard [options] -- "
                     + shlex.join(extra))
        print(text, file=sys.stderr)
        return EXIT_USAGE
    if not command:
        parser.print_usage(sys.stderr)
        print("guard: no command given; put it after --, e.g. "
              "python -m stageload guard --wait-free 40% -- python job.py", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = GuardConfig.from_args(ns)
        guard = Guard(config)
    except ConfigError as exc:
        print(f"guard: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def on_signal(signum, _frame):
        guard.cancel(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in _HANDLED}
    try:
        return guard.run(command)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
