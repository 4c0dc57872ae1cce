"""macOS system memory as Activity Monitor counts it: ``host_statistics64(HOST_VM_INFO64)``
pages × the kernel's page size, the total, swap and the pressure level.

**Available** = total − Activity Monitor's "Memory Used", where

    Memory Used = App Memory + Wired + Compressed
                = (internal_page_count − purgeable_count) + wire_count + compressor_page_count

pages × ``host_page_size`` (16 KiB on Apple Silicon, 4 KiB on Intel: never assumed). What is left
— free pages, file-backed (``external``) cache and purgeable memory — is what the system hands to
a new program without compressing or swapping anything a running program uses. The older reader
used ``kern.memorystatus_level``, which on macOS counts active + inactive + free + speculative
pages (``osfmk/vm/vm_pageout.c``): memory that running programs actively use counted as
available, so a 48 GiB Mac with a 27 GiB model resident read ~91 % available.

**Total** is ``hw.memsize_usable`` (XNU ``max_mem``: the memory the VM manages, physical memory
less boot-time carve-outs; ``bsd/kern/kern_mib.c``), with ``hw.memsize`` (``max_mem_actual``, all
physical memory, Activity Monitor's "Physical Memory") only where ``memsize_usable`` is missing.
The page counts above partition the managed memory, so subtracting them from ``hw.memsize``
would count the carve-outs (a few hundred MB, never available to programs) as available. The
same choice Linux makes: ``MemTotal`` is usable RAM, not installed RAM.

``struct vm_statistics64`` (``osfmk/mach/vm_statistics.h``): 4 × ``natural_t``, 9 × ``uint64_t``,
2 × ``natural_t``, 4 × ``uint64_t``, 4 × ``natural_t``, 1 × ``uint64_t``, ``aligned(8)`` — 152
bytes, ``HOST_VM_INFO64_COUNT`` = 152 / sizeof(``integer_t``) = 38 (``osfmk/mach/host_info.h``).
A kernel that answers with fewer (``HOST_VM_INFO64_REV0_COUNT`` = 24, before the compressor
fields) leaves available unknown. ``HOST_VM_INFO64`` = 4.

**Swap**: ``vm.swapusage``, ``struct xsw_usage`` (``bsd/sys/sysctl.h``): ``xsu_total``,
``xsu_avail``, ``xsu_used`` (``uint64_t``), ``xsu_pagesize`` (``uint32_t``), ``xsu_encrypted``
(``boolean_t``) — 32 bytes.

**Pressure**: ``kern.memorystatus_vm_pressure_level`` (``bsd/kern/kern_memorystatus_notify.c``),
a ``uint32_t`` dispatch level: 1 normal, 2 warn, 4 critical; readable without privileges on
macOS. Any other value is unknown (``None``).
"""
from __future__ import annotations

import ctypes

from . import _macos_lib as libsys

HOST_VM_INFO64 = 4
PRESSURE_LEVELS = (1, 2, 4)

_u32, _u64 = ctypes.c_uint32, ctypes.c_uint64


class VmStatistics64(ctypes.Structure):
    """``struct vm_statistics64`` (XNU ``osfmk/mach/vm_statistics.h``), 152 bytes; counts are
    pages of ``host_page_size`` bytes."""
    _fields_ = ([(n, _u32) for n in ("free_count", "active_count", "inactive_count", "wire_count")]
                + [(n, _u64) for n in ("zero_fill_count", "reactivations", "pageins", "pageouts",
                                       "faults", "cow_faults", "lookups", "hits", "purges")]
                + [(n, _u32) for n in ("purgeable_count", "speculative_count")]
                + [(n, _u64) for n in ("decompressions", "compressions", "swapins", "swapouts")]
                + [(n, _u32) for n in ("compressor_page_count", "throttled_count",
                                       "external_page_count", "internal_page_count")]
                + [("total_uncompressed_pages_in_compressor", _u64)])


HOST_VM_INFO64_COUNT = ctypes.sizeof(VmStatistics64) // ctypes.sizeof(ctypes.c_int)  # 38


class XswUsage(ctypes.Structure):
    """``struct xsw_usage`` (``vm.swapusage``; XNU ``bsd/sys/sysctl.h``), 32 bytes."""
    _fields_ = [("xsu_total", _u64), ("xsu_avail", _u64), ("xsu_used", _u64),
                ("xsu_pagesize", _u32), ("xsu_encrypted", ctypes.c_int)]


def memory_used(stats: VmStatistics64, page_size: int) -> int:
    """Activity Monitor's "Memory Used" in bytes: (internal − purgeable + wired + compressor)
    pages × ``page_size``. Purgeable pages are internal ones the system may drop at once."""
    app = max(0, int(stats.internal_page_count) - int(stats.purgeable_count))
    return (app + int(stats.wire_count) + int(stats.compressor_page_count)) * int(page_size)


def available_bytes(total: int, stats: VmStatistics64, page_size: int) -> int:
    """``total`` − :func:`memory_used` (bytes), never below 0."""
    return max(0, int(total) - memory_used(stats, page_size))


def page_size() -> int | None:
    """``host_page_size(mach_host_self())``: the kernel's page size in bytes (the unit of the
    ``vm_statistics64`` counts); ``None`` when the call fails."""
    size = ctypes.c_size_t(0)
    if libsys.lib().host_page_size(libsys.host_port(), ctypes.byref(size)) != libsys.KERN_SUCCESS:
        return None
    return int(size.value) or None


def vm_statistics() -> VmStatistics64 | None:
    """``host_statistics64(host, HOST_VM_INFO64, …)`` with room for all 38 ints; ``None`` when
    the call fails or the kernel answers with an older, shorter structure."""
    stats = VmStatistics64()
    count = ctypes.c_uint(HOST_VM_INFO64_COUNT)
    rc = libsys.lib().host_statistics64(libsys.host_port(), HOST_VM_INFO64, ctypes.byref(stats),
                                        ctypes.byref(count))
    if rc != libsys.KERN_SUCCESS or count.value < HOST_VM_INFO64_COUNT:
        return None
    return stats


def total_memory() -> int | None:
    """``hw.memsize_usable`` (bytes), else ``hw.memsize``; ``None`` when neither reads."""
    for name in ("hw.memsize_usable", "hw.memsize"):
        value = libsys.sysctl_int(name)
        if value and value > 0:
            return value
    return None


def swap_usage() -> tuple[int | None, int | None]:
    """``(used, total)`` swap in bytes from ``vm.swapusage``; ``(None, None)`` if unreadable."""
    try:
        raw = libsys.sysctl_bytes("vm.swapusage", ctypes.sizeof(XswUsage))
    except OSError:
        return None, None
    if len(raw) != ctypes.sizeof(XswUsage):
        return None, None
    xsw = XswUsage.from_buffer_copy(raw)
    return int(xsw.xsu_used), int(xsw.xsu_total)


def pressure() -> int | None:
    """``kern.memorystatus_vm_pressure_level``: 1, 2 or 4; ``None`` when unreadable or another
    value."""
    level = libsys.sysctl_int("kern.memorystatus_vm_pressure_level")
    return level if level in PRESSURE_LEVELS else None
