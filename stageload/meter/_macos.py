"""macOS readers: ``proc_pid_rusage`` (libproc) and ``sysctlbyname`` through ctypes, psutil for
total memory and swap.

What each number is:

- footprint: ``ri_phys_footprint`` of ``struct rusage_info_v4`` — the kernel's per-process
  footprint ledger, the figure Activity Monitor's "Memory" column shows; it counts Metal / MPS
  buffers in unified memory and compressed memory. Same user: no root needed.
- high-water mark: ``ri_lifetime_max_phys_footprint`` (same struct): the lifetime peak of that
  ledger. macOS has no public way to reset it, so ``reset_high_water_mark`` returns ``False``
  and a ``Sampler`` places a mark in time only when it rises (docs/meter.md).
- available: ``kern.memorystatus_level`` (percent of memory available, 0–100) × total. psutil's
  ``available`` on macOS (free + inactive pages) leaves compressed memory out and reads far too
  low or high under pressure, so it is not used.
- pressure: ``kern.memorystatus_vm_pressure_level`` (1 normal, 2 warning, 4 critical).
- swap: psutil's ``swap_memory()``, which reads ``vm.swapusage`` (``struct xsw_usage``).
- total: psutil's ``virtual_memory().total`` (``hw.memsize``).

Struct layouts come from Apple's ``<sys/resource.h>`` (XNU ``bsd/sys/resource.h``): every
``rusage_info_vN`` is ``uint8_t ri_uuid[16]`` followed by ``uint64_t`` fields, v2 has 18 of them
(160 bytes), v4 35 (296 bytes); ``ri_phys_footprint`` is at byte 72 and
``ri_lifetime_max_phys_footprint`` at byte 240. ``tests/meter/test_macos_layout.py`` checks
these sizes and offsets with ``ctypes.sizeof`` / field offsets, and the parsers on bytes.

NOT RUN HERE: this project is developed and tested on Linux; no Mac was available. The ctypes
calls into ``libSystem`` (``proc_pid_rusage``, ``sysctlbyname``) have not been executed; the
struct layouts, the byte parsers and the dispatcher choice are tested on Linux. Importing this
module on Linux works (libSystem is loaded on first use).
"""
from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import replace

from ._common import SystemMemory, psutil_system_memory, tree_footprint

RUSAGE_INFO_V2 = 2
RUSAGE_INFO_V4 = 4
LIBSYSTEM = "/usr/lib/libSystem.B.dylib"

_V0_FIELDS = ["ri_user_time", "ri_system_time", "ri_pkg_idle_wkups", "ri_interrupt_wkups",
              "ri_pageins", "ri_wired_size", "ri_resident_size", "ri_phys_footprint",
              "ri_proc_start_abstime", "ri_proc_exit_abstime"]
_V1_FIELDS = ["ri_child_user_time", "ri_child_system_time", "ri_child_pkg_idle_wkups",
              "ri_child_interrupt_wkups", "ri_child_pageins", "ri_child_elapsed_abstime"]
_V2_FIELDS = ["ri_diskio_bytesread", "ri_diskio_byteswritten"]
_V3_FIELDS = ["ri_cpu_time_qos_default", "ri_cpu_time_qos_maintenance",
              "ri_cpu_time_qos_background", "ri_cpu_time_qos_utility", "ri_cpu_time_qos_legacy",
              "ri_cpu_time_qos_user_initiated", "ri_cpu_time_qos_user_interactive",
              "ri_billed_system_time", "ri_serviced_system_time"]
_V4_FIELDS = ["ri_logical_writes", "ri_lifetime_max_phys_footprint", "ri_instructions",
              "ri_cycles", "ri_billed_energy", "ri_serviced_energy",
              "ri_interval_max_phys_footprint", "ri_runnable_time"]


def _fields(names: list[str]) -> list[tuple]:
    return [("ri_uuid", ctypes.c_uint8 * 16)] + [(n, ctypes.c_uint64) for n in names]


class RusageInfoV2(ctypes.Structure):
    """``struct rusage_info_v2`` (Apple ``<sys/resource.h>``): 16 + 18 × 8 = 160 bytes."""
    _fields_ = _fields(_V0_FIELDS + _V1_FIELDS + _V2_FIELDS)


class RusageInfoV4(ctypes.Structure):
    """``struct rusage_info_v4`` (Apple ``<sys/resource.h>``): 16 + 35 × 8 = 296 bytes."""
    _fields_ = _fields(_V0_FIELDS + _V1_FIELDS + _V2_FIELDS + _V3_FIELDS + _V4_FIELDS)



_libc = None


def _lib() -> ctypes.CDLL:
    """libSystem (holds libproc's ``proc_pid_rusage`` and ``sysctlbyname``), loaded once.
    Raises ``OSError`` when not on macOS."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(LIBSYSTEM, use_errno=True)
        lib.proc_pid_rusage.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.proc_pid_rusage.restype = ctypes.c_int
        lib.sysctlbyname.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                                     ctypes.c_size_t]
        lib.sysctlbyname.restype = ctypes.c_int
        _libc = lib
    return _libc


def parse_rusage(buf: bytes) -> dict[str, int | None]:
    """``{"footprint", "lifetime_max"}`` (bytes) from the raw bytes ``proc_pid_rusage`` filled:
    296 bytes or more = v4 (both), 160..295 = v2 (``lifetime_max`` None). Raises ``ValueError``
    for fewer than 160 bytes."""
    if len(buf) >= ctypes.sizeof(RusageInfoV4):
        info = RusageInfoV4.from_buffer_copy(buf[:ctypes.sizeof(RusageInfoV4)])
        return {"footprint": int(info.ri_phys_footprint),
                "lifetime_max": int(info.ri_lifetime_max_phys_footprint)}
    if len(buf) >= ctypes.sizeof(RusageInfoV2):
        info = RusageInfoV2.from_buffer_copy(buf[:ctypes.sizeof(RusageInfoV2)])
        return {"footprint": int(info.ri_phys_footprint), "lifetime_max": None}
    raise ValueError(f"rusage_info buffer of {len(buf)} bytes; expected at least 160 (v2)")


def _rusage(pid: int) -> dict[str, int | None]:
    """Call ``proc_pid_rusage(pid, RUSAGE_INFO_V4)`` (falling back to V2 on kernels without
    v4). Raises ``ProcessLookupError`` (ESRCH), ``PermissionError`` (EPERM) or ``OSError``."""
    lib = _lib()
    for flavor, struct in ((RUSAGE_INFO_V4, RusageInfoV4), (RUSAGE_INFO_V2, RusageInfoV2)):
        info = struct()
        if lib.proc_pid_rusage(int(pid), flavor, ctypes.byref(info)) == 0:
            return parse_rusage(bytes(info))
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # flavor unknown to this kernel, try the older one
            continue
        message = f"proc_pid_rusage({pid}): {os.strerror(err)}"
        if err == errno.ESRCH:
            raise ProcessLookupError(err, message)
        if err == errno.EPERM:  # another user's process
            raise PermissionError(err, message)
        raise OSError(err, message)
    raise OSError(errno.EINVAL, "proc_pid_rusage: neither RUSAGE_INFO_V4 nor V2 is supported")


def parse_sysctl_int(buf: bytes) -> int:
    """Integer value of a sysctl from its raw bytes (little-endian, 4 or 8 bytes, as
    ``sysctlbyname`` returns ``int`` / ``int64`` on Apple Silicon and x86_64). Raises
    ``ValueError`` for another length."""
    if len(buf) not in (4, 8):
        raise ValueError(f"sysctl integer of {len(buf)} bytes; expected 4 or 8")
    return int.from_bytes(buf, "little", signed=True)


def _sysctl_bytes(name: str, size: int = 8) -> bytes:
    lib = _lib()
    buf = ctypes.create_string_buffer(size)
    length = ctypes.c_size_t(size)
    if lib.sysctlbyname(name.encode(), buf, ctypes.byref(length), None, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sysctlbyname({name!r}): {os.strerror(err)}")
    return buf.raw[:length.value]


def sysctl_int(name: str) -> int | None:
    """Integer sysctl ``name`` (e.g. ``kern.memorystatus_level``), ``None`` if unreadable."""
    try:
        return parse_sysctl_int(_sysctl_bytes(name))
    except (OSError, ValueError):
        return None


def available_from_level(level: int | None, total: int | None) -> int | None:
    """Bytes available from ``kern.memorystatus_level`` (percent, 0–100) and total bytes;
    ``None`` when either is unknown or the level is out of range."""
    if level is None or total is None or not 0 <= level <= 100:
        return None
    return total * level // 100


def process_footprint(pid: int) -> int:
    """``ri_phys_footprint`` of one process, bytes."""
    return _rusage(pid)["footprint"]


def footprint(pid: int, *, tree: bool = True) -> int:
    """Sum of ``ri_phys_footprint`` over ``pid`` and (``tree``) its descendants, bytes."""
    return tree_footprint(pid, process_footprint, tree)


def high_water_mark(pid: int) -> int | None:
    """``ri_lifetime_max_phys_footprint`` of ``pid`` (bytes, lifetime peak); ``None`` when the
    process is gone, not ours, or the kernel lacks ``RUSAGE_INFO_V4``."""
    try:
        return _rusage(pid)["lifetime_max"]
    except OSError:
        return None


def reset_high_water_mark(pid: int) -> bool:
    """macOS offers no public reset of the lifetime peak: always ``False``."""
    return False


def system_memory() -> SystemMemory:
    """Total (``hw.memsize`` via psutil), available (``kern.memorystatus_level`` × total),
    swap used / total (``vm.swapusage`` via psutil), pressure
    (``kern.memorystatus_vm_pressure_level``): bytes, pressure 1/2/4; ``None`` = unknown."""
    base = psutil_system_memory()  # psutil's available leaves out compressed memory: replaced
    available = available_from_level(sysctl_int("kern.memorystatus_level"), base.total)
    pressure = sysctl_int("kern.memorystatus_vm_pressure_level")
    return replace(base, available=available, pressure=pressure if pressure in (1, 2, 4) else None)
