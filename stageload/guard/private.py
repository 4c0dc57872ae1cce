"""A private per-user folder for the guards' registry and reservations: made ``0700`` where
only this user can make it, and checked (a folder, not a link; owned by this user; no access
for group or others) every time it is used.

Why not a fixed name such as ``/tmp/stageload-guards-<uid>``: it could be taken first by
another local user (a folder of theirs, or a plain file), and then every guard with ``--need``
admitted without reservations, silently — or that user could fake reservations on purpose.
Where (:func:`default_dir`): ``$XDG_RUNTIME_DIR`` (Linux: ``/run/user/<uid>``, made
by the system for this user only) when it is a private folder of this user's; else the
user's cache folder (macOS ``~/Library/Caches``, elsewhere ``$XDG_CACHE_HOME`` or
``~/.cache``). ``$STAGELOAD_GUARD_DIR`` still overrides (a group of guards that should see
each other, e.g. a test's) and is checked the same way. POSIX only; the macOS branch (its
cache folder) was not run here.
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

NAME = "stageload-guards"


class FolderUnusable(OSError):
    """The folder cannot be used privately; the text says why and where."""


def _is_private(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & 0o077)


def default_dir() -> Path:
    """Where the guards of this user meet by default (see the module docstring)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _is_private(Path(runtime)):
        return Path(runtime) / NAME
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / NAME
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / NAME


def check(path: Path) -> Path:
    """Raise :class:`FolderUnusable` unless ``path`` is a folder (not a link) owned by this
    user with no access for group or others. Returns ``path``."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise FolderUnusable(f"{path} cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise FolderUnusable(f"{path} is not a folder (a file or a link is in its place)")
    if st.st_uid != os.getuid():
        raise FolderUnusable(f"{path} belongs to another user (uid {st.st_uid}, not "
                             f"{os.getuid()})")
    if st.st_mode & 0o077:
        raise FolderUnusable(f"{path} can be used by other users (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}, not 0700)")
    return path


def ensure(path: Path) -> Path:
    """Create ``path`` as ``0700`` when it does not exist (its parents with the usual mode),
    then :func:`check` it. Returns ``path``; raises :class:`FolderUnusable`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise FolderUnusable(f"{path} cannot be created ({exc.strerror or exc})") from None
    return check(path)
