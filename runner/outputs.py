"""Output paths: checked up front, written under a temporary name, committed atomically.

A job never overwrites an existing file unless ``--overwrite`` was given, and never leaves a
half-written GLB behind: the worker writes ``.<stem>.partial-<pid>-<hex>.glb`` in the output's own
folder (same file system, so the final rename is atomic) and the supervisor commits it with
``commit()`` or removes it with ``discard()``.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import tempfile
from pathlib import Path

import psutil

from .errors import RunnerError

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def default_trace_path(output: Path) -> Path:
    """``OUT.glb`` → ``OUT.trace.jsonl`` in the same folder."""
    return output.with_name(output.stem + ".trace.jsonl")


def _probe_folder(folder: Path, what: str) -> None:
    """Create and delete a file in ``folder`` — the only honest writability test (``os.access``
    says yes to root on a read-only mount). Raises ``RunnerError`` (``output_unwritable`` or
    ``disk_full``)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".runner-probe-", dir=folder)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise RunnerError("disk_full", f"No space left in {folder} for the {what}.") from None
        raise RunnerError("output_unwritable", f"Cannot write the {what} into {folder} "
                          f"({exc.strerror or exc}).") from None
    os.close(fd)
    os.unlink(name)


def check_output(output: str | Path, overwrite: bool = False) -> Path:
    """Validate the GLB path before any work; returns it absolute.

    Missing parent folders are created. Raises ``RunnerError``: ``output_invalid`` (not ending
    in ``.glb``, or a folder), ``output_exists`` (exists and not ``overwrite``),
    ``output_unwritable`` (folder cannot be created or written), ``disk_full``.
    """
    path = Path(output).expanduser().absolute()
    if path.suffix.lower() != ".glb":
        raise RunnerError("output_invalid", f"The output {path.name!r} does not end in .glb.")
    if path.is_dir():
        raise RunnerError("output_invalid", f"The output {path} is a folder.")
    if path.exists() and not overwrite:
        raise RunnerError("output_exists", f"{path} already exists; it was left untouched.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError("output_unwritable", f"Cannot create the folder {path.parent} "
                          f"({exc.strerror or exc}).") from None
    _probe_folder(path.parent, "output")
    return path


def check_trace(trace: str | Path) -> Path:
    """Validate the trace path (absolute, parent created, writable); same errors as
    ``check_output`` except that an existing trace file is replaced (it is the runner's own)."""
    path = Path(trace).expanduser().absolute()
    if path.is_dir():
        raise RunnerError("output_invalid", f"The trace path {path} is a folder.",
                          "Give --trace a file path, e.g. run.trace.jsonl.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError("output_unwritable", f"Cannot create the folder {path.parent} for the "
                          f"trace ({exc.strerror or exc}).") from None
    _probe_folder(path.parent, "trace")
    return path


def temp_path(output: Path) -> Path:
    """A fresh hidden name next to ``output`` for the partial GLB (keeps the ``.glb`` suffix, so
    exporters that go by the suffix write glTF binary)."""
    return output.with_name(f".{output.stem}.partial-{os.getpid()}-{secrets.token_hex(4)}.glb")


def sweep_stale_partials(output: Path) -> list[Path]:
    """Remove partial files of ``output`` left by a supervisor that was killed outright
    (SIGKILL leaves no chance to clean up): ``.<stem>.partial-<pid>-<hex>.glb`` whose ``pid``
    is no longer running. A partial of a live runner (same output, another job) is kept.
    Returns the removed paths; never raises."""
    pattern = re.compile(r"^\." + re.escape(output.stem) + r"\.partial-(\d+)-[0-9a-f]+\.glb$")
    removed = []
    try:
        names = os.listdir(output.parent)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match and not psutil.pid_exists(int(match.group(1))):
            if discard(output.parent / name):
                removed.append(output.parent / name)
    return removed


def discard(path: Path | None) -> bool:
    """Remove a partial file if it is there; True if something was removed. Never raises."""
    if path is None:
        return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def commit(partial: Path, output: Path, overwrite: bool = False) -> None:
    """Move the finished ``partial`` file to ``output`` atomically; ``partial`` is gone
    afterwards whatever happens.

    Without ``overwrite`` the move must not replace a file that appeared meanwhile: a hard link
    (fails with ``EEXIST``) then unlink of the partial. Where the file system has no hard links
    (FAT/exFAT, some network drives) it falls back to exists-check + ``os.replace`` (a small
    race, said here). With ``overwrite``: ``os.replace``. Raises ``RunnerError``
    (``output_exists``, ``output_unwritable``, ``disk_full``).
    """
    try:
        if overwrite:
            os.replace(partial, output)
            return
        try:
            os.link(partial, output)
        except FileExistsError:
            raise RunnerError("output_exists", f"{output} appeared while the job ran; it was "
                              "left untouched.") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                                 errno.EMLINK, errno.ENOSYS):
                raise
            if output.exists():
                raise RunnerError("output_exists", f"{output} appeared while the job ran; it "
                                  "was left untouched.") from None
            os.replace(partial, output)
    except RunnerError:
        raise
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise RunnerError("disk_full", f"No space left to write {output}.") from None
        raise RunnerError("output_unwritable", f"Could not move the result to {output} "
                          f"({exc.strerror or exc}).") from None
    finally:
        discard(partial)
