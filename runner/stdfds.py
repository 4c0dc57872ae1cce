"""Standard descriptors 0–2 that a caller closed (``python -m runner … >&-``) are pointed at
``/dev/null`` first thing, in the supervisor and in the worker.

A closed descriptor 0, 1 or 2 is more than a lost stream: Python sets ``sys.stdout`` to None
(the first ``print`` fails), and the next file the process opens takes the free number — so
a trace or an events pipe would become "stdout" and a library's stray output would land in it.
Standard library only (``runner.__main__`` calls it before checking the dependencies).
"""
from __future__ import annotations

import os
import sys

_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def reopen_closed_std_fds() -> list[int]:
    """Point each closed descriptor among 0, 1, 2 at ``os.devnull`` (read for 0, write for
    1 and 2) and give Python a working ``sys.stdin``/``sys.stdout``/``sys.stderr`` for it
    (UTF-8, line-buffered). Returns the descriptors that were closed (``[]`` normally).
    Raises ``OSError`` only when ``os.devnull`` itself cannot be opened."""
    closed = [fd for fd, _, _ in _STREAMS if not _is_open(fd)]
    for fd, name, mode in _STREAMS:
        if fd not in closed:
            continue
        null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
        if null != fd:  # a lower descriptor was free too: move it to its number
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace",
                                buffering=1, closefd=False))
    return closed
