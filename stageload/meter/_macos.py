"""macOS readers: per-process footprints from ``proc_pid_rusage`` (libproc) and system memory
as Activity Monitor counts it (``_macos_vm``), all through ctypes into libSystem
(``_macos_lib``; a test-only stand-in can replace it, see there).

What each number is:

- footprint: ``ri_phys_footprint`` of ``struct rusage_info_v4`` — the kernel's per-process
  footprint ledger, the figure Activity Monitor's "Memory" column shows; it counts compressed
  memory and, by Apple's account, Metal / MPS buffers in unified memory (not verified here).
  Same user: no root needed.
- exited: a process that has exited but not been reaped still answers ``proc_pid_rusage``, with
  ``ri_phys_footprint`` 0 and ``ri_proc_exit_abstime`` set (XNU ``proc_exit``). It is gone:
  ``process_footprint`` raises ``ProcessLookupError``, as the Linux reader does for a zombie, so
  no 0-footprint sample is ever written for it.
- high-water mark: ``ri_interval_max_phys_footprint`` — the peak of the footprint since the last
  ``proc_reset_footprint_interval(pid)`` (libproc, macOS 10.14+), which
  ``reset_high_water_mark`` calls; the Sampler resets after every read, as with Linux's
  ``clear_refs``. Where that call is missing from libSystem or the kernel refuses it (EINVAL: no
  interval ledger), the mark falls back to ``ri_lifetime_max_phys_footprint`` (a lifetime peak,
  placed in time only when it rises) and ``hwm_note()`` says so.
- available, total, swap, pressure: see ``_macos_vm``.

Struct layouts come from Apple's ``<sys/resource.h>`` (XNU ``bsd/sys/resource.h``): every
``rusage_info_vN`` is ``uint8_t ri_uuid[16]`` followed by ``uint64_t`` fields, v2 has 18 of them
(160 bytes), v4 35 (296 bytes); ``ri_phys_footprint`` is at byte 72,
``ri_proc_exit_abstime`` at 88, ``ri_lifetime_max_phys_footprint`` at 240 and
``ri_interval_max_phys_footprint`` at 280. The kernel copies out exactly the size of the flavor
asked for. A kernel without v4 answers EINVAL, and v2 is asked next (no maxima then).

NOT RUN ON A MAC: this project is developed on Linux. Every function here is executed by the
tests against a stand-in libSystem built from C (tests/macos_standin/) that follows XNU's
semantics as read from its source; the real libSystem has not been called.
"""
from __future__ import annotations

import ctypes
import errno

from . import _macos_lib as libsys
from . import _macos_vm as vm
from ._common import SystemMemory, tree_footprint

RUSAGE_INFO_V2 = 2
RUSAGE_INFO_V4 = 4
RESET_CALL = "proc_reset_footprint_interval"

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


#: Whether the interval peak works, per library path: True after a successful reset, False
#: once the call is missing or refused with EINVAL, absent while not yet tried.
_interval_ok: dict[str, bool] = {}


def parse_rusage(buf: bytes) -> dict[str, int | None]:
    """``{"footprint", "lifetime_max", "interval_max", "exit_abstime"}`` from the raw bytes
    ``proc_pid_rusage`` filled (sizes in bytes, ``exit_abstime`` in Mach absolute time units,
    0 while the process runs): 296 bytes or more = v4, 160..295 = v2 (both maxima None).
    Raises ``ValueError`` for fewer than 160 bytes."""
    if len(buf) >= ctypes.sizeof(RusageInfoV4):
        info = RusageInfoV4.from_buffer_copy(buf[:ctypes.sizeof(RusageInfoV4)])
        maxima = int(info.ri_lifetime_max_phys_footprint), int(info.ri_interval_max_phys_footprint)
    elif len(buf) >= ctypes.sizeof(RusageInfoV2):
        info = RusageInfoV2.from_buffer_copy(buf[:ctypes.sizeof(RusageInfoV2)])
        maxima = None, None
    else:
        raise ValueError(f"rusage_info buffer of {len(buf)} bytes; expected at least 160 (v2)")
    return {"footprint": int(info.ri_phys_footprint), "lifetime_max": maxima[0],
            "interval_max": maxima[1], "exit_abstime": int(info.ri_proc_exit_abstime)}


def _rusage(pid: int) -> dict[str, int | None]:
    """Call ``proc_pid_rusage(pid, RUSAGE_INFO_V4)`` (falling back to V2 on kernels without
    v4) and parse it. Raises ``ProcessLookupError`` (ESRCH), ``PermissionError`` (EPERM) or
    ``OSError`` (also when libSystem cannot be loaded)."""
    lib = libsys.lib()
    for flavor, struct in ((RUSAGE_INFO_V4, RusageInfoV4), (RUSAGE_INFO_V2, RusageInfoV2)):
        info = struct()
        if lib.proc_pid_rusage(int(pid), flavor, ctypes.byref(info)) == 0:
            return parse_rusage(bytes(info))
        if ctypes.get_errno() != errno.EINVAL:  # EINVAL: flavor unknown here, try the older one
            raise libsys.errno_error(f"proc_pid_rusage({pid})")
    raise OSError(errno.EINVAL, "proc_pid_rusage: neither RUSAGE_INFO_V4 nor V2 is supported")


def process_footprint(pid: int) -> int:
    """``ri_phys_footprint`` of one process, bytes. Raises ``ProcessLookupError`` when it does
    not exist or has exited (``ri_proc_exit_abstime`` set: a zombie reads 0, which is not a
    footprint), ``PermissionError`` for another user's process."""
    info = _rusage(pid)
    if info["exit_abstime"]:
        raise ProcessLookupError(errno.ESRCH, f"process {pid} has exited (not yet reaped)")
    return info["footprint"]


def footprint(pid: int, *, tree: bool = True) -> int:
    """Sum of ``ri_phys_footprint`` over ``pid`` and (``tree``) its descendants, bytes."""
    return tree_footprint(pid, process_footprint, tree)


def high_water_mark(pid: int) -> int | None:
    """Peak footprint of ``pid`` (bytes): ``ri_interval_max_phys_footprint`` (since the last
    reset) once ``reset_high_water_mark`` has worked, else ``ri_lifetime_max_phys_footprint``.
    ``None`` when the process is gone or exited, not ours, or the kernel lacks v4."""
    try:
        info = _rusage(pid)
    except OSError:
        return None
    if info["exit_abstime"]:
        return None
    if _interval_ok.get(libsys.library_path()) and info["interval_max"] is not None:
        return info["interval_max"]
    return info["lifetime_max"]


def reset_high_water_mark(pid: int) -> bool:
    """Restart ``pid``'s interval peak from its current footprint with
    ``proc_reset_footprint_interval(pid)``. Returns True on success; False when libSystem
    lacks the call, the kernel refuses it (EINVAL; both make ``high_water_mark`` the lifetime
    peak from then on), or the process is gone (ESRCH) or another user's (EACCES)."""
    path = libsys.library_path()
    try:
        if not libsys.has_symbol(RESET_CALL):
            _interval_ok[path] = False
            return False
        rc = libsys.lib().proc_reset_footprint_interval(int(pid))
    except OSError:
        return False
    if rc == 0:
        _interval_ok[path] = True
        return True
    if ctypes.get_errno() == errno.EINVAL:
        _interval_ok[path] = False
    return False


def hwm_note() -> str | None:
    """Why ``hwm`` is a lifetime peak on this Mac (text), or None when interval peaks work or
    have not been tried yet."""
    if _interval_ok.get(libsys.library_path()) is False:
        return (f"{RESET_CALL} is not available here (libSystem older than macOS 10.14, or a "
                "kernel without the interval ledger): hwm is ri_lifetime_max_phys_footprint, "
                "a lifetime peak placed in time only when it rises")
    return None


def system_memory() -> SystemMemory:
    """Total (``hw.memsize_usable``), available (total − Activity Monitor's "Memory Used" from
    ``host_statistics64``), swap used / total (``vm.swapusage``), pressure
    (``kern.memorystatus_vm_pressure_level``): bytes, pressure 1/2/4. A figure that cannot be
    read is ``None`` (unknown, never "fine"); all are None when libSystem cannot be loaded."""
    try:
        total = vm.total_memory()
        page, stats = vm.page_size(), vm.vm_statistics()
        swap_used, swap_total = vm.swap_usage()
        pressure = vm.pressure()
    except OSError:
        return SystemMemory(total=None, available=None, swap_used=None, swap_total=None)
    available = None
    if total is not None and page is not None and stats is not None:
        available = vm.available_bytes(total, stats, page)
    return SystemMemory(total=total, available=available, swap_used=swap_used,
                        swap_total=swap_total, pressure=pressure)
