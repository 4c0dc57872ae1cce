"""Event dicts and sinks: how stageload reports what it does.

An event is a plain, JSON-serialisable ``dict`` with ``"event"`` (str) and ``"t"`` (float,
``time.time()`` seconds since the epoch) plus the fields of its kind, as fixed in
``docs/ARCHITECTURE.md`` (the contract other parts read):

=========== ==================================================================================
event       fields
=========== ==================================================================================
``stage``   ``stage``, ``index`` (0-based), ``count`` (stages in the plan, or None)
``ready``   ``stage``, ``seconds`` (from ``stage`` to ``ready``), ``released_bytes``
``load``    ``model``, ``stage`` (current stage or None), ``bytes``, ``seconds``,
            ``outside_stage`` (bool); ``reload`` has the same fields
``release`` ``model``, ``stage``, ``bytes``, ``seconds``; ``reason`` (why now, what it costs)
            on a release inside a stage
``prefetch`` ``model``, ``stage``, ``for_stage``, ``bytes``, ``file_bytes``, ``seconds``,
            ``state`` (done/stopped/skipped), ``reason``, ``method`` (``stageload.prefetch``)
``working_  ``stage`` (or None), ``target``, ``tool``, ``chunk`` (or None), ``bytes_saved``
memory``    (an estimate), ``note`` (or None) (``stageload.working_memory``)
=========== ==================================================================================

Sizes are bytes (int), durations seconds (float). A *sink* is any callable taking one event
dict, e.g. ``list.append`` or a trace writer. This module imports nothing heavy (no torch).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

EventSink = Callable[[dict], None]

#: The event kinds stageload's core emits, and the fields each carries besides "event" and "t".
FIELDS: dict[str, tuple[str, ...]] = {
    "stage": ("stage", "index", "count"),
    "ready": ("stage", "seconds", "released_bytes"),
    "load": ("model", "stage", "bytes", "seconds", "outside_stage"),
    "reload": ("model", "stage", "bytes", "seconds", "outside_stage"),
    "release": ("model", "stage", "bytes", "seconds"),
    "progress": ("stage", "fraction"),
    "warning": ("message",),
    "prefetch": ("model", "stage", "for_stage", "bytes", "file_bytes", "seconds", "state",
                 "reason", "method"),
    "working_memory": ("stage", "target", "tool", "chunk", "bytes_saved", "note"),
}


def make_event(event: str, **fields: Any) -> dict:
    """Return ``{"event": event, "t": time.time(), **fields}``.

    For the kinds listed in :data:`FIELDS` every listed field must be given (extra fields are
    allowed and kept: the contract may grow, never change). Raises ``ValueError`` naming the
    missing fields otherwise.
    """
    expected = FIELDS.get(event)
    if expected is not None:
        missing = [name for name in expected if name not in fields]
        if missing:
            raise ValueError(f"event {event!r} needs the field(s) {', '.join(missing)}")
    return {"event": event, "t": time.time(), **fields}


def fan_out(*sinks: Optional[EventSink]) -> EventSink:
    """Return one sink that passes each event to every given sink in order (None is skipped).

    Each sink gets the same dict object; a sink that raises stops the others for that event
    (errors are not swallowed, so a broken trace writer is noticed).
    """
    active = [sink for sink in sinks if sink is not None]

    def sink(event: dict) -> None:
        for each in active:
            each(event)

    return sink


def emit(sink: Optional[EventSink], event: str, **fields: Any) -> Optional[dict]:
    """Build an event with :func:`make_event` and pass it to ``sink``; no-op when sink is None.

    Returns the event dict (or None when there is no sink).
    """
    if sink is None:
        return None
    record = make_event(event, **fields)
    sink(record)
    return record
