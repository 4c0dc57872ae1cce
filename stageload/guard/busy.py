"""Find other processes whose whole command line matches a ``--busy`` pattern (psutil)."""
from __future__ import annotations

import os
import re
from typing import Callable

import psutil


def own_lineage(pid: int | None = None) -> set[int]:
    """The pid of this process (or ``pid``) and of all its ancestors.

    They are never counted as busy: the guard's own command line contains the pattern, and so
    may the shell or the supervisor that started it.
    """
    pid = os.getpid() if pid is None else pid
    pids = {pid}
    try:
        pids.update(p.pid for p in psutil.Process(pid).parents())
    except psutil.Error:
        pass
    return pids


def find_busy(patterns: list[str], ignore: set[int],
              skip: Callable[[list[str]], bool] | None = None,
              guards: set[int] = frozenset()) -> list[str]:
    """Describe (``pid 123: python train.py``) each process whose command line matches a pattern.

    The command line is the process's arguments joined by single spaces; a pattern matches when
    ``re.search`` finds it anywhere. Skipped: processes in ``ignore``; other guards — pids in
    ``guards`` and processes whose argument list ``skip(argv)`` accepts
    (:func:`stageload.guard.peers.looks_like_guard`) — and their wrappers, i.e. ancestors whose
    command line holds the guard's own arguments (``timeout 600 python -m stageload guard …``,
    ``sh -c "python -m stageload guard …"``); kernel threads (no command line); processes that
    vanish or may not be read.
    """
    if not patterns:
        return []
    compiled = [re.compile(p) for p in patterns]
    lines: dict[int, str] = {}
    peer_tails: dict[int, str] = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid in ignore:
            continue
        argv = proc.info.get("cmdline")
        if not argv:
            continue
        if proc.pid in guards or (skip is not None and skip(argv)):
            peer_tails[proc.pid] = " ".join(argv[1:])
            continue
        lines[proc.pid] = " ".join(argv)
    for pid, tail in peer_tails.items():  # a wrapper carries the guard's arguments in its own line
        try:
            parents = psutil.Process(pid).parents()
        except psutil.Error:
            continue
        for parent in parents:
            line = lines.get(parent.pid)
            if line is None or tail not in line:
                break
            del lines[parent.pid]
    found = []
    for pid, line in lines.items():
        for pattern in compiled:
            match = pattern.search(line)
            if match:
                found.append(f"pid {pid}: {_shorten(line, match.start(), match.end())}")
                break
    return found


def _shorten(line: str, start: int, end: int, width: int = 100) -> str:
    """At most about ``width`` characters of ``line`` that still show the match [start, end)."""
    if len(line) <= width:
        return line
    if end <= width - 2:
        return line[: width - 2] + " …"
    head = line[:40]
    return f"{head} … {line[max(40, start - 20):end + 20]}" + (" …" if end + 20 < len(line) else "")
