"""The macOS reader, executed on Linux against the libSystem stand-in built from C
(tests/macos_standin/): available memory as Activity Monitor counts it, to the byte; exited
processes; a v2-only kernel; interval peaks and their fallback; the Sampler end to end.

The stand-in answers as XNU does (as read from its source); the real libSystem is not called
here (no Mac). Real processes are Linux's: zombies are real zombies."""
import ctypes
import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from libsystem_standin import GIB, ISSUE_MAC, PAGE  # tests/macos_standin (pyproject pythonpath)

from stageload.meter import Sampler, _macos, _macos_lib, _macos_vm, _platform

HOLD = ("import sys\nb = bytearray(40_000_000)\n"
        "b[::4096] = b'\\1' * len(range(0, 40_000_000, 4096))"
        "\nprint('ready', flush=True)\nsys.stdin.read()\n")


def _zombie():
    """A real child that has exited and is not reaped yet (waitid with WNOWAIT blocks until it
    exits and leaves it a zombie). Returns its Popen; the caller reaps it with ``wait()``."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    return child


# -- the stand-in's own XNU semantics (what the reader's correctness rests on) --------------------
def test_standin_copies_out_exactly_the_flavors_size_and_sets_errno(mac):
    lib = _macos_lib.lib()
    for flavor, size in ((2, 160), (4, 296)):
        buf = (ctypes.c_uint8 * 400)(*([0xAA] * 400))
        assert lib.proc_pid_rusage(os.getpid(), flavor, buf) == 0
        assert bytes(buf)[size:] == b"\xAA" * (400 - size)      # nothing past sizeof(struct)
        assert bytes(buf)[72:80] != b"\xAA" * 8                 # ri_phys_footprint written
    buf = (ctypes.c_uint8 * 400)()
    assert lib.proc_pid_rusage(os.getpid(), 5, buf) == -1 and ctypes.get_errno() == errno.EINVAL
    child = _zombie()
    child.wait()  # reaped: gone
    assert lib.proc_pid_rusage(child.pid, 4, buf) == -1 and ctypes.get_errno() == errno.ESRCH
    mac.set_pid(os.getpid(), eperm=1)
    assert lib.proc_pid_rusage(os.getpid(), 4, buf) == -1 and ctypes.get_errno() == errno.EPERM
    count = ctypes.c_uint(10)  # below HOST_VM_INFO64_REV0_COUNT (24): KERN_FAILURE
    assert lib.host_statistics64(_macos_lib.host_port(), 4, buf, ctypes.byref(count)) == 5


# -- available memory ---------------------------------------------------------------------------
def test_available_is_total_less_activity_monitors_memory_used_to_the_byte(mac):
    m = _macos.system_memory()
    used = ((27 - 1) + 4 + 2) * GIB            # (internal - purgeable) + wired + compressor
    assert m.total == 48 * GIB
    assert m.available == 48 * GIB - used == 16 * GIB
    assert (m.swap_used, m.swap_total, m.pressure) == (0, 2 * GIB, 1)
    old_level_reading = m.total * ISSUE_MAC["level"] // 100   # what the old reader reported
    assert old_level_reading > 43 * GIB > m.available


def test_page_size_is_the_kernels_not_assumed(mac):
    pages = {k: ISSUE_MAC[k] * 4 for k in ("wire", "internal", "purgeable", "compressor")}
    mac.set(page_size=4096, **pages)           # an Intel Mac: same bytes in 4 KiB pages
    assert _macos.system_memory().available == 16 * GIB
    mac.set(page_size=PAGE)                    # 16 KiB pages read as 16 KiB: 4x the use
    assert _macos.system_memory().available == 0


def test_total_is_memsize_usable_and_memsize_only_without_it(mac):
    mac.set(memsize_usable=48 * GIB - 512 * 2**20)   # carve-outs the VM never manages
    m = _macos.system_memory()
    assert m.total == 48 * GIB - 512 * 2**20 and m.available == 16 * GIB - 512 * 2**20
    mac.set(memsize_usable=None)
    assert _macos.system_memory().total == 48 * GIB


def test_what_cannot_be_read_is_none_never_fine(mac, monkeypatch):
    mac.set(pressure=None, swap_total=None)
    m = _macos.system_memory()
    assert m.pressure is None and m.swap_used is None and m.swap_total is None
    assert m.available == 16 * GIB
    mac.set(pressure=3)                        # not a dispatch level
    assert _macos.system_memory().pressure is None
    mac.set(host_fail=1)
    m = _macos.system_memory()
    assert m.available is None and m.total == 48 * GIB
    mac.set(host_fail=0, memsize=None, memsize_usable=None)
    assert _macos.system_memory().total is None and _macos.system_memory().available is None
    monkeypatch.setenv("STAGELOAD_MACOS_LIBSYSTEM", str(Path(mac.library).parent / "missing.so"))
    m = _macos.system_memory()
    assert (m.total, m.available, m.swap_used, m.pressure) == (None, None, None, None)
    assert _macos.reset_high_water_mark(os.getpid()) is False


def test_structure_sizes_follow_the_xnu_headers():
    assert ctypes.sizeof(_macos_vm.VmStatistics64) == 152 and _macos_vm.HOST_VM_INFO64_COUNT == 38
    assert _macos_vm.VmStatistics64.purgeable_count.offset == 88
    assert _macos_vm.VmStatistics64.compressor_page_count.offset == 128
    assert _macos_vm.VmStatistics64.internal_page_count.offset == 140
    assert ctypes.sizeof(_macos_vm.XswUsage) == 32
    assert _macos.RusageInfoV4.ri_proc_exit_abstime.offset == 88
    assert _macos.RusageInfoV4.ri_interval_max_phys_footprint.offset == 280


# -- processes ----------------------------------------------------------------------------------
def test_a_zombie_raises_process_lookup_error_not_footprint_zero(mac):
    child = _zombie()
    try:
        raw = (ctypes.c_uint8 * 296)()
        assert _macos_lib.lib().proc_pid_rusage(child.pid, 4, raw) == 0   # the kernel answers…
        info = _macos.parse_rusage(bytes(raw))
        assert info["footprint"] == 0 and info["exit_abstime"] != 0          # …with 0, exited
        with pytest.raises(ProcessLookupError):
            _macos.process_footprint(child.pid)
        with pytest.raises(ProcessLookupError):
            _macos.footprint(child.pid)
        assert _macos.high_water_mark(child.pid) is None
        mac.set_pid(os.getpid(), footprint=123_456_789)
        assert _macos.footprint(os.getpid(), tree=True) == 123_456_789      # zombie child skipped
        samples = []
        sampler = Sampler(child.pid, samples.append, interval=0.05)
        assert sampler.sample_now() is None and sampler.exited and samples == []
    finally:
        child.wait()


def test_a_v2_only_kernel_still_yields_footprints(mac):
    mac.set(max_flavor=2)
    mac.set_pid(os.getpid(), footprint=5 * GIB, lifetime_max=7 * GIB)
    assert _macos.process_footprint(os.getpid()) == 5 * GIB
    assert _macos.footprint(os.getpid(), tree=False) == 5 * GIB
    assert _macos.high_water_mark(os.getpid()) is None      # v2 has no peak fields
    mac.set(max_flavor=1)                                    # older than v2: nothing to read
    with pytest.raises(OSError, match="neither"):
        _macos.process_footprint(os.getpid())


def test_another_users_process_is_a_permission_error(mac):
    mac.set_pid(os.getpid(), eperm=1)
    with pytest.raises(PermissionError):
        _macos.footprint(os.getpid())
    assert _macos.high_water_mark(os.getpid()) is None
    assert _macos.reset_high_water_mark(os.getpid()) is False   # EACCES
    assert _macos.hwm_note() is None                             # not a missing feature


# -- peaks --------------------------------------------------------------------------------------
def test_interval_peak_after_a_reset(mac):
    pid = os.getpid()
    mac.set_pid(pid, footprint=2 * GIB, lifetime_max=9 * GIB, interval_max=3 * GIB)
    assert _macos.high_water_mark(pid) == 9 * GIB       # not reset yet: lifetime
    assert _macos.reset_high_water_mark(pid) is True
    assert _macos.high_water_mark(pid) == 3 * GIB       # the interval peak from now on
    assert _macos.hwm_note() is None


def test_lifetime_peak_with_a_note_where_the_interval_call_is_missing(old_mac):
    pid = os.getpid()
    old_mac.set_pid(pid, lifetime_max=9 * GIB, interval_max=3 * GIB)
    assert not _macos_lib.has_symbol("proc_reset_footprint_interval")
    assert _macos.reset_high_water_mark(pid) is False
    assert _macos.high_water_mark(pid) == 9 * GIB
    assert "lifetime" in _macos.hwm_note()


def test_lifetime_peak_where_the_kernel_refuses_the_reset(mac):
    mac.set(interval=0)                                  # no interval ledger: EINVAL
    mac.set_pid(os.getpid(), lifetime_max=9 * GIB, interval_max=0)
    assert _macos.reset_high_water_mark(os.getpid()) is False
    assert _macos.high_water_mark(os.getpid()) == 9 * GIB
    assert "not available" in _macos.hwm_note()


# -- the Sampler, end to end ----------------------------------------------------------------------
def _sample_until_exit(child, **kwargs):
    samples, three = [], threading.Event()

    def sink(sample):
        samples.append(sample)
        if len(samples) >= 3:
            three.set()

    sampler = Sampler(child.pid, sink, interval=0.05, tree=False, **kwargs).start()
    assert three.wait(20), "the sampler took no three samples"
    child.stdin.close()                     # the child exits; it stays a zombie (not reaped)
    sampler._thread.join(20)
    assert not sampler.running and sampler.exited
    sampler.stop()
    return sampler, samples


def _sample_a_holder(standin):
    """Sample a real child holding 40 MB until it exits; reaped only afterwards."""
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=standin.environ())
    try:
        assert child.stdout.readline() == b"ready\n"
        return _sample_until_exit(child)
    finally:
        child.stdin.close()
        child.wait()


def test_sampler_against_the_standin_never_writes_a_zero_for_the_exited(mac):
    sampler, samples = _sample_a_holder(mac)
    assert all(s["footprint"] > 30_000_000 for s in samples)   # no 0 for the exited child
    assert all(s["available"] == 16 * GIB and s["pressure"] == 1 for s in samples)
    # interval peaks, reset each time
    assert all(isinstance(s["hwm_since"], float) for s in samples)
    assert all(s["hwm"] >= 30_000_000 for s in samples)
    assert sampler.note is None


def test_sampler_notes_the_lifetime_fallback(old_mac):
    sampler, samples = _sample_a_holder(old_mac)
    assert all(s["hwm_since"] is None and s["hwm"] >= 30_000_000 for s in samples)
    assert "lifetime" in sampler.note


# -- choosing the reader -----------------------------------------------------------------------
def test_the_macos_reader_is_chosen_on_linux_only_with_the_test_variable(mac, monkeypatch):
    assert _platform.reader_name() == "_macos"
    code = "import stageload.meter as m; print(m.PLATFORM_READER, m.system_memory().available)"
    out = subprocess.run([sys.executable, "-c", code], env=mac.environ(), capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["_macos", str(16 * GIB)]
    monkeypatch.delenv("STAGELOAD_MACOS_LIBSYSTEM")
    if sys.platform.startswith("linux"):
        assert _platform.reader_name() == "_linux"
        env = {k: v for k, v in os.environ.items() if k != "STAGELOAD_MACOS_LIBSYSTEM"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        assert out[0] == "_linux"
