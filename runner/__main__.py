"""``python -m runner`` — one image (default; ``run`` in front of it is allowed), ``batch``,
``check`` or ``export`` (a saved asset → GLB); see docs/runner.md.

Only the standard library is imported before dispatch, so an interpreter that lacks Pillow,
NumPy or psutil still answers with a protocol ``error`` event (kind ``missing_dependency``)
instead of a traceback.
"""
import os
import sys

from meshfacts.errors import RunnerError

from .protocol import early_failure
from .stdfds import reopen_closed_std_fds

_DEPENDENCIES = ("PIL", "numpy", "psutil")
"""Third-party packages the supervisor itself needs (torch is the worker's business)."""


def _missing_dependency(exc: ImportError, mode: str) -> int:
    """A third-party package the supervisor needs is missing: ``hello`` and an ``error`` of
    kind ``missing_dependency`` naming it and the interpreter; returns the exit code."""
    name = getattr(exc, "name", None) or str(exc)
    return early_failure(RunnerError(
        "missing_dependency", f"The Python at {sys.executable} cannot import {name} ({exc}).",
        f"Install the project's dependencies into it: {sys.executable} -m pip install -e "
        "<the project folder>, or choose an interpreter that has them.",
        python=sys.executable, module=name), mode)


def main(argv=None) -> int:
    """Dispatch to the single-image, ``batch`` or ``check`` command; returns the exit status.
    A closed stdin, stdout or stderr is pointed at /dev/null before anything else."""
    reopen_closed_std_fds()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run" and not os.path.lexists("run"):
        # `python -m runner run IMAGE …` (a guessed subcommand) is the single run; a file
        # named `run` in the current folder is still taken as the image
        argv = argv[1:]
    mode = argv[0] if argv and argv[0] in ("batch", "check", "export") else "single"
    try:
        # _DEPENDENCIES, before anything else, so a missing one is one clear error
        import numpy  # noqa: F401
        import PIL  # noqa: F401
        import psutil  # noqa: F401

        from stageload.guard import register_entry_point
        # every mode runs a guard: another runner's busy scan must not count this one's command
        # line (``python -m runner … --busy runner``) as busy
        register_entry_point("runner")
        # the commands import Pillow, NumPy and psutil: only once the check above has passed
        if mode == "batch":
            from runner.commands.batch import main as command
        elif mode == "check":
            from runner.commands.check import main as command
        elif mode == "export":
            from runner.commands.export import main as command
        else:
            from runner.commands.cli import main as command
    except ImportError as exc:
        if getattr(exc, "name", None) and exc.name.split(".")[0] in _DEPENDENCIES:
            return _missing_dependency(exc, mode)
        raise
    return command(argv[1:] if mode != "single" else argv)


if __name__ == "__main__":
    sys.exit(main())
