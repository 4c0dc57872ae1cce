"""What every platform reader shares: the ``SystemMemory`` record and the process-tree walk."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import psutil


@dataclass(frozen=True)
class SystemMemory:
    """System-wide memory figures at one moment.

    Every field is an ``int`` in bytes, except ``pressure``, or ``None`` when this platform or
    this machine cannot tell. ``None`` means *unknown*, never "fine": a guard must treat it as
    missing data.

    - ``total``: usable physical memory (bytes).
    - ``available``: memory that can be given to programs without swapping (bytes). Linux:
      ``MemAvailable`` from ``/proc/meminfo``; macOS: ``total`` less Activity Monitor's
      "Memory Used" (app + wired + compressed pages, ``host_statistics64``; see ``_macos_vm``).
    - ``total``: Linux ``MemTotal``; macOS ``hw.memsize_usable`` (memory the kernel manages).
    - ``swap_used`` / ``swap_total``: swap in use / configured (bytes). Linux ``/proc/meminfo``;
      macOS ``vm.swapusage``. A machine without swap reports ``0`` / ``0``.
    - ``pressure``: macOS ``kern.memorystatus_vm_pressure_level`` (1 normal, 2 warning,
      4 critical); ``None`` on other platforms.
    """

    total: int | None
    available: int | None
    swap_used: int | None
    swap_total: int | None
    pressure: int | None = None

    def as_dict(self) -> dict:
        """The fields as a plain dict (JSON-serialisable)."""
        return asdict(self)


def psutil_system_memory() -> SystemMemory:
    """Total and available memory, swap used and configured (bytes) from psutil
    (``virtual_memory``, ``swap_memory``; on Linux they parse ``/proc/meminfo``); ``pressure``
    ``None``. A figure psutil cannot read is ``None`` (unknown), never raised. Shared by the
    Linux and generic readers; macOS reads everything through libSystem instead (_macos_vm).
    """
    try:
        vm = psutil.virtual_memory()
        total, available = int(vm.total), int(vm.available)
    except (OSError, RuntimeError, ValueError):
        total = available = None
    try:
        sw = psutil.swap_memory()
        swap_used, swap_total = int(sw.used), int(sw.total)
    except (OSError, RuntimeError, ValueError):
        swap_used = swap_total = None
    return SystemMemory(total=total, available=available, swap_used=swap_used,
                        swap_total=swap_total, pressure=None)


def descendants(pid: int) -> list[int]:
    """Pids of every process below ``pid`` (children, grandchildren, …), from psutil
    (``Process.children(recursive=True)``: on Linux one read of ``/proc/*/stat`` per process on
    the machine, ~1 ms for 100 processes). ``[]`` when ``pid`` is gone."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def tree_footprint(pid: int, process_footprint: Callable[[int], int], tree: bool = True,
                   below: list[int] | None = None) -> int:
    """Sum ``process_footprint`` over ``pid`` and, when ``tree``, all its descendants.

    Descendants are ``below`` when given (a list the caller refreshed recently, see
    ``Sampler(tree_refresh=)``), else found now with ``descendants(pid)`` — the process and
    every process below it, whatever their process group. A descendant that exits during the
    walk is skipped (its memory is gone); one we may not read is skipped too (it is not ours).

    Raises ``ProcessLookupError`` when ``pid`` itself does not exist (or has exited), and
    ``PermissionError`` when ``pid`` itself cannot be read.
    """
    try:
        total = process_footprint(pid)
    except (FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess) as exc:
        raise ProcessLookupError(f"process {pid} does not exist (it may have exited)") from exc
    except (psutil.AccessDenied, PermissionError) as exc:
        raise PermissionError(f"not allowed to read the memory of process {pid}; "
                              "only processes of the same user can be measured") from exc
    if not tree:
        return total
    for child in (descendants(pid) if below is None else below):
        try:
            total += process_footprint(child)
        except (FileNotFoundError, ProcessLookupError, PermissionError,
                psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total
