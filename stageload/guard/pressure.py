"""macOS memory pressure in the guard: level names, the admission wait (``--wait-pressure``)
and the running stop (``--stop-at-pressure``).

The level is the kernel's ``kern.memorystatus_vm_pressure_level`` as the meter reads it
(docs/meter.md): 1 normal, 2 warn, 4 critical — the signal behind Activity Monitor's Memory
Pressure graph (green, yellow, red). Other platforms have no such reading (``None``): the options
default to off there, and asking for them is refused at start (:mod:`stageload.guard.config`).
A level that cannot be read is unknown, never "fine": admission waits (``unknown``) and the
running budget neither counts nor clears on it.
"""
from __future__ import annotations

LEVELS = {"normal": 1, "warn": 2, "critical": 4}
NAMES = {value: name for name, value in LEVELS.items()}
_ALIASES = {"warning": "warn", "1": "normal", "2": "warn", "4": "critical"}
#: Option value that means "the platform default" (on where the platform reports pressure).
AUTO = "auto"


def parse_level(text: str) -> int | None:
    """``warn``/``warning``/``2`` → 2, ``critical``/``4`` → 4, ``normal``/``1`` → 1,
    ``off``/``none`` → None. Raises ``ValueError`` saying what to write otherwise."""
    word = str(text).strip().lower()
    if word in ("off", "none"):
        return None
    word = _ALIASES.get(word, word)
    if word not in LEVELS:
        raise ValueError(f"{text!r} is not a pressure level; write warn, critical or off")
    return LEVELS[word]


def level_name(level: int | None) -> str:
    """``warn (2)`` for a level, ``unknown`` for None."""
    if level is None:
        return "unknown"
    return f"{NAMES.get(level, '?')} ({level})"


def admission_block(wait_level: int | None, pressure: int | None) -> str | None:
    """Why the command may not start yet because of pressure (text), or None. ``wait_level``:
    wait while the level is at least this (None = no such condition). An unknown ``pressure``
    is not judged here: the ``unknown`` condition of admission covers it."""
    if wait_level is None or pressure is None or pressure < wait_level:
        return None
    return f"memory pressure {level_name(pressure)} (waiting while {NAMES[wait_level]} or worse)"


def observe_stop(stop_level: int | None, pressure: int | None, count: int,
                 samples: int) -> tuple[int, str | None]:
    """One running sample against ``--stop-at-pressure``: returns ``(count, reason)``.

    ``count`` is the number of consecutive samples at or above ``stop_level`` before this one;
    the command stops (``reason`` is text) once ``samples`` (``--kill-samples``) of them follow
    in a row. An unknown ``pressure`` leaves ``count`` as it is; a lower level resets it.
    """
    if stop_level is None or pressure is None:
        return count, None
    if pressure < stop_level:
        return 0, None
    count += 1
    if count < samples:
        return count, None
    return count, (f"memory pressure {level_name(pressure)} >= {NAMES[stop_level]} for {count} "
                   "consecutive samples")
