"""The guard's view of system memory: one plain dict of readings, and how to print it.

A *readings* dict has the keys ``available``, ``total``, ``swap`` (swap in use), ``swap_total`` and
``pressure``; sizes are int bytes, ``pressure`` is macOS's level 1/2/4, and any of them may be None
(unknown). It is the system part of the meter's ``sample`` dict (docs/ARCHITECTURE.md, "Trace"), so
a program that samples can pass its samples straight to the guard.
"""
from __future__ import annotations

from meshfacts.units import format_percent, format_size

from .pressure import level_name

KEYS = ("available", "total", "swap", "swap_total", "pressure")


def _int_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def from_sample(sample: dict) -> dict:
    """Readings from a meter ``sample`` dict (missing or non-numeric fields become None)."""
    return {key: _int_or_none(sample.get(key)) for key in KEYS}


def from_system_memory(system) -> dict:
    """Readings from a ``stageload.meter.SystemMemory`` (``swap_used`` becomes ``swap``)."""
    return {
        "available": _int_or_none(system.available),
        "total": _int_or_none(system.total),
        "swap": _int_or_none(system.swap_used),
        "swap_total": _int_or_none(system.swap_total),
        "pressure": _int_or_none(getattr(system, "pressure", None)),
    }


def read_system() -> dict:
    """Read the system's memory now through ``stageload.meter.system_memory()``.

    When the meter itself fails (an OSError from a platform call) every reading is None, which
    the guard treats as unknown ("do not start"; no stop decision can be taken on it).
    """
    from stageload.meter import system_memory  # imported here: keeps `import stageload.guard` light

    try:
        return from_system_memory(system_memory())
    except OSError:
        return {key: None for key in KEYS}


def describe(readings: dict) -> str:
    """``available 7.1 GiB (29 % of 24.0 GiB), swap 0 B[, pressure warn (2)]`` — the
    readings for a human log line (pressure only where the platform reports it)."""
    available = readings.get("available")
    total = readings.get("total")
    text = (f"available {format_size(available)} ({format_percent(available, total)} of "
            f"{format_size(total)})")
    text += f", swap {format_size(readings.get('swap'))}"
    if readings.get("pressure") is not None:
        text += f", pressure {level_name(readings['pressure'])}"
    return text
