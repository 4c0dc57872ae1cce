"""Page-cache eviction and cold sequential read throughput of the weight files.

The benchmark compares the loader's throughput with the disk's own cold read throughput of the
same files, so both must start with the files out of the page cache.

Eviction (Linux): ``fsync`` the file, then ``os.posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)``.
This drops only that file's clean pages and leaves every other process's cache alone, which
matters on a machine shared with other test runs. ``/proc/sys/vm/drop_caches`` would also work
for root but empties the whole machine's cache, so it is not used.

Whether eviction worked is checked, not assumed: ``resident_bytes`` asks the kernel which pages
are in the page cache with ``fincore`` (util-linux, which wraps ``mincore(2)``). Written by hand
only as a thin wrapper because no package in the dependency set exposes ``mincore``.

On a virtual machine the host may still cache the disk image, so "cold" here means cold for
this kernel; the measured throughput is what a process on this machine actually gets.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

READ_CHUNK = 16 * 1024 * 1024  # bytes per read() call: large enough for sequential throughput


@dataclass
class EvictionResult:
    """Outcome of evicting files from the page cache.

    ``method`` names what was done; ``resident_before`` / ``resident_after`` are page-cache
    bytes summed over the files (None when residency cannot be read, e.g. no ``fincore``);
    ``verified`` is True only when ``resident_after`` was read and is at most 1 % of the bytes.
    """

    method: str
    files: int
    bytes: int
    resident_before: int | None
    resident_after: int | None
    verified: bool

    def as_dict(self) -> dict:
        return asdict(self)


def resident_bytes(paths: Iterable[Path]) -> int | None:
    """Bytes of ``paths`` now in the page cache (int), or None when it cannot be read.

    Uses ``fincore --bytes --noheadings --raw --output RES`` (util-linux). Returns None when the
    tool is missing (macOS) or fails, so a caller never mistakes "unknown" for "evicted".
    """
    paths = [str(p) for p in paths]
    if not paths:
        return 0
    tool = shutil.which("fincore")
    if tool is None:
        return None
    try:
        out = subprocess.run(
            [tool, "--bytes", "--noheadings", "--raw", "--output", "RES", *paths],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    values = [line.strip() for line in out.splitlines() if line.strip()]
    if len(values) != len(paths):
        return None
    return sum(int(v) for v in values)


def evict(paths: Iterable[Path]) -> EvictionResult:
    """Drop ``paths`` from the page cache (fsync, then POSIX_FADV_DONTNEED) and verify it.

    Raises ``FileNotFoundError`` for a missing file. On a platform without ``posix_fadvise``
    (macOS) nothing is evicted and the result says ``method="unavailable"``, ``verified=False``.
    """
    paths = [Path(p) for p in paths]
    total = sum(p.stat().st_size for p in paths)
    before = resident_bytes(paths)
    if not hasattr(os, "posix_fadvise"):
        return EvictionResult("unavailable", len(paths), total, before, before, False)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    after = resident_bytes(paths)
    verified = after is not None and after <= 0.01 * max(total, 1)
    return EvictionResult("fsync + posix_fadvise(POSIX_FADV_DONTNEED)", len(paths), total,
                          before, after, verified)


def cold_read(paths: Iterable[Path]) -> dict:
    """Evict ``paths``, then read each once sequentially; return the timing.

    Returns ``{"bytes": int, "seconds": float, "throughput": bytes/s, "eviction": {...},
    "method": str}``. ``seconds`` is wall time of the reads alone (open, read in
    ``READ_CHUNK`` pieces into one reused buffer, close), summed over the files.
    """
    paths = [Path(p) for p in paths]
    eviction = evict(paths)
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    total = 0
    seconds = 0.0
    for p in paths:
        t0 = time.perf_counter()
        with open(p, "rb", buffering=0) as fh:
            while True:
                n = fh.readinto(view)
                if not n:
                    break
                total += n
        seconds += time.perf_counter() - t0
    return {
        "bytes": total,
        "seconds": seconds,
        "throughput": total / seconds if seconds > 0 else None,
        "method": f"sequential read(), {READ_CHUNK // (1024 * 1024)} MiB chunks, after eviction",
        "eviction": eviction.as_dict(),
    }


def drop_caches_allowed() -> bool:
    """True when this process may write ``/proc/sys/vm/drop_caches`` (checked, not written)."""
    return os.access("/proc/sys/vm/drop_caches", os.W_OK)
