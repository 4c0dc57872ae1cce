"""Make a real swapping child possible on Linux: a temporary swap file (when the machine has too
little swap) and a memory-limited cgroup (v1 ``memory`` controller or v2 ``memory.max``).

Needs root. :func:`swap_environment` is a context manager yielding ``(cgroup_procs_file,
notes)``; it raises :class:`Unavailable` with the reason when this machine cannot do it, and
always removes what it added (cgroup, swap file) on exit.
"""
import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

MIN_SWAP = 1536 * 1024**2
SWAP_FILE_SIZE = 2 * 1024**3
LIMIT = 256 * 1024**2


class Unavailable(Exception):
    """This machine cannot make a child swap; the message says why."""


def _swap_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")


@contextlib.contextmanager
def _swap_file(directory: str):
    if _swap_total() >= MIN_SWAP:
        yield "existing swap"
        return
    path = Path(directory) / f"stageload-guard-test-{uuid.uuid4().hex[:8]}.swap"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, SWAP_FILE_SIZE)
        finally:
            os.close(fd)
        _run(["mkswap", "-q", str(path)])
        _run(["swapon", str(path)])
        try:
            yield f"swap file {path} ({SWAP_FILE_SIZE // 1024**2} MB)"
        finally:
            subprocess.run(["swapoff", str(path)], capture_output=True)
    except OSError as exc:
        raise Unavailable(f"cannot create a swap file in {directory}: {exc}") from None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _memory_cgroup():
    name = f"stageload-guard-test-{uuid.uuid4().hex[:8]}"
    v1 = Path("/sys/fs/cgroup/memory")
    v2 = Path("/sys/fs/cgroup")
    v2_controllers = v2 / "cgroup.controllers"
    if (v1 / "memory.limit_in_bytes").exists():
        group = v1 / name
        limit_file, limit = "memory.limit_in_bytes", str(LIMIT)
    elif v2_controllers.exists() and "memory" in v2_controllers.read_text().split():
        group = v2 / name
        limit_file, limit = "memory.max", str(LIMIT)
    else:
        raise Unavailable("no memory cgroup controller (neither v1 /sys/fs/cgroup/memory nor "
                          "v2 'memory' in cgroup.controllers)")
    try:
        group.mkdir()
    except OSError as exc:
        raise Unavailable(f"cannot create cgroup {group}: {exc.strerror}") from None
    try:
        try:
            (group / limit_file).write_text(limit)
        except OSError as exc:
            raise Unavailable(f"cannot limit cgroup memory ({group / limit_file}): "
                              f"{exc.strerror}") from None
        yield group / "cgroup.procs"
    finally:
        # Anything still inside must be gone before rmdir; the caller's fixture kills its
        # processes, so retry briefly.
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@contextlib.contextmanager
def swap_environment(directory: str = "/tmp"):
    """Yield ``(procs_file, notes)``: write a pid into ``procs_file`` to limit it to 256 MB of
    RAM so that its further memory goes to swap. Raises :class:`Unavailable` with the reason."""
    if not sys.platform.startswith("linux"):
        raise Unavailable("swap files and memory cgroups are a Linux test; this is " + sys.platform)
    if os.geteuid() != 0:
        raise Unavailable("needs root to add a swap file and a memory cgroup")
    with _swap_file(directory) as swap_note, _memory_cgroup() as procs_file:
        yield procs_file, f"{swap_note}; cgroup limit {LIMIT // 1024**2} MB at {procs_file.parent}"
