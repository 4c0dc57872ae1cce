"""libSystem for the macOS reader: where it is loaded from, the C prototypes of the calls used,
the host port, and integer sysctls.

Calls (prototypes from Apple's headers; XNU source in apple-oss-distributions/xnu):

- ``int proc_pid_rusage(int pid, int flavor, rusage_info_t *buffer)`` (``<libproc.h>``)
- ``int proc_reset_footprint_interval(pid_t pid)`` (``<libproc.h>``, macOS 10.14+; may be
  absent from an older libSystem)
- ``int sysctlbyname(const char *, void *, size_t *, void *, size_t)`` (``<sys/sysctl.h>``)
- ``mach_port_t mach_host_self(void)`` (``<mach/mach_init.h>``)
- ``kern_return_t host_page_size(host_t, vm_size_t *)`` and
  ``kern_return_t host_statistics64(host_t, host_flavor_t, host_info64_t,
  mach_msg_type_number_t *)`` (``<mach/mach_host.h>``); ``vm_size_t`` is pointer-sized.

The library is ``/usr/lib/libSystem.B.dylib``. On macOS 11 and later that file is not on disk:
``dlopen`` finds it in the dyld shared cache (not verified here: no Mac was available).

TEST-ONLY override: ``STAGELOAD_MACOS_LIBSYSTEM=/path/lib.so`` loads another library with the
same exports instead. The tests build such a stand-in from C (tests/macos_standin/) to run the
macOS reader on Linux; it is never meant for real use.
"""
from __future__ import annotations

import ctypes
import os

LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
#: Environment variable naming a stand-in library (tests only; see the module docstring).
LIBSYSTEM_ENV = "STAGELOAD_MACOS_LIBSYSTEM"
KERN_SUCCESS = 0

_loaded: dict[str, ctypes.CDLL] = {}
_host: dict[str, int] = {}


def library_path() -> str:
    """The library in use: ``$STAGELOAD_MACOS_LIBSYSTEM`` when set (tests), else libSystem."""
    return os.environ.get(LIBSYSTEM_ENV) or LIBSYSTEM


def lib() -> ctypes.CDLL:
    """The library (loaded once per path) with the prototypes above declared. Raises
    ``OSError`` when it cannot be loaded (not on macOS, or a wrong override path)."""
    path = library_path()
    handle = _loaded.get(path)
    if handle is None:
        handle = ctypes.CDLL(path, use_errno=True)
        _declare(handle)
        _loaded[path] = handle
    return handle


def _declare(h: ctypes.CDLL) -> None:
    c_int, c_uint, c_void_p = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p
    h.proc_pid_rusage.argtypes = [c_int, c_int, c_void_p]
    h.proc_pid_rusage.restype = c_int
    h.sysctlbyname.argtypes = [ctypes.c_char_p, c_void_p, ctypes.POINTER(ctypes.c_size_t),
                               c_void_p, ctypes.c_size_t]
    h.sysctlbyname.restype = c_int
    h.mach_host_self.argtypes = []
    h.mach_host_self.restype = c_uint
    h.host_page_size.argtypes = [c_uint, ctypes.POINTER(ctypes.c_size_t)]
    h.host_page_size.restype = c_int
    h.host_statistics64.argtypes = [c_uint, c_int, c_void_p, ctypes.POINTER(c_uint)]
    h.host_statistics64.restype = c_int
    if has_symbol("proc_reset_footprint_interval", h):
        h.proc_reset_footprint_interval.argtypes = [c_int]
        h.proc_reset_footprint_interval.restype = c_int


def has_symbol(name: str, handle: ctypes.CDLL | None = None) -> bool:
    """Whether the library exports ``name``. Raises ``OSError`` when it cannot be loaded."""
    try:
        getattr(lib() if handle is None else handle, name)
    except AttributeError:
        return False
    return True


def host_port() -> int:
    """``mach_host_self()``, asked once per library: every call adds a user reference to the
    host port's send right, so asking at every sample would leak references."""
    path = library_path()
    if path not in _host:
        _host[path] = int(lib().mach_host_self())
    return _host[path]


def errno_error(call: str) -> OSError:
    """``OSError`` for the errno a failed ``call`` left (the matching subclass, e.g.
    ``ProcessLookupError`` for ESRCH), its message naming the call."""
    err = ctypes.get_errno()
    return OSError(err, f"{call}: {os.strerror(err)}")


def sysctl_bytes(name: str, size: int = 8) -> bytes:
    """Raw value of sysctl ``name`` (at most ``size`` bytes). Raises ``OSError`` (e.g. ENOENT:
    no such sysctl; ENOMEM: the value is larger than ``size``)."""
    buf = ctypes.create_string_buffer(size)
    length = ctypes.c_size_t(size)
    if lib().sysctlbyname(name.encode(), buf, ctypes.byref(length), None, 0) != 0:
        raise errno_error(f"sysctlbyname({name!r})")
    return buf.raw[:length.value]


def parse_sysctl_int(buf: bytes) -> int:
    """Integer value of a sysctl from its raw bytes (little-endian, 4 or 8 bytes, as
    ``sysctlbyname`` returns ``int`` / ``int64`` on Apple Silicon and x86_64). Raises
    ``ValueError`` for another length."""
    if len(buf) not in (4, 8):
        raise ValueError(f"sysctl integer of {len(buf)} bytes; expected 4 or 8")
    return int.from_bytes(buf, "little", signed=True)


def sysctl_int(name: str) -> int | None:
    """Integer sysctl ``name`` (e.g. ``hw.memsize``), ``None`` if it cannot be read."""
    try:
        return parse_sysctl_int(sysctl_bytes(name))
    except (OSError, ValueError):
        return None
