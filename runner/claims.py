"""Claims: a runner holds each file it will write (the GLB, the trace) for the whole job, so
two runners given the same path never interleave — the second is refused with
``output_exists`` at once, before it touches anything.

A claim is an exclusive ``fcntl.flock`` on a hidden file next to the claimed one
(``.<name>.claim``, holding the claimer's pid for the message). The kernel drops the lock when
its process ends, even by SIGKILL, so a claim never outlives its runner; a claim file left by a
killed runner is taken over by the next one, and removed by any job that claims in that
folder (:func:`sweep_stale_claims`). On release the file is removed while still
locked; a runner that opened the old file meanwhile notices (the path no longer names the file
it locked) and starts over. POSIX only (Linux, macOS), like the rest of the runner.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import RunnerError


def claim_path(path: Path) -> Path:
    """The claim file of ``path``: ``.<name>.claim`` in the same folder."""
    return path.with_name(f".{path.name}.claim")


def _holder(claim: Path) -> str:
    try:
        pid = claim.read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


class Claim:
    """An exclusive claim on ``path`` (absolute). :meth:`take` raises ``RunnerError``
    (``output_exists`` when another runner holds it, ``output_unwritable``/``disk_full`` when
    the claim file cannot be made); :meth:`release` is idempotent."""

    def __init__(self, path: Path):
        self.path = path
        self.file = claim_path(path)
        self._fd: int | None = None

    def take(self) -> "Claim":
        """Lock the claim file (without waiting); returns self."""
        from .outputs import unwritable

        while self._fd is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise unwritable(exc, self.path.parent, "output") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunnerError("output_exists", f"{self.path} is being written by another "
                                  f"runner{_holder(self.file)}; it was left untouched.",
                                  "Wait for that job to finish, or choose another output "
                                  "name.") from None
            if self._still_named(fd):
                self._fd = fd
            else:  # released (and removed) by its holder between our open and lock: again
                os.close(fd)
        try:  # the pid is only for the other runner's message; a full disk may refuse it
            os.ftruncate(self._fd, 0)
            os.write(self._fd, str(os.getpid()).encode("ascii"))
        except OSError:
            pass
        return self

    def _still_named(self, fd: int) -> bool:
        try:
            here, ours = os.stat(self.file), os.fstat(fd)
        except OSError:
            return False
        return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)

    def release(self) -> None:
        """Remove the claim file and drop the lock."""
        if self._fd is None:
            return
        try:
            os.unlink(self.file)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None


def claim_all(paths: list[Path]) -> list[Claim]:
    """Claim every distinct path in a fixed order (sorted), releasing those already taken
    when one fails; then sweep the stale claims of their folders (:func:`sweep_stale_claims`).
    Raises ``RunnerError`` like :meth:`Claim.take`."""
    taken: list[Claim] = []
    try:
        for path in sorted(set(paths)):
            taken.append(Claim(path).take())
    except BaseException:
        release_all(taken)
        raise
    for folder in sorted({claim.path.parent for claim in taken}):
        sweep_stale_claims(folder)
    return taken


def sweep_stale_claims(folder: Path) -> list[Path]:
    """Remove the claim files in ``folder`` whose runner is gone (a SIGKILL leaves the file,
    the kernel drops its lock): each ``.*.claim`` that can be locked at once is unlinked while
    locked — by the protocol of :meth:`Claim.take`, a runner that opened it meanwhile sees it
    is no longer named and starts over; a held claim (another runner's, or ours: a second
    open file description conflicts) is left alone. Returns the removed paths; never raises."""
    removed = []
    try:
        names = [n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".claim")]
    except OSError:
        return removed
    for name in names:
        path = folder / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            here, ours = os.stat(path), os.fstat(fd)
            if (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino):
                os.unlink(path)
                removed.append(path)
        except OSError:  # BlockingIOError: held by a live runner
            pass
        finally:
            os.close(fd)
    return removed


def release_all(claims: list[Claim]) -> None:
    """Release ``claims`` (newest first)."""
    for claim in reversed(claims):
        claim.release()
