"""``stageload.meter`` — memory of a process tree and of the system, on Linux and macOS.

Public API (docs/ARCHITECTURE.md "Meter API"; user documentation: docs/meter.md):

- ``footprint(pid, *, tree=True) -> int``: bytes used by ``pid`` and (``tree``) its descendants.
  Linux: RSS + swap of each process; macOS: ``ri_phys_footprint`` (what Activity Monitor shows).
- ``high_water_mark(pid) -> int | None``: the kernel's peak for ``pid`` (bytes; Linux ``VmHWM``,
  macOS ``ri_interval_max_phys_footprint``, or ``ri_lifetime_max_phys_footprint`` where the
  interval cannot be reset), ``None`` when unknown.
- ``reset_high_water_mark(pid) -> bool``: restart that peak from now (our own processes only;
  Linux ``clear_refs``, macOS 10.14+ ``proc_reset_footprint_interval``).
- ``system_memory() -> SystemMemory``: total, available, swap used / total (bytes) and the macOS
  pressure level; ``None`` fields are unknown.
- ``Sampler(pid, sink, interval=0.1)``: samples another process tree from a thread of this one.
- ``MemoryMeter()``: in-process context manager, peak and per-phase peaks.

Importing this package imports psutil and ctypes only (never torch or matplotlib), so the runner
supervisor and the guard stay light. ``PLATFORM_READER`` names the reader module in use,
``reader_name()`` the one the platform (or the test-only stand-in switch) chooses now.
"""
from __future__ import annotations

from . import _platform
from ._common import SystemMemory
from ._inprocess import MemoryMeter
from ._platform import reader_name
from ._sampler import Sampler

_reader = _platform.load_reader()
PLATFORM_READER: str = _reader.__name__.rsplit(".", 1)[-1]


def footprint(pid: int, *, tree: bool = True) -> int:
    """Footprint of process ``pid`` and, when ``tree``, of all its descendants, in bytes.

    Linux: sum of RSS + swap per process (see ``_linux`` for why not PSS). macOS: sum of
    ``ri_phys_footprint``. Raises ``ProcessLookupError`` if ``pid`` does not exist or has
    exited (a zombie), ``PermissionError`` if it may not be read (another user's process).
    """
    return _reader.footprint(pid, tree=tree)


def high_water_mark(pid: int) -> int | None:
    """Kernel peak of ``pid`` alone (not descendants), bytes: Linux ``VmHWM`` (peak RSS since
    start or last reset), macOS ``ri_interval_max_phys_footprint`` (since the last reset) or,
    where that cannot be reset, ``ri_lifetime_max_phys_footprint``. ``None`` if it cannot be
    read."""
    return _reader.high_water_mark(pid)


def reset_high_water_mark(pid: int) -> bool:
    """Reset ``pid``'s kernel peak to its current size. Linux: writes ``5`` to
    ``/proc/PID/clear_refs``, which only the process's owner may do. macOS:
    ``proc_reset_footprint_interval(pid)`` (10.14+, same user). Returns whether the reset
    happened."""
    return _reader.reset_high_water_mark(pid)


def system_memory() -> SystemMemory:
    """Total / available memory, swap used / total (bytes) and macOS pressure (1/2/4); each
    field ``None`` when it cannot be read here (unknown, not "fine")."""
    return _reader.system_memory()


__all__ = ["footprint", "high_water_mark", "reset_high_water_mark", "system_memory",
           "SystemMemory", "Sampler", "MemoryMeter", "PLATFORM_READER", "reader_name"]
