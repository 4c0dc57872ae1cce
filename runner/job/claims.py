"""Claims: a runner holds each file it will write (the GLB, the trace) for the whole job, so
two runners given the same path never interleave — the second is refused with
``output_exists`` at once, before it touches anything.

A claim is an exclusive ``fcntl.flock`` on a hidden file next to the claimed one
(``.<name>.claim``, holding the claimer's pid). The kernel drops the lock when its process
ends, even by SIGKILL, so a claim never outlives its runner.

A claim file becomes visible only already locked and holding its owner's pid: it is made
under a temporary name (``.claim-<pid>-<hex>.tmp``), locked, written, and then hard-linked to
``.<name>.claim`` (``link`` fails if that name exists, so of two claimers one wins). So a
visible claim file that can be locked has no live owner (killed, or releasing it), and is
taken over or removed by :func:`sweep_stale_claims`; one that cannot be locked is held by its
owner — or, for an instant, by another runner removing a stale one, which its recorded pid
(dead) tells apart. (Why in that order: a file created empty and locked a moment later could
be locked in between by a sweep in another thread, and the claimer would report "another
runner".) On a file system without hard links (FAT, some network shares) the
claim file is created with ``O_EXCL`` and locked just after; the sweep then also needs the
recorded owner dead or the file older than ``STALE_AGE``.

On release the file is removed while still locked; a runner that opened the old file meanwhile
notices (the path no longer names the file it locked) and starts over. POSIX only (Linux,
macOS), like the rest of the runner.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import time
from pathlib import Path

from meshfacts.errors import RunnerError
from runner.job.outputs import unwritable

RETRY_FOR = 2.0
"""Seconds a claimer retries a claim file locked by someone who is not its (dead) owner —
another runner removing it — before calling it held."""
STALE_AGE = 60.0
"""Seconds after which a lockable claim file whose owner cannot be told (empty, or a pid that
is alive again) is stale for the sweep."""
_TEMP = re.compile(r"\.claim-(\d+)-[0-9a-f]{8}\.tmp\Z")
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


def claim_path(path: Path) -> Path:
    """The claim file of ``path``: ``.<name>.claim`` in the same folder."""
    return path.with_name(f".{path.name}.claim")


def _owner(claim: Path) -> int | None:
    """The pid recorded in a claim file, or None (empty, unreadable)."""
    try:
        text = claim.read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's live process
        return True
    return True


def _held(path: Path, owner: int | None) -> RunnerError:
    who = f" (pid {owner})" if owner is not None else ""
    return RunnerError("output_exists", f"{path} is being written by another runner{who}; it "
                       "was left untouched.", "Wait for that job to finish, or choose another "
                       "output name.")


def _same(path: Path, fd: int) -> bool:
    try:
        here, ours = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_pid(fd: int) -> None:
    try:  # a full disk may refuse it; the claim holds without (the message names no pid)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode("ascii"))
    except OSError:
        pass


class Claim:
    """An exclusive claim on ``path`` (absolute). :meth:`take` raises ``RunnerError``
    (``output_exists`` when another runner holds it, ``output_unwritable``/``disk_full`` when
    the claim file cannot be made); :meth:`release` is idempotent."""

    def __init__(self, path: Path):
        self.path = path
        self.file = claim_path(path)
        self._fd: int | None = None

    def take(self) -> "Claim":
        """Make the claim file, locked and holding our pid, or take over a stale one (without
        waiting for a live holder); returns self."""
        deadline = time.monotonic() + RETRY_FOR
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            while self._fd is None and not self._place():
                self._clear(deadline)
        except OSError as exc:
            raise unwritable(exc, self.path.parent, "output") from None
        return self

    def _place(self) -> bool:
        """Publish a claim file already locked and written (a temporary file, hard-linked to
        the claim's name); False when that name exists. Raises ``OSError``."""
        temp = self.file.with_name(f".claim-{os.getpid()}-{secrets.token_hex(4)}.tmp")
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        placed = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else opens our temp file
            _write_pid(fd)
            try:
                os.link(temp, self.file)
                placed = True
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_LINKS:
                    raise
                return self._place_excl()
        finally:
            _unlink(temp)
            if placed:
                self._fd = fd
            else:
                os.close(fd)
        return True

    def _place_excl(self) -> bool:
        """:meth:`_place` where hard links are not supported: create with ``O_EXCL``, then
        lock. False when the name exists or someone locked it first. Raises ``OSError``."""
        try:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        if not _same(self.file, fd):
            os.close(fd)
            return False
        _write_pid(fd)
        self._fd = fd
        return True

    def _clear(self, deadline: float) -> None:
        """The claim file exists: remove it when nobody holds it (its owner is gone). Raises
        ``output_exists`` when it is locked and its recorded owner lives — or, past
        ``deadline`` (``time.monotonic``), whoever holds it."""
        try:
            fd = os.open(self.file, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return  # released meanwhile: place it again
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _owner(self.file)
                if (owner is not None and _alive(owner)) or time.monotonic() >= deadline:
                    raise _held(self.path, owner) from None
                time.sleep(0.002)  # another runner is removing it (its owner is dead)
                return
            if _same(self.file, fd):
                os.unlink(self.file)
        finally:
            os.close(fd)

    def release(self) -> None:
        """Remove the claim file and drop the lock."""
        if self._fd is None:
            return
        _unlink(self.file)
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
    """Remove what killed runners left in ``folder``: each ``.*.claim`` file nobody holds (it
    can be locked at once; unlinked while locked and still named, so a runner that opened it
    meanwhile starts over) whose recorded owner is dead (or, owner unknown, older than
    ``STALE_AGE``), and each temporary claim file of a dead pid. A held claim (another
    runner's, or one of ours) is left alone. Returns the removed paths; never raises."""
    removed = []
    try:
        names = [n for n in os.listdir(folder) if n.startswith(".claim-") or
                 (n.startswith(".") and n.endswith(".claim"))]
    except OSError:
        return removed
    for name in names:
        path = folder / name
        temp = _TEMP.match(name)
        if temp is not None:
            if not _alive(int(temp.group(1))):
                _unlink(path)
                removed.append(path)
        elif name.endswith(".claim") and _remove_if_stale(path):
            removed.append(path)
    return removed


def _remove_if_stale(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _same(path, fd):
            return False
        owner = _owner(path)
        old = time.time() - os.fstat(fd).st_mtime >= STALE_AGE
        if not old and (owner is None or _alive(owner)):
            return False  # being made without hard links, a moment before its pid is written
        os.unlink(path)
        return True
    except OSError:  # BlockingIOError: held by a live runner
        return False
    finally:
        os.close(fd)


def release_all(claims: list[Claim]) -> None:
    """Release ``claims`` (newest first)."""
    for claim in reversed(claims):
        claim.release()
