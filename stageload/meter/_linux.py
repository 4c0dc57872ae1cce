"""Linux readers: ``/proc/PID/status``, ``/proc/PID/clear_refs`` and psutil for system memory.

Footprint choice — **RSS + swap per process** (``VmRSS`` + ``VmSwap`` from
``/proc/PID/status``), not PSS + swap:

- it is what the kernel's high-water mark measures (``VmHWM`` is the peak of ``VmRSS``), so the
  sampled footprint and the high-water mark are on one scale and can be compared sample by
  sample;
- it costs one small file read per process: PSS needs ``/proc/PID/smaps_rollup``, which walks
  every page table of the process (milliseconds for a 30 GB model process, at 10 Hz that is the
  sampler's whole CPU budget), and psutil's only per-process swap figure
  (``memory_full_info``) takes that same walk;
- the cost of the choice: pages shared between processes of one tree (a forked child's
  copy-on-write pages, shared libraries) are counted once per process, so a tree of many forked
  workers reads high. The runner's worker is one process, where RSS + swap is exact.

``/proc/PID/status`` is read by hand because psutil exposes neither ``VmSwap`` (without the smaps
walk) nor ``VmHWM``; one read gives all three numbers from one snapshot. System figures come from
psutil (``virtual_memory``, ``swap_memory``), which parses ``/proc/meminfo``.
"""
from __future__ import annotations

from ._common import SystemMemory, psutil_system_memory, tree_footprint

_KB = 1024


def _status(pid: int) -> dict[str, int]:
    """The ``Vm*`` lines of ``/proc/PID/status`` in bytes (kernel units are kB = 1024 bytes).

    Raises ``FileNotFoundError`` / ``ProcessLookupError`` when the process is gone, and
    ``ProcessLookupError`` for a zombie (it has exited and holds no memory; only its parent has
    not collected its exit status yet).
    """
    values: dict[str, int] = {}
    with open(f"/proc/{int(pid)}/status", "rb") as f:
        data = f.read()
    for line in data.splitlines():
        if line.startswith(b"State:") and line.split()[1:2] == [b"Z"]:
            raise ProcessLookupError(f"process {pid} has exited (zombie)")
        if line.startswith(b"Vm"):
            key, _, rest = line.partition(b":")
            parts = rest.split()
            if parts:
                values[key.decode()] = int(parts[0]) * _KB
    return values


def process_footprint(pid: int) -> int:
    """RSS + swap of one process (``VmRSS`` + ``VmSwap``), bytes. Raises
    ``ProcessLookupError`` when it is gone or a zombie."""
    s = _status(pid)
    return s.get("VmRSS", 0) + s.get("VmSwap", 0)


def footprint(pid: int, *, tree: bool = True) -> int:
    """Footprint of ``pid`` (and its descendants when ``tree``): sum of RSS + swap, bytes.

    Raises ``ProcessLookupError`` if ``pid`` does not exist, ``PermissionError`` if it cannot be
    read.
    """
    return tree_footprint(pid, process_footprint, tree)


def high_water_mark(pid: int) -> int | None:
    """Peak resident set size of ``pid`` (``VmHWM``), bytes, since it started or since the last
    ``reset_high_water_mark``. Only the process itself, not its descendants, and RSS only (not
    swap). ``None`` if the process is gone, is a zombie, or cannot be read.
    """
    try:
        return _status(pid).get("VmHWM")
    except OSError:
        return None


def reset_high_water_mark(pid: int) -> bool:
    """Reset ``pid``'s ``VmHWM`` to its current RSS by writing ``5`` to ``/proc/PID/clear_refs``.

    ``clear_refs`` is writable only by the process's owner (mode 0200), so this works for our own
    processes (same user) and fails for others: returns ``False`` then (and when the process is
    gone or the kernel is older than 4.0), ``True`` on success. ``getrusage().ru_maxrss`` is not
    a substitute for ``VmHWM``: it also keeps the peak of the memory the process replaced at
    ``execve`` (for a child Python starts, its parent's peak; ``bench/own_peak.py``).
    """
    try:
        with open(f"/proc/{int(pid)}/clear_refs", "wb", buffering=0) as f:
            f.write(b"5")
        return True
    except OSError:
        return False


def system_memory() -> SystemMemory:
    """Total and available memory, swap used and configured (bytes), from ``/proc/meminfo``
    through psutil (``_common.psutil_system_memory``). Pressure is a macOS notion and is
    ``None`` here. Fields that cannot be read are ``None``.
    """
    return psutil_system_memory()
