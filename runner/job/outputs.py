"""Output paths: checked up front, written under a temporary name, committed atomically.

A job never overwrites an existing file unless ``--overwrite`` was given, and never leaves a
half-written GLB behind: the worker writes ``.<stem>.partial-<pid>-<hex>.glb`` in the output's own
folder (same file system, so the final rename is atomic) and the supervisor commits it with
``commit()`` or removes it with ``discard()``.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

import psutil

from meshfacts.errors import RunnerError

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def default_trace_path(output: Path) -> Path:
    """``OUT.glb`` → ``OUT.trace.jsonl`` in the same folder."""
    return output.with_name(output.stem + ".trace.jsonl")


PROBE_BYTES = 4096
"""Bytes the writability probe writes and syncs: one block of a typical file system, so a disk
with no free block fails the probe (an empty file needs only an inode)."""


def unwritable(exc: OSError, folder: Path, what: str) -> RunnerError:
    """The ``RunnerError`` for ``exc`` raised while writing the ``what`` (``output``,
    ``trace``) into ``folder``: ``disk_full`` for ENOSPC/EDQUOT, else ``output_unwritable``."""
    if exc.errno in _NO_SPACE:
        return RunnerError("disk_full", f"No space left in {folder} for the {what}.")
    if exc.errno == errno.ENOENT and folder.is_dir():  # e.g. /proc: it exists, takes no files
        return RunnerError("output_unwritable", f"Cannot write the {what} into {folder}: that "
                           "folder exists, but the system does not let files be created in it "
                           "(creating one fails as if the folder were missing: a virtual file "
                           "system such as /proc).")
    return RunnerError("output_unwritable", f"Cannot write the {what} into {folder} "
                       f"({exc.strerror or exc}).")


def _writable_folder(folder: Path, what: str) -> None:
    """Create ``folder`` (and its parents) if missing, then write ``PROBE_BYTES`` to a new file
    in it, sync and delete it — the only honest writability test (``os.access`` says yes to
    root on a read-only mount, and an empty file fits on a full disk). ``what`` (``output``,
    ``trace``) names the file in the messages. Raises ``RunnerError`` (``output_unwritable``
    or ``disk_full``)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError("output_unwritable", f"Cannot create the folder {folder} for the "
                          f"{what} ({exc.strerror or exc}).") from None
    name = None
    try:
        fd, name = tempfile.mkstemp(prefix=".runner-probe-", dir=folder)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise unwritable(exc, folder, what) from None
    finally:
        if name is not None:
            discard(Path(name))


#: The longest names the runner makes from an output's stem, beside it (``.<stem>.partial-<pid>-
#: <8 hex>.glb``; a pid has at most 7 digits on Linux, whose pid_max is at most 2**22) and
#: below it (``.<stem>.job-<pid>-<8 hex>/<stem>.glb``, the export process's partial GLB).
_PARTIAL_EXTRA = len("..partial--12345678.glb") + 7
_JOB_EXTRA = len("..job--12345678/") + 7


def _limits(path: Path) -> tuple[int, int]:
    """``(NAME_MAX, PATH_MAX)`` in bytes of the file system that will hold ``path`` (asked of
    its nearest existing ancestor with ``os.pathconf``; 255 and 4096, Linux's, when unknown)."""
    probe = path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    limits = []
    for name, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            value = os.pathconf(probe, name)
        except (OSError, ValueError):
            value = -1
        limits.append(value if value > 0 else default)
    return limits[0], limits[1]


def check_path_limits(path: Path, what: str = "output") -> None:
    """Refuse, with ``output_invalid``, a path the system cannot create: a name longer than
    the file system's NAME_MAX, a whole path of PATH_MAX bytes or more — counting the hidden
    files the runner makes beside and below an output (partial GLB, job folder). Lengths in
    bytes of the file-system encoding. Raises ``RunnerError('output_invalid')``."""
    name_max, path_max = _limits(path)
    hint = "Choose a shorter file name or a folder with a shorter path."
    for part in path.parts[1:]:
        size = len(os.fsencode(part))
        if size > name_max:
            raise RunnerError("output_invalid", f"The {what} path has a name of {size} bytes "
                              f"({part[:40]}…); names here may have at most {name_max}.", hint)
    stem = len(os.fsencode(path.stem))
    folder = len(os.fsencode(str(path.parent))) + 1
    own = len(os.fsencode(path.name))
    longest = folder + (max(own, stem + _PARTIAL_EXTRA, 2 * stem + _JOB_EXTRA + 4)
                        if what == "output" else own)
    if longest >= path_max:
        need = "" if longest == folder + own else \
            f", and the runner's hidden files for it need up to {longest}"
        raise RunnerError("output_invalid", f"The {what} path is too long for the system: "
                          f"{folder + own} bytes{need}, over the limit of {path_max - 1} bytes "
                          "(PATH_MAX).", hint)
    # the hidden partial GLB beside an output; the claim (``.NAME.claim``) beside a trace
    hidden, extra = ("partial file", _PARTIAL_EXTRA - 4) if what == "output" else \
        ("claim file", len("..claim"))
    if own + extra > name_max:
        raise RunnerError("output_invalid", f"The {what} name {path.name[:40]}… is too long: the "
                          f"runner's hidden {hidden} beside it would have a name of "
                          f"{own + extra} bytes, and names here may have at most {name_max} "
                          f"(keep the {what}'s name to {name_max - extra} bytes or fewer).", hint)


def check_output(output: str | Path, overwrite: bool = False) -> Path:
    """Validate the GLB path before any work; returns it absolute.

    Missing parent folders are created. Raises ``RunnerError``: ``output_invalid`` (not ending
    in ``.glb``, a folder, or too long for the system: :func:`check_path_limits`),
    ``output_exists`` (exists, or is a dangling symbolic link, and not ``overwrite``),
    ``output_unwritable`` (folder cannot be
    created or written), ``disk_full``.
    """
    path = Path(output).expanduser().absolute()
    check_path_limits(path)  # first: is_dir raises for a path the system cannot take
    if path.is_dir():
        raise RunnerError("output_invalid", f"The output {path} is a folder.",
                          f"Give the GLB's file path, e.g. {path / 'NAME.glb'}.")
    if path.name.lower() == ".glb":  # Path('.glb').suffix is '': a dot file, no suffix
        raise RunnerError("output_invalid", f"The output name {path.name!r} has no name before "
                          ".glb.", f"Give the GLB a name, e.g. {path.with_name('NAME.glb')}.")
    if path.suffix.lower() != ".glb":
        raise RunnerError("output_invalid", f"The output {path.name!r} does not end in .glb.")
    if os.path.islink(path) and not path.exists() and not overwrite:
        # lexists, not exists: a dangling link is still a name the commit could not take
        raise RunnerError("output_exists", f"{path} is a symbolic link to "
                          f"{os.readlink(path)}, which does not exist; it was left untouched.",
                          "Remove the link, choose another output name, or pass --overwrite "
                          "to replace the link itself (its target is never written).")
    if path.exists() and not overwrite:
        raise RunnerError("output_exists", f"{path} already exists; it was left untouched.")
    _writable_folder(path.parent, "output")
    return path


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when ``a`` and ``b`` name the same file: ``os.path.samefile`` when both exist
    (catches hard links and symlinks), else equal fully resolved paths (``~`` expanded)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    try:
        return os.path.normcase(a.resolve()) == os.path.normcase(b.resolve())
    except (OSError, RuntimeError):
        return os.path.normcase(a.absolute()) == os.path.normcase(b.absolute())


def output_conflict(output: str | Path, source: str | Path, what: str = "image") -> None:
    """Refuse an output GLB that is the input (``what``: "image", or "asset" for ``runner
    export``): the same resolved path or the same file (``same_file``: hard links, symbolic
    links). Committing the GLB there, which ``--overwrite`` would allow, destroys the input.
    Raises ``RunnerError('usage')`` before anything is written."""
    if same_file(output, source):
        raise RunnerError("usage", f"The output {output} is the input {what}; it was left "
                          "untouched.", "Give -o a path of its own, e.g. out/NAME.glb.")


def trace_conflict(trace: str | Path, image: str | Path, output: str | Path,
                   what: str = "image") -> None:
    """Refuse a trace path that is the input (``what``: "image", or "asset" for ``runner
    export``) or the output GLB (writing it would destroy the input, or leave JSON under the
    .glb name). Raises ``RunnerError('usage')``."""
    if same_file(trace, image):
        raise RunnerError("usage", f"The trace path {trace} is the input {what}; it was left "
                          "untouched.", "Give --trace a path of its own, e.g. "
                          "out/NAME.trace.jsonl, or leave --trace out.")
    if same_file(trace, output):
        raise RunnerError("usage", f"The trace path {trace} is the output GLB.",
                          "Give --trace a path of its own, e.g. out/NAME.trace.jsonl, or "
                          "leave --trace out.")


def _first_line(path: Path) -> dict | None:
    """The first line of ``path`` as a JSON object, or None (unreadable, not JSON, not an
    object). Reads at most 64 KiB; never raises."""
    try:
        with open(path, "rb") as f:
            first = f.readline(65536)
        obj = json.loads(first.decode("utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _last_line(path: Path, limit: int = 1 << 20) -> dict | None:
    """The last line of ``path`` as a JSON object: ``{}`` when it is not one (cut short by a
    kill, not JSON, or no line at all), None when the file cannot be read. Reads at most the
    final ``limit`` bytes; never raises."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            tail = f.read()
    except OSError:
        return None
    lines = [line for line in tail.split(b"\n") if line.strip()]
    try:
        obj = json.loads(lines[-1].decode("utf-8")) if lines else {}
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _trace_owner(path: Path) -> tuple[bool, int | None]:
    """``(looks_like_a_trace, pid_of_its_runner)`` from the first line of ``path``: a trace
    starts with one JSON object that has ``"event"`` (the runner's starts with ``hello``, which
    carries the supervisor's ``pid``). Never raises."""
    obj = _first_line(path)
    if obj is None or not isinstance(obj.get("event"), str):
        return False, None
    pid = obj.get("pid") if obj.get("event") == "hello" else None
    return True, pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _is_runner(pid: int) -> bool:
    """True when process ``pid`` is running and its command line mentions ``runner`` (so a
    recycled pid of an unrelated program does not block a trace forever)."""
    try:
        return any("runner" in part for part in psutil.Process(pid).cmdline())
    except (psutil.Error, OSError):
        return False


def failed_runs_trace(trace: str | Path, output: str | Path) -> bool:
    """True when the file at ``trace`` is the runner's own leftover of an earlier run on
    ``output`` that produced nothing, so the same command may replace it without
    ``--overwrite`` (a person who fixed the input and runs again must not be blocked by it).

    All of these must hold: a plain file (not a link, FIFO or device) whose first line is a
    runner's ``hello`` (``"event": "hello"`` with ``runner`` and an int ``pid``) naming this
    ``output``; that pid is not a live runner (nor this process); the run did not succeed (the
    last complete line is not a ``result``: an ``error``, or cut short by a kill); and
    ``output`` does not exist. Anything else — a user's file, the trace of a successful run
    (even one whose GLB was deleted since), a live runner's trace — is False and keeps the
    ``output_exists`` protection of ``check_trace``. Never raises.
    """
    path = Path(trace).expanduser().absolute()
    out = Path(output).expanduser().absolute()
    if not path.is_file() or path.is_symlink() or out.exists() or out.is_symlink():
        return False
    hello = _first_line(path)
    if hello is None or hello.get("event") != "hello" or "runner" not in hello:
        return False
    pid, named = hello.get("pid"), hello.get("output")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(named, str):
        return False
    if not same_file(named, out) or pid == os.getpid() or _is_runner(pid):
        return False
    last = _last_line(path)
    return last is not None and last.get("event") != "result"


def leftover_asset(trace: str | Path, output: str | Path) -> str | None:
    """The asset a failed run of ``output`` kept (``--keep-asset`` after its export failed or
    was cancelled), as its leftover trace records it: the ``details.asset`` of the trace's last
    line, when the trace is that run's leftover (``failed_runs_trace``); else None. Never
    raises."""
    if not failed_runs_trace(trace, output):
        return None
    last = _last_line(Path(trace).expanduser().absolute()) or {}
    details = last.get("details")
    asset = details.get("asset") if isinstance(details, dict) else None
    return asset if isinstance(asset, str) else None


def check_trace(trace: str | Path, replace: bool = False) -> Path:
    """Validate the trace path before any work (absolute, parent created, writable); returns it.

    An existing file there is never replaced unless ``replace`` (``--overwrite``, or a batch
    re-running an image whose trace the manifest records) — and even then only when it looks
    like a trace (first line a JSON object with ``"event"``) and no live runner is writing it
    (its ``hello`` names a running pid other than ours). The file itself is removed only by the
    supervisor when it opens the new trace (``stageload.trace.TraceWriter``, which refuses an
    existing file). Raises ``RunnerError``: ``output_invalid`` (a folder), ``output_exists``,
    ``output_unwritable``, ``disk_full``.
    """
    path = Path(trace).expanduser().absolute()
    check_path_limits(path, "trace")
    if path.is_dir():
        raise RunnerError("output_invalid", f"The trace path {path} is a folder.",
                          "Give --trace a file path, e.g. run.trace.jsonl.")
    if path.exists() or path.is_symlink():
        if not replace:
            raise RunnerError("output_exists", f"The trace {path} already exists (an earlier "
                              "run, or a runner still working on this output); it was left "
                              "untouched.", "Pass --overwrite to replace an earlier run's "
                              "trace, or give --trace another path.")
        regular = path.is_file() and not path.is_symlink()  # never open a FIFO or device
        looks, pid = _trace_owner(path) if regular else (False, None)
        if not looks:
            raise RunnerError("output_exists", f"{path} exists and is not a runner trace; it "
                              "was left untouched.", "Give --trace another path.")
        if pid is not None and pid != os.getpid() and _is_runner(pid):
            raise RunnerError("output_exists", f"The trace {path} is being written by another "
                              f"runner (pid {pid}); it was left untouched.",
                              "Wait for that job to finish, or choose another output name.")
    _writable_folder(path.parent, "trace")
    return path


def new_file_mode() -> int:
    """The permission bits (``0666`` less the process's umask) any new file gets here: for a
    file the runner made private first (``mkstemp``'s 0600, a hand-over in the 0700 job folder)
    and then publishes beside the GLBs (the manifest, a kept asset). The umask is read by
    setting and restoring it (no other thread creates files meanwhile)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


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


JOB_DIR = re.compile(r"^\..+\.job-(\d+)-[0-9a-f]+$")


def job_dir(output: Path) -> Path:
    """Create a private (0700) hidden folder next to ``output`` for one job's temporary files
    (the hand-over between the model and the export process, the export's partial GLB and the
    port's own temporary files beside it): ``.<stem>.job-<pid>-<hex>``. Same file system as
    ``output``, so a GLB in it is committed by rename. Raises ``OSError``."""
    path = output.with_name(f".{output.stem}.job-{os.getpid()}-{secrets.token_hex(4)}")
    path.mkdir(mode=0o700)
    return path


def sweep_stale_job_dirs(folder: Path) -> list[Path]:
    """Remove job folders in ``folder`` (any output's) left by a supervisor that was killed
    outright: ``.<stem>.job-<pid>-<hex>`` whose ``pid`` is no longer running. Returns the removed
    paths; never raises."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = JOB_DIR.match(name)
        if match and not psutil.pid_exists(int(match.group(1))) and (folder / name).is_dir():
            shutil.rmtree(folder / name, ignore_errors=True)
            if not (folder / name).exists():
                removed.append(folder / name)
    return removed


def missing_folders(*paths: Path) -> list[Path]:
    """The folders above ``paths`` that do not exist yet, deepest first (those a job that
    writes ``paths`` would make, for :func:`remove_empty` when it leaves nothing)."""
    missing: list[Path] = []
    for path in paths:
        folder = Path(path).expanduser().absolute().parent
        while not folder.exists() and folder not in missing:
            missing.append(folder)
            folder = folder.parent
    return sorted(missing, key=lambda f: len(f.parts), reverse=True)


def remove_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty now; never raises."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def discard_dir(path: Path | None) -> bool:
    """Remove a job folder and everything in it; True if it is gone. Never raises."""
    if path is None:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


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
