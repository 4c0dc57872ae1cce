"""The batch manifest ``OUTDIR/manifest.json`` (its fields: ``runner/batch/folder.py``): read, and
updated one image at a time by merging into what is on disk under a lock, so several batches
writing into one folder keep each other's records.

Writers take an exclusive ``fcntl.flock`` on the output folder itself (no lock file to leave
behind; the kernel drops it if the runner dies), read the manifest as it is on disk, change
their own image's entry and the header, and replace the file atomically (temporary file in the
folder, then ``os.replace``). Readers need no lock: they see the old or the new file whole.

File names that are not valid UTF-8 (Python holds them with lone surrogates) are written as
``\\udcXX`` JSON escapes, which read back as the very same names.

A manifest that cannot be read — or holds a record that is not one (``_bad_record``) — is never
silently replaced: it is kept beside it (renamed) and rebuilt from the GLBs and traces in the
folder (``runner/batch/recovery.py``), and so is a missing one, one without records, or a
record missing for an image whose trace is in the folder; one written by a newer runner is
refused (``manifest_newer``) and left as it is.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from meshfacts.errors import RunnerError
from runner.batch import MANIFEST_VERSION
from runner.batch.recovery import recover, recover_records
from runner.job.outputs import new_file_mode


class ManifestDamaged(ValueError):
    """The manifest file exists but is not a manifest this runner can read (corrupt or cut-off
    JSON, not an object, ``images`` not an object, no integer ``version``); the text says
    why."""


def read_manifest(path: Path) -> dict:
    """The manifest at ``path`` (``{}`` when there is none). Raises :class:`ManifestDamaged`
    for a file that cannot be read as a manifest, and ``RunnerError('manifest_newer')`` for one
    a newer runner wrote (``version`` above ``MANIFEST_VERSION``: its fields would be lost)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        raise ManifestDamaged(f"it cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestDamaged(f"it is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ManifestDamaged("it is not a JSON object")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ManifestDamaged(f"its version is {version!r}, not a whole number")
    if version > MANIFEST_VERSION:
        raise RunnerError("manifest_newer", f"The manifest {path} was written by a newer runner "
                          f"(manifest version {version}; this runner reads version "
                          f"{MANIFEST_VERSION}). Nothing was changed.",
                          "Use the newer runner for this folder, or choose another output "
                          "folder (-o).", version=version)
    if not isinstance(data.get("images", {}), dict):
        raise ManifestDamaged("its images are not a JSON object")
    for name, entry in data.get("images", {}).items():
        why = _bad_record(entry)
        if why:
            raise ManifestDamaged(f"its record for {name!r} {why}")
    return data


RECORD_STATUSES = ("done", "failed", "cancelled")
"""The ``status`` of a manifest record (``runner/commands/batch.py``)."""


def _bad_record(entry) -> str | None:
    """What is wrong with one record of ``images`` (a batch would otherwise trust it, then
    fail that image with ``output_exists`` on every rerun), or None. Checks what the resume
    reads: an object, ``status`` one of ``RECORD_STATUSES``, ``image``/``output``/``trace``
    strings or null, ``sha256`` a string or null."""
    if not isinstance(entry, dict):
        return f"is {type(entry).__name__} {entry!r:.40}, not an object"
    if entry.get("status") not in RECORD_STATUSES:
        return f"has the status {entry.get('status')!r:.40}"
    for key in ("image", "output", "trace", "sha256"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            return f"has {key} {entry[key]!r:.40}, not a string"
    return None


def load_manifest(path: Path) -> dict:
    """The manifest at ``path`` for reading an entry: ``{}`` when missing or damaged (the
    next :func:`update_manifest` keeps and replaces a damaged one). Raises
    ``RunnerError('manifest_newer')``."""
    try:
        return read_manifest(path)
    except ManifestDamaged:
        return {}


def manifest_entries(data: dict) -> dict:
    """The ``images`` mapping of a loaded manifest (``{}`` when missing or not a mapping)."""
    images = data.get("images")
    return images if isinstance(images, dict) else {}


def relocated(entry: dict, folder: Path) -> dict:
    """``entry`` with its ``output`` and ``trace`` resolved relative to ``folder`` (the
    manifest's own folder): a batch writes both directly into OUTDIR, so a record of a folder
    that was moved or copied since (its paths name the old folder) names the file of the same
    name here. Other fields, and paths that are not strings, are kept as they are."""
    moved = dict(entry)
    for key in ("output", "trace"):
        if isinstance(entry.get(key), str) and entry[key]:
            moved[key] = str(folder / Path(entry[key]).name)
    return moved


def _keeps_done(theirs, entry: dict, folder: Path) -> bool:
    """True when a failed or cancelled ``entry`` must not replace the ``done`` record
    ``theirs`` because that record's GLB is still in ``folder`` (a job that fails never
    touches the GLB: it is committed only on success), so the finished work stays recorded."""
    if not isinstance(theirs, dict) or theirs.get("status") != "done" \
            or entry.get("status") == "done":
        return False
    output = relocated(theirs, folder).get("output")
    return isinstance(output, str) and os.path.isfile(output)


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
        os.fchmod(fd, new_file_mode())
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
                    entry: dict | None = None, since: float | None = None,
                    rebuild_missing: bool = False) -> dict:
    """Merge one image's ``entry`` (under the key ``name``; None: header only) and the
    ``header`` fields into the manifest on disk, under the folder's lock; returns the merged
    manifest. An entry on disk that another batch finished as ``done`` at or after ``since``
    (seconds, when this batch began the image) wins over a failure of ours, and a failure never
    replaces a ``done`` record whose GLB is still there: that record is kept, the failure
    added to it as ``last_failure`` (its ``kind``, ``message``, ``hint``, ``exit_code`` and
    ``finished``). A damaged manifest
    is kept beside it and rebuilt first (``recovery.recover``); with
    ``rebuild_missing`` (a batch opening its folder) so is a missing one, one without records,
    and the records it lacks of images whose traces are there (``recover_records``) — not
    later, when the batch's own running jobs have traces there. Raises
    ``RunnerError`` like ``write_manifest``, and ``manifest_newer`` (touching nothing)."""
    with folder_lock(path.parent):
        try:
            data = read_manifest(path)
        except ManifestDamaged as why:
            data = recover(path, str(why))
        if rebuild_missing:  # deleted, no records, or some records lost
            data = recover_records(path, data)
        entries = manifest_entries(data)
        if name is not None:
            theirs = entries.get(name)
            newer = (isinstance(theirs, dict) and theirs.get("status") == "done"
                     and isinstance(theirs.get("finished"), (int, float)) and since is not None
                     and theirs["finished"] >= since)
            if _keeps_done(theirs, entry, path.parent):
                if not newer:
                    entries[name] = {**theirs, "last_failure": {
                        **(entry.get("error") or {}), "status": entry.get("status"),
                        "finished": entry.get("finished")}}
            elif entry.get("status") == "done" or not newer:
                entries[name] = entry
        merged = {**data, **header, "images": entries}
        write_manifest(path, merged)
    return merged
