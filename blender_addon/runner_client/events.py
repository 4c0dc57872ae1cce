"""Runner events checked where they enter the add-on. Pure Python: no bpy, no threads.

The runner's stdout is a boundary (runner/PROTOCOL.md): every line is parsed by
:func:`parse_line` and every event cleaned by :func:`clean` — against the runner's own event
schema, ``meshfacts/events.py``, which the add-on reads by path like the other runtime facts
— before :class:`state.JobState` reads it, so a field of the wrong type (a string or NaN where
bytes are expected, a number where a list is) can never raise in the panel's ``draw`` or the
headless loop. A field that fails its check is dropped (as if the runner had not sent it —
readers must already cope with missing optional fields) and named in a note; the rest of the
event is kept, so one bad figure does not lose a ``result``. A kind the schema does not declare
is refused whole.

Limits: a line longer than :data:`MAX_LINE` bytes is refused (the largest real event, a
``result`` with its summary of a nine-stage run, is about 6 kB); JSON nested deeper than
Python's recursion limit is refused, not a ``RecursionError``; numbers must be finite and at
most the schema's ``MAX_NUMBER`` in size (a signed 64-bit counter, as
``meshfacts.units.MAX_SIZE``).
"""
from __future__ import annotations

import json

from . import facts as _facts

MAX_LINE = 1 << 20  # bytes


class EventError(ValueError):
    """A line that is not an event the add-on can use; the message says what was wrong."""


def _refuse_constant(name: str):
    raise EventError(f"runner printed {name}, which is not a JSON number")


def parse_line(line: str | bytes) -> dict | None:
    """One stdout line of the runner as an event dict, or None for a blank line.

    Raises :class:`EventError` (with the start of the line) when it is longer than
    :data:`MAX_LINE`, not JSON (``NaN``/``Infinity`` included), nested too deeply, or not an
    object with a string ``"event"`` — the protocol allows nothing else on stdout, so such a line
    is a fault worth showing, not something to drop silently."""
    if len(line) > MAX_LINE:
        raise EventError(f"runner printed a line of {len(line)} bytes (more than {MAX_LINE}); "
                         "skipped")
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.strip()
    if not line:
        return None
    try:
        obj = json.loads(line, parse_constant=_refuse_constant)
    except RecursionError:
        raise EventError(f"runner printed JSON nested too deeply: {line[:80]!r}…") from None
    except EventError as exc:
        raise EventError(f"{exc}: {line[:200]!r}") from None
    except ValueError:
        raise EventError(f"runner printed a line that is not JSON: {line[:200]!r}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise EventError(f"runner printed JSON that is not an event: {line[:200]!r}")
    return obj


def clean(ev: dict) -> tuple[dict | None, list[str]]:
    """What the add-on keeps of the event ``ev``, checked against the runner's event schema
    (``meshfacts/events.py``: :data:`.facts.schema`): None for a kind
    the schema does not declare (refused, with a note), else ``ev`` without the fields that
    fail their type, and a note for each one dropped (e.g.
    ``"memory.footprint = 'abc' is not valid; ignored"``). Undeclared fields pass untouched, as
    the protocol requires of readers. Never raises."""
    return _facts.schema.clean(ev)


def is_node(value) -> bool:
    """A cluster node as events carry it: ``{"id": str, "host": str}`` (the schema's type)."""
    return _facts.schema.NODE(value)
