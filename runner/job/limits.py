"""A failure that is a system limit, said as one: ``resource_limit`` naming the limit, or
``out_of_memory`` naming the address-space limit an allocation hit (stdlib only; used by the
supervisor and the worker; the limits themselves are read by ``meshfacts.proclimits``).

The limits are the process's own resource limits (``resource.getrlimit``, POSIX
``getrlimit(2)``; the shell's ``ulimit``): ``RLIMIT_NOFILE`` (open files, ``ulimit -n``:
``EMFILE``), ``RLIMIT_NPROC`` (processes and threads of the user, ``ulimit -u``: ``EAGAIN`` from
``fork``/``clone``, which Python's ``threading`` reports as "can't start new thread"),
``RLIMIT_AS`` / ``RLIMIT_DATA`` (address space / data segment, ``ulimit -v`` / ``-d``: failed
allocations — ``MemoryError``, and the ``SystemError`` "error return without exception set" a C
extension raises when its allocation fails without setting one).
"""
from __future__ import annotations

import errno

from meshfacts.errors import RunnerError
from meshfacts.proclimits import cause_chain, memory_limit, soft_limit

__all__ = ["cause_chain", "memory_error", "memory_limit", "resource_error"]

_THREAD_WORDING = ("can't start new thread", "cannot start new thread")
_NO_EXCEPTION_SET = "error return without exception set"


def _limit_text(name: str, flag: str, what: str) -> str:
    soft = soft_limit(name)
    value = f" of {soft}" if soft is not None else \
        " (unlimited here: a system-wide or cgroup limit)"
    return f"the {what} limit ({name}, `ulimit {flag}`){value}"


def resource_error(chain: list[BaseException], where: str) -> RunnerError | None:
    """The ``RunnerError`` for a cause chain (outermost first) that is a system limit, or None.
    ``where``: who hit it, for the message (e.g. "the worker", "the runner")."""
    for cur in chain:
        text = str(cur).lower()
        if isinstance(cur, OSError) and cur.errno in (errno.EMFILE, errno.ENFILE):
            limit = _limit_text("RLIMIT_NOFILE", "-n", "open-file") if cur.errno == errno.EMFILE \
                else "the system's open-file table (ENFILE)"
            return RunnerError("resource_limit", f"{where} could not open a file: {limit} is "
                               f"reached ({cur}).", "Raise the limit (e.g. `ulimit -n 1024` in "
                               "the shell that starts it), close programs holding many files, "
                               "then run again.", limit="RLIMIT_NOFILE")
        if (isinstance(cur, RuntimeError) and any(w in text for w in _THREAD_WORDING)) or \
                (isinstance(cur, OSError) and cur.errno == errno.EAGAIN
                 and ("fork" in text or "thread" in text or cur.filename is None)):
            memory = memory_limit()
            if memory is not None:
                return _thread_under_memory_limit(cur, where, memory)
            limit = _limit_text("RLIMIT_NPROC", "-u", "process/thread")
            return RunnerError("resource_limit", f"{where} could not start a process or thread: "
                               f"{limit} is reached ({type(cur).__name__}: {cur}).",
                               "Raise the limit (e.g. `ulimit -u 4096`), or end other jobs of "
                               "this user, then run again.", limit="RLIMIT_NPROC")
    return None


def _thread_under_memory_limit(cur: BaseException, where: str, memory: str) -> RunnerError:
    """A thread that could not start under an address-space or data limit: each new thread
    reserves its stack (8 MiB by default) and glibc a malloc arena (up to 64 MiB on 64-bit), so
    under such a limit it is the address space that runs out long before the process/thread
    count (whose own limit the message still names)."""
    nproc = _limit_text("RLIMIT_NPROC", "-u", "process/thread")
    return RunnerError("out_of_memory", f"{where} could not start a thread under {memory}: a new "
                       f"thread's stack and memory do not fit ({type(cur).__name__}: {cur}; "
                       f"{nproc}).", "Raise or remove that limit (`ulimit -v unlimited` in the "
                       "shell that starts the runner).", limit=memory.split("(")[1].split(",")[0])


def memory_error(chain: list[BaseException], said: str) -> RunnerError | None:
    """``out_of_memory`` naming the address-space limit when the process has one and the chain
    holds an allocation failure (``MemoryError``, or the ``SystemError`` "error return without
    exception set"); None otherwise (no limit: the caller's own out-of-memory rule applies)."""
    limit = memory_limit()
    if limit is None:
        return None
    for cur in chain:
        if isinstance(cur, MemoryError) or (isinstance(cur, SystemError)
                                            and _NO_EXCEPTION_SET in str(cur)):
            return RunnerError("out_of_memory", f"An allocation failed under {limit} ({said}).",
                               "Raise or remove that limit (`ulimit -v unlimited` in the shell "
                               "that starts the runner); the backend needs more address space "
                               "than it allows.", limit=limit.split("(")[1].split(",")[0])
    return None
