"""Fallback readers for platforms without a dedicated module (Windows, BSD): psutil only.

Footprint is the resident set size psutil reports (no swap), there is no resettable kernel
high-water mark (``None`` / ``False``), pressure is unknown. Not run here: Linux and macOS use
their own modules; this module is exercised in the tests by calling it directly on Linux.
"""
from __future__ import annotations

import psutil

from ._common import SystemMemory, psutil_system_memory, tree_footprint


def process_footprint(pid: int) -> int:
    """Resident set size of one process (bytes), from psutil."""
    return int(psutil.Process(pid).memory_info().rss)


def footprint(pid: int, *, tree: bool = True) -> int:
    """Sum of resident set sizes of ``pid`` and (``tree``) its descendants, bytes."""
    return tree_footprint(pid, process_footprint, tree)


def high_water_mark(pid: int) -> int | None:
    """Unknown on this platform: ``None``."""
    return None


def reset_high_water_mark(pid: int) -> bool:
    """Not possible on this platform: ``False``."""
    return False


def system_memory() -> SystemMemory:
    """psutil's total / available / swap figures (bytes); pressure ``None``
    (``_common.psutil_system_memory``)."""
    return psutil_system_memory()
