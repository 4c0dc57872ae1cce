"""Choose the platform reader module (the psutil layout: one module per platform)."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

_MODULES = {"linux": "_linux", "darwin": "_macos"}


def reader_name(platform: str | None = None) -> str:
    """Name of the reader module for ``platform`` (default ``sys.platform``): ``_linux`` for
    ``linux*``, ``_macos`` for ``darwin``, ``_generic`` (psutil only) for anything else."""
    platform = sys.platform if platform is None else platform
    for prefix, name in _MODULES.items():
        if platform.startswith(prefix):
            return name
    return "_generic"


def load_reader(platform: str | None = None) -> ModuleType:
    """Import and return the reader module for ``platform`` (default: this machine)."""
    return importlib.import_module(f"{__package__}.{reader_name(platform)}")
