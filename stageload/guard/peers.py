"""Other guards on this machine, so that a guard is never "busy" by its own command line.

Two guards waiting with the same ``--busy`` pattern would otherwise each see the other's command
line (``… --busy 'sleep 3[0-9]' -- sleep 33``) and wait for ever. So every process that runs a
:class:`~stageload.guard.Guard` — the ``python -m stageload guard`` command, any program that
uses the library — registers itself while it waits or runs its command, and
:func:`~stageload.guard.busy.find_busy` skips registered guards. Only the commands a guard
started (and anything else) can be busy.

Two ways to recognise a guard, both cheap:

1. its command line is a known guard entry point — ``python -m stageload guard …``, or one a
   program that uses the library declared with :func:`register_entry_point` (only the
   commands a guard starts stay matchable): :func:`looks_like_guard`. This covers a guard from
   the moment it is exec'd, before its Python has imported anything — for entry points known in
   the process that scans, i.e. the program's own (another program's guards are found by 2.);
2. a registry, for any other program that uses the library: a folder of small files,
``/tmp/stageload-guards-<uid>/<pid>-<n>``, each holding the process's creation time, so a file left
by a killed guard whose pid was reused by another process is recognised as stale (creation times
differ) and removed. Files, not an environment marker: a process's environment as others see it
(``/proc/PID/environ``) is fixed at ``exec``, so a marker set in ``os.environ`` at run time would be
invisible. Written by hand because no dependency of the project offers a cross-process registry;
``fcntl.flock`` is POSIX (Linux, macOS).

The same folder holds ``start.lock``: a guard about to start takes it, checks ``--busy`` once
more and keeps it until its command has been exec'd (``Popen`` returns only then), so two guards
admitted at the same poll cannot both start — the second one then sees the first one's command.
"""
from __future__ import annotations

import fcntl
import itertools
import os
from pathlib import Path
from typing import Iterable

import psutil

from . import private

_SLACK = 0.05  # seconds; psutil creation times are rounded to clock ticks
_counter = itertools.count()


#: ``python -m MODULE FIRST_ARG`` entry points that run a guard (None: any first argument);
#: this package's own, and those added by :func:`register_entry_point`.
_ENTRY_POINTS: dict[str, frozenset[str] | None] = {"stageload": frozenset({"guard"})}


def register_entry_point(module: str, first_args: Iterable[str] | None = None) -> None:
    """Declare that ``python -m MODULE [FIRST_ARG] …`` runs a :class:`~stageload.guard.Guard`,
    so this process's busy scan never counts such a command line as busy.

    ``module``: the top-level module name run with ``-m`` (``"myjobs"``); ``first_args``: the
    first arguments that mean a guard (``{"guard"}``), or None for any. Call it once at start-up
    of the program that builds guards. Raises ``ValueError`` for an empty or dotted module name
    (a dotted one, ``pkg.worker``, is what a guard *starts* and must stay matchable).

    Example::

        register_entry_point("myjobs")            # python -m myjobs … runs a guard
    """
    if not isinstance(module, str) or not module or "." in module:
        raise ValueError(f"{module!r} is not a top-level module name (e.g. 'myjobs')")
    _ENTRY_POINTS[module] = None if first_args is None else frozenset(first_args)


def looks_like_guard(argv: list[str]) -> bool:
    """True when ``argv`` runs a guard entry point under a Python interpreter
    (``python -m stageload guard …``, or one declared with :func:`register_entry_point`)."""
    if len(argv) < 3 or "python" not in os.path.basename(argv[0]).lower():
        return False
    if argv[1] == "-m":
        index = 1
    elif argv[1].startswith("-") and argv[2] == "-m":  # one interpreter flag such as -u first
        index = 2
    else:
        return False
    module = argv[index + 1] if index + 1 < len(argv) else ""
    if module not in _ENTRY_POINTS:
        return False
    first = _ENTRY_POINTS[module]
    return first is None or (index + 2 < len(argv) and argv[index + 2] in first)


def registry_dir() -> Path:
    """``$STAGELOAD_GUARD_DIR`` when set (guards that should see each other share it; a
    separate one isolates a group of guards, e.g. a test's), else this user's private folder
    (``stageload.guard.private.default_dir``: under ``$XDG_RUNTIME_DIR`` or the user's cache
    folder, not a guessable ``/tmp`` name; not ``$TMPDIR``, which differs per terminal on
    macOS). Whoever uses it makes and checks it with ``private.ensure``."""
    if os.environ.get("STAGELOAD_GUARD_DIR"):
        return Path(os.environ["STAGELOAD_GUARD_DIR"])
    from .private import default_dir

    return default_dir()


class Peers:
    """This process's entry in the guard registry, and the shared start lock.

    Every method swallows ``OSError``: a registry that cannot be written (read-only ``/tmp``)
    only means the old behaviour (another waiting guard may count as busy); it must never keep
    a guard from running or stopping its command.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or registry_dir()
        self._entry: Path | None = None
        self._lock_fd: int | None = None

    def register(self) -> None:
        """Announce this process as a guard (idempotent)."""
        if self._entry is not None:
            return
        try:
            private.ensure(self.folder)  # 0700, this user's (FolderUnusable is an OSError)
            entry = self.folder / f"{os.getpid()}-{next(_counter)}"
            entry.write_text(repr(psutil.Process().create_time()))
            self._entry = entry
        except (OSError, psutil.Error):
            self._entry = None

    def unregister(self) -> None:
        """Remove this guard's entry and release the start lock (idempotent)."""
        self.unlock()
        if self._entry is not None:
            try:
                self._entry.unlink()
            except OSError:
                pass
            self._entry = None

    def guard_pids(self) -> set[int]:
        """Pids of live processes registered as guards (stale entries are removed)."""
        pids: set[int] = set()
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return pids
        for entry in entries:
            name = entry.name
            if name == "start.lock":
                continue
            try:
                pid = int(name.split("-", 1)[0])
                created = float(entry.read_text())
                alive = abs(psutil.Process(pid).create_time() - created) <= _SLACK
            except (ValueError, OSError):
                continue
            except psutil.Error:
                alive = False
            if alive:
                pids.add(pid)
            else:
                try:
                    entry.unlink()
                except OSError:
                    pass
        return pids

    def try_lock(self) -> bool:
        """Take the start lock without blocking; True when this process holds it now (also
        when the lock cannot be used at all, so a broken registry never blocks starting)."""
        if self._lock_fd is not None:
            return True
        try:
            private.ensure(self.folder)  # 0700, this user's (FolderUnusable is an OSError)
            fd = os.open(self.folder / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            return True
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        """Release the start lock if held."""
        if self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None
