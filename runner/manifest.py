"""The batch manifest ``OUTDIR/manifest.json`` (its fields: ``runner/batch.py``): read, and
updated one image at a time by merging into what is on disk under a lock, so several batches
writing into one folder keep each other's records.

Writers take an exclusive ``fcntl.flock`` on the output folder itself (no lock file to leave
behind; the kernel drops it if the runner dies), read the manifest as it is on disk, change
their own image's entry and the header, and replace the file atomically (temporary file in the
folder, then ``os.replace``). Readers need no lock: they see the old or the new file whole.

File names that are not valid UTF-8 (Python holds them with lone surrogates) are written as
``\\udcXX`` JSON escapes, which read back as the very same names.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import RunnerError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def load_manifest(path: Path) -> dict:
    """The manifest at ``path``; an empty one when missing or unreadable (logged)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as exc:
        print(f"runner: ignoring unreadable manifest {path}: {exc}", file=sys.stderr)
        return {}


def manifest_entries(data: dict) -> dict:
    """The ``images`` mapping of a loaded manifest (``{}`` when missing or not a mapping)."""
    images = data.get("images")
    return images if isinstance(images, dict) else {}


def _json_text(data: dict) -> str:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a non-UTF-8 file name: escapes keep it exactly
        text = json.dumps(data, indent=2, ensure_ascii=True) + "\n"
    return text


def write_manifest(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temporary file in the same folder, then
    ``os.replace``); the temporary file is removed whatever fails. Raises
    ``RunnerError('disk_full'|'output_unwritable')``."""
    text = _json_text(data)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=path.parent)
    except OSError as exc:
        raise _write_error(path, exc) from None
    try:
        # mkstemp creates 0600; give the manifest the mode any new file gets (0666 & ~umask),
        # like the GLBs and traces next to it.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _write_error(path, exc) from None
        raise


def _write_error(path: Path, exc: OSError) -> RunnerError:
    kind = "disk_full" if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)) \
        else "output_unwritable"
    return RunnerError(kind, f"Cannot write the manifest {path} ({exc.strerror or exc}).")


def _umask() -> int:
    """The process's umask (read by setting and restoring it; no other thread creates files
    while the manifest is written)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def folder_lock(folder: Path):
    """Hold an exclusive ``flock`` on ``folder`` (blocking) for the ``with`` block. Raises
    ``RunnerError('output_unwritable')`` when the folder cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except OSError as exc:
        raise RunnerError("output_unwritable", f"Cannot open {folder} to update the manifest "
                          f"({exc.strerror or exc}).") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def update_manifest(path: Path, header: dict, name: str | None = None,
                    entry: dict | None = None, since: float | None = None) -> dict:
    """Merge one image's ``entry`` (under the key ``name``; None: header only) and the
    ``header`` fields into the manifest on disk, under the folder's lock; returns the merged
    manifest. An entry on disk that another batch finished as ``done`` at or after ``since``
    (seconds, when this batch began the image) wins over a failure of ours. Raises
    ``RunnerError`` like ``write_manifest``."""
    with folder_lock(path.parent):
        data = load_manifest(path)
        entries = manifest_entries(data)
        if name is not None:
            theirs = entries.get(name)
            newer = (isinstance(theirs, dict) and theirs.get("status") == "done"
                     and isinstance(theirs.get("finished"), (int, float)) and since is not None
                     and theirs["finished"] >= since)
            if entry.get("status") == "done" or not newer:
                entries[name] = entry
        merged = {**data, **header, "images": entries}
        write_manifest(path, merged)
    return merged
