"""The wheels Blender installs from the zip, shared between the add-on scenarios of a session:
each scenario has its own user folder (``BLENDER_USER_RESOURCES``), where Blender's installer
extracts the zip's wheels (~190 MB: SciPy, Matplotlib …) into ``extensions/.local``; a user
folder that already holds them, hard-linked from the session's first install, makes the
installer skip that extraction (measured: an install took 14.3 s fresh, 3.5 s seeded)."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

#: python -> a copy of the wheels Blender installed from the zip (the user folder's
#: ``extensions/.local``) for that interpreter, taken after the session's first install there.
_WHEELS: dict[str, Path] = {}


def seed_wheels(python: str | Path, user: Path) -> None:
    """Give ``user`` (a scenario's BLENDER_USER_RESOURCES) the wheels an earlier scenario's
    install left, hard-linked: Blender's installer finds them installed and skips extracting
    ~190 MB (SciPy, Matplotlib …), most of an install's time. The installer still unpacks the
    zip into the repository and enables the add-on; the tests of the wheel installation itself
    run with ``fresh_install=True``."""
    template = _WHEELS.get(str(python))
    if template is not None and not (user / "extensions" / ".local").exists():
        shutil.copytree(template, user / "extensions" / ".local", copy_function=_link)


def keep_wheels(python: str | Path, user: Path) -> None:
    """After a scenario whose install completed: keep its wheels for later scenarios of
    ``python`` (removed when the session ends)."""
    local = user / "extensions" / ".local"
    if str(python) in _WHEELS or not local.is_dir():
        return
    template = Path(tempfile.mkdtemp(prefix="blender-wheels-")) / ".local"
    shutil.copytree(local, template, copy_function=_link)
    atexit.register(shutil.rmtree, template.parent, ignore_errors=True)
    _WHEELS[str(python)] = template


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system: a copy
        shutil.copy2(src, dst)
