"""Runner events checked where they enter the add-on. Pure Python: no bpy, no threads.

The runner's stdout is a boundary (runner/PROTOCOL.md): every line is parsed by
:func:`parse_line` and every event cleaned by :func:`clean` before :class:`state.JobState` reads
it, so a field of the wrong type (a string or NaN where bytes are expected, a number where a
list is) can never raise in the panel's ``draw`` or the headless loop. A field that fails its
check is dropped (as if the runner had not sent it — readers must already cope with missing
optional fields) and named in a note; the rest of the event is kept, so one bad figure does not
lose a ``result``.

Limits: a line longer than :data:`MAX_LINE` bytes is refused (the largest real event, a
``result`` with its summary of a nine-stage run, is about 6 kB); JSON nested deeper than
Python's recursion limit is refused, not a ``RecursionError``; numbers must be finite and at
most :data:`MAX_NUMBER` in size (a signed 64-bit counter, as ``stageload.units.MAX_SIZE``).
"""
from __future__ import annotations

import json
import math

MAX_LINE = 1 << 20  # bytes
MAX_NUMBER = 2**63 - 1
MAX_NAME = 64  # characters of a sub-step's name or its parent's (the longest real one is 10)


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


# ---------------------------------------------------------------------------- field checks
def number(x) -> bool:
    """A finite int or float (not a bool) no larger than :data:`MAX_NUMBER` in size."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    if isinstance(x, int):  # an int may be too large for a float: compare it exactly
        return abs(x) <= MAX_NUMBER
    return math.isfinite(x) and abs(x) <= MAX_NUMBER


def size(x) -> bool:
    """A byte count: a :func:`number` that is not negative."""
    return number(x) and x >= 0


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and abs(x) <= MAX_NUMBER


def _str(x) -> bool:
    return isinstance(x, str)


def _name(x) -> bool:
    """A short printable name (a stage or sub-step): at most :data:`MAX_NAME` characters."""
    return isinstance(x, str) and 0 < len(x) <= MAX_NAME and x.isprintable()


def _opt(check):
    return lambda x: x is None or check(x)


def _str_list(x) -> bool:
    return isinstance(x, list) and all(isinstance(i, str) for i in x)


def _fraction(x) -> bool:
    return number(x) and 0.0 <= x <= 1.0


def _dict(x) -> bool:
    return isinstance(x, dict)


def _thresholds(x) -> bool:
    """The guard's ``thresholds``: condition → ``{"required": bytes, "percent": number|null}``."""
    return isinstance(x, dict) and all(
        isinstance(v, dict) and size(v.get("required"))
        and (v.get("percent") is None or number(v.get("percent"))) for v in x.values())


def _peak(x) -> bool:
    return size(x) or (isinstance(x, dict) and size(x.get("bytes")))


MAX_NODE_TEXT = 255  # characters of a node's id (Ray: 56 hex digits) or host name


def node(x) -> bool:
    """A cluster node as events carry it: ``{"id": str, "host": str}``, both printable, at most
    :data:`MAX_NODE_TEXT` characters (runner/PROTOCOL.md, ``batch --cluster``)."""
    return isinstance(x, dict) and all(
        isinstance(x.get(k), str) and 0 < len(x[k]) <= MAX_NODE_TEXT and x[k].isprintable()
        for k in ("id", "host"))


_COMMON = {"v": _int, "t": number, "item": _opt(_int), "node": _opt(node)}
#: event → field → check, for every field the add-on reads (others pass untouched).
FIELDS: dict[str, dict] = {
    "hello": {"backend": _opt(_str), "output": _opt(_str), "trace": _opt(_str), "pid": _opt(_int),
              "stages": _str_list, "image": _opt(_str)},
    "guard": {"state": _str, "reason": _opt(_str), "readings": _dict,
              "thresholds": _opt(_thresholds)},
    "stage": {"stage": _str, "index": _int, "count": _int, "parent": _name},
    "progress": {"stage": _opt(_str), "fraction": _fraction},
    "load": {"model": _str, "bytes": _opt(size)},
    "reload": {"model": _str, "bytes": _opt(size)},
    "release": {"model": _str, "bytes": _opt(size)},
    "memory": {k: _opt(size) for k in ("footprint", "peak", "stage_peak", "swap", "available",
                                       "total")} | {"stage": _opt(_str),
                                                    "substep": _opt(_name)},
    "result": {"output": _str, "trace": _opt(_str), "seconds": _opt(number), "peak": _peak,
               "summary": _dict},
    "error": {"kind": _str, "message": _str, "hint": _opt(_str), "exit_code": _opt(_int)},
    "batch_item": {"index": _int, "count": _int, "image": _str, "status": _str,
                   "output": _opt(_str), "error": _opt(_dict)},
    "placed": {"item": _int, "image": _str, "node": node, "attempt": _opt(_int),
               "pid": _opt(_int)},
    "warning": {"message": _str, "source": _opt(_str)},
    "input": {"notes": _str_list},
    "stalled": {"seconds": _opt(number), "why": _str, "reason": _opt(_str), "pid": _opt(_int)},
    "resumed": {"seconds": _opt(number), "pid": _opt(_int)},
    "working_memory": {"stage": _opt(_str), "target": _str, "tool": _str, "chunk": _opt(_int),
                       "bytes_saved": size, "note": _opt(_str)},
    "batch_done": {"done": _int, "failed": _int, "skipped": _int, "count": _opt(_int),
                   "manifest": _opt(_str)},
}
#: nested dicts the add-on reads, with the checks of their fields.
NESTED = {("guard", "readings"): {k: _opt(size) for k in ("available", "total", "swap")},
          ("result", "summary"): {"peak": _peak}}


def _check(obj: dict, checks: dict, where: str, notes: list[str]) -> dict:
    out = dict(obj)
    for key, ok in checks.items():
        if key in out and not ok(out[key]):
            notes.append(f"{where}.{key} = {_short(out.pop(key))} is not valid; ignored")
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def clean(ev: dict) -> tuple[dict, list[str]]:
    """``ev`` without the fields that fail their check (:data:`FIELDS`, :data:`NESTED`), and a
    note for each field dropped (e.g. ``"memory.footprint = 'abc' is not valid; ignored"``).
    Unknown events and fields pass untouched, as the protocol requires of readers."""
    notes: list[str] = []
    kind = ev.get("event")
    out = _check(ev, _COMMON | FIELDS.get(kind, {}), str(kind), notes)
    for (event, key), checks in NESTED.items():
        if kind == event and isinstance(out.get(key), dict):
            out[key] = _check(out[key], checks, f"{kind}.{key}", notes)
    return out, notes
