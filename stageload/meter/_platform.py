"""Choose the platform reader module (the psutil layout: one module per platform)."""
from __future__ import annotations

import os
import sys
from types import ModuleType

from ._macos_lib import LIBSYSTEM_ENV

_MODULES = {"linux": "_linux", "darwin": "_macos"}


def reader_name(platform: str | None = None) -> str:
    """Name of the reader module for ``platform``: ``_linux`` for ``linux*``, ``_macos`` for
    ``darwin``, ``_generic`` (psutil only) for anything else.

    ``platform`` None means this machine (``sys.platform``), with one TEST-ONLY exception: when
    ``STAGELOAD_MACOS_LIBSYSTEM`` names a stand-in library, the macOS reader is chosen on any
    platform, so the tests can run it (and the Sampler and guard above it) on Linux against
    the stand-in built from tests/macos_standin/. A normal run never sets that variable, so it
    never gets the macOS reader off a Mac.
    """
    if platform is None:
        if os.environ.get(LIBSYSTEM_ENV):
            return "_macos"
        platform = sys.platform
    for prefix, name in _MODULES.items():
        if platform.startswith(prefix):
            return name
    return "_generic"


def load_reader(platform: str | None = None) -> ModuleType:
    """Import and return the reader module for ``platform`` (default: this machine); only that
    one is imported (the macOS reader loads libSystem at import)."""
    name = reader_name(platform)
    if name == "_linux":
        from . import _linux as reader
    elif name == "_macos":
        from . import _macos as reader
    else:
        from . import _generic as reader
    return reader
