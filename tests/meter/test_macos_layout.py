"""macOS readers without a Mac: struct sizes and offsets against Apple's <sys/resource.h>, the
byte parsers, the dispatcher. The libSystem calls run against a stand-in in
test_macos_standin.py; the real libSystem cannot run here (no macOS)."""
import ctypes
import struct
import sys

import pytest

from stageload.meter import _generic, _macos, _macos_lib, _platform

# From XNU bsd/sys/resource.h: uint8_t ri_uuid[16], then uint64_t fields —
# rusage_info_v2: 18 of them, rusage_info_v4: 35 of them.
V2_SIZE = 16 + 18 * 8   # 160
V4_SIZE = 16 + 35 * 8   # 296
PHYS_FOOTPRINT_OFFSET = 16 + 7 * 8            # 8th uint64: ri_phys_footprint
LIFETIME_MAX_OFFSET = 16 + 28 * 8             # 29th uint64: ri_lifetime_max_phys_footprint
INTERVAL_MAX_OFFSET = 16 + 33 * 8             # 34th uint64: ri_interval_max_phys_footprint
EXIT_ABSTIME_OFFSET = 16 + 9 * 8              # 10th uint64: ri_proc_exit_abstime


def test_struct_sizes_and_offsets_match_apples_header():
    assert ctypes.sizeof(_macos.RusageInfoV2) == V2_SIZE == 160
    assert ctypes.sizeof(_macos.RusageInfoV4) == V4_SIZE == 296
    assert _macos.RusageInfoV2.ri_phys_footprint.offset == PHYS_FOOTPRINT_OFFSET == 72
    assert _macos.RusageInfoV4.ri_phys_footprint.offset == 72
    assert _macos.RusageInfoV4.ri_lifetime_max_phys_footprint.offset == LIFETIME_MAX_OFFSET == 240
    assert _macos.RusageInfoV4.ri_diskio_bytesread.offset == 16 + 16 * 8
    assert _macos.RusageInfoV4.ri_runnable_time.offset == V4_SIZE - 8


def test_parse_rusage_from_bytes():
    buf = bytearray(V4_SIZE)
    struct.pack_into("<Q", buf, PHYS_FOOTPRINT_OFFSET, 27_000_000_000)
    struct.pack_into("<Q", buf, LIFETIME_MAX_OFFSET, 44_200_000_000)
    struct.pack_into("<Q", buf, INTERVAL_MAX_OFFSET, 30_000_000_000)
    struct.pack_into("<Q", buf, 16 + 6 * 8, 1)  # ri_resident_size: must not be read as footprint
    assert _macos.parse_rusage(bytes(buf)) == {"footprint": 27_000_000_000,
                                               "lifetime_max": 44_200_000_000,
                                               "interval_max": 30_000_000_000, "exit_abstime": 0}
    struct.pack_into("<Q", buf, EXIT_ABSTIME_OFFSET, 99)
    assert _macos.parse_rusage(bytes(buf[:V2_SIZE])) == {"footprint": 27_000_000_000,
                                                         "lifetime_max": None,
                                                         "interval_max": None, "exit_abstime": 99}
    with pytest.raises(ValueError, match="at least 160"):
        _macos.parse_rusage(b"\0" * 100)


def test_sysctl_values_from_bytes():
    assert _macos_lib.parse_sysctl_int((42).to_bytes(4, "little")) == 42
    assert _macos_lib.parse_sysctl_int((4).to_bytes(8, "little")) == 4     # pressure: critical
    with pytest.raises(ValueError):
        _macos_lib.parse_sysctl_int(b"\1\2\3")


def test_libsystem_missing_here_reads_as_unknown(monkeypatch):
    monkeypatch.delenv("STAGELOAD_MACOS_LIBSYSTEM", raising=False)
    if sys.platform != "darwin":
        with pytest.raises(OSError):
            _macos.process_footprint(1)
        assert _macos.high_water_mark(1) is None
        assert _macos.reset_high_water_mark(1) is False
        m = _macos.system_memory()  # nothing can be read here: unknown, never "fine"
        assert (m.total, m.available, m.swap_used, m.pressure) == (None, None, None, None)


def test_dispatcher_choice(monkeypatch):
    monkeypatch.delenv("STAGELOAD_MACOS_LIBSYSTEM", raising=False)
    assert _platform.reader_name("darwin") == "_macos"
    assert _platform.reader_name("linux") == "_linux"
    assert _platform.reader_name("win32") == "_generic"
    assert _platform.load_reader("darwin") is _macos
    if sys.platform.startswith("linux"):
        import stageload.meter as meter
        assert meter.PLATFORM_READER == "_linux"


def test_generic_reader_on_this_machine():
    import os
    assert _generic.footprint(os.getpid()) > 10_000_000
    assert _generic.high_water_mark(os.getpid()) is None
    assert _generic.system_memory().total > 0
