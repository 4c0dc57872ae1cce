"""What a process's own limits and its end say, standard library only: the cause chain of an
exception (``cause_chain``), a process's soft resource limit (``soft_limit``) and its
address-space or data-segment limit in words (``memory_limit``), and the signals a process
raises against itself when it crashes (``CRASH_SIGNALS``).

The limits are the process's own resource limits (``resource.getrlimit``, POSIX
``getrlimit(2)``; the shell's ``ulimit``). Shared by the runner's supervisor and worker
(``runner.job.limits``, ``runner.job.worker_process``) and the runner's export engine (its killable
child
processes, ``bounded_export.stoppable``), which depends on nothing of the runner.
"""
from __future__ import annotations

import signal

from .units import format_size

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None

CRASH_SIGNALS = frozenset(getattr(signal, name) for name in
                          ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS")
                          if hasattr(signal, name))
"""Signals a process raises against itself when it crashes (a native library's invalid memory
access, an abort): it crashed, nobody killed it."""


def cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (``__cause__``, else ``__context__``), outermost first, each
    once (a cycle ends the walk)."""
    chain: list[BaseException] = []
    cur = exc
    while cur is not None and all(cur is not seen for seen in chain):
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def soft_limit(name: str) -> int | None:
    """The soft limit ``resource.<name>`` (e.g. ``"RLIMIT_AS"``, bytes; None when unlimited,
    unknown, or not POSIX)."""
    if resource is None or not hasattr(resource, name):
        return None
    try:
        soft, _hard = resource.getrlimit(getattr(resource, name))
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def memory_limit() -> str | None:
    """"the address-space limit (RLIMIT_AS, `ulimit -v`) of 700.0 MiB" — or the data-segment
    one — when the process has one; None when neither is set."""
    for name, flag, what in (("RLIMIT_AS", "-v", "address-space"),
                             ("RLIMIT_DATA", "-d", "data-segment")):
        soft = soft_limit(name)
        if soft is not None:
            return f"the {what} limit ({name}, `ulimit {flag}`) of {format_size(soft)}"
    return None
