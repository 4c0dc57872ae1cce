"""JSONL traces: a writer that is an event sink (one line per event, flushed per line) and a
reader that tolerates a truncated last line.

Format: docs/ARCHITECTURE.md "Trace" (field names), docs/meter.md (full description).

Why by hand and not a JSONL library: the one property that matters — each line reaches the
kernel in a single ``write(2)`` on an ``O_APPEND`` descriptor, so a SIGKILLed writer leaves only
whole lines (at most a torn last line if it dies inside that one call) — is a few lines of
``os.write``; a buffered file object would split long lines across writes.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Iterable, Iterator


class TraceError(ValueError):
    """A trace cannot be read: not found, empty, or a line in the middle is not JSON."""


def _fallback(value):
    """JSON for values json cannot write: numpy / torch scalars, paths, anything else as str."""
    if hasattr(value, "__index__"):
        return int(value)
    if hasattr(value, "__float__"):
        return float(value)
    return str(value)


def encode_line(event: dict) -> bytes:
    """One trace line (UTF-8 bytes ending in ``\\n``) for ``event`` (a dict). Non-finite floats
    become ``null`` so every line stays strict JSON."""
    def clean(v):
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    text = json.dumps(clean(event), separators=(", ", ": "), default=_fallback,
                      allow_nan=False, ensure_ascii=False)
    return (text + "\n").encode("utf-8")


class TraceWriter:
    """Append events to a JSONL trace file; an ``EventSink`` (call it with a dict).

    Each call writes one whole line with a single ``os.write`` on a descriptor opened with
    ``O_APPEND`` — no user-space buffer, so the line is in the kernel (and survives SIGKILL of
    the writer) when the call returns. Not ``fsync``ed: a power loss can still lose the tail.
    Safe to call from several threads (a lock keeps lines whole and in order).

    ``path``: file to write. An existing file is never overwritten: it raises
    ``FileExistsError`` unless ``append=True`` (continue that trace). The parent directory must
    exist (``FileNotFoundError`` otherwise). ``close()`` or use as a context manager.
    """

    def __init__(self, path: str | os.PathLike, *, append: bool = False):
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        if not append:
            flags |= os.O_EXCL
        try:
            self._fd: int | None = os.open(self.path, flags, 0o644)
        except FileExistsError:
            raise FileExistsError(f"trace {self.path} already exists; choose another name, delete "
                                  "it, or open it with append=True to continue it") from None
        self._lock = threading.Lock()
        self.lines = 0

    def __call__(self, event: dict) -> None:
        """Write ``event`` as one line. Raises ``ValueError`` after ``close()``."""
        data = encode_line(event)
        with self._lock:
            if self._fd is None:
                raise ValueError(f"trace {self.path} is closed")
            view = memoryview(data)
            while view:  # a regular file takes it whole; loop only for exotic targets
                written = os.write(self._fd, view)
                view = view[written:]
            self.lines += 1

    write = __call__

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_JSON_KIND = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
              type(None): "null"}


def parse_lines(lines: Iterable[str | bytes | dict], source: str = "trace") -> tuple[list[dict], bool]:
    """Parse trace lines into event dicts; dicts pass through unchanged.

    Returns ``(events, truncated)``: ``truncated`` is True when the last non-blank line was not
    valid JSON (a writer killed inside its last write) and was dropped. Blank lines are skipped.
    Raises ``TraceError`` when a line *before* the last is not a JSON object with ``"event"`` (the
    file is not a trace or was corrupted), or when the only non-blank line is not (a one-line
    text file, ``[1, 2, 3]``), naming the line number.
    """
    events: list[dict] = []
    bad: tuple[int, str] | None = None
    line_text = ""  # the text of the bad line, when it was not JSON at all
    for number, line in enumerate(lines, 1):
        if isinstance(line, dict):
            item = line
        else:
            if isinstance(line, bytes):
                line = line.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            if bad is not None:
                raise TraceError(f"{source}: line {bad[0]} is not a JSON object ({bad[1]}); "
                                 "is this a stageload trace?")
            try:
                item = json.loads(line)
            except ValueError as exc:
                bad, line_text = (number, str(exc)), line
                continue
            if not isinstance(item, dict):
                bad = (number, f"a JSON {_JSON_KIND.get(type(item), type(item).__name__)}")
                continue
            if "event" not in item:
                bad = (number, "no \"event\" field")
                continue
        if bad is not None:
            raise TraceError(f"{source}: line {bad[0]} is not a JSON object ({bad[1]}); "
                             "is this a stageload trace?")
        events.append(item)
    if bad is not None and not events:
        # the only line is bad: a one-line text file, ``[1, 2, 3]``, or a writer killed inside
        # its very first write. Say which line and why rather than "the trace has no events".
        if line_text.lstrip().startswith('{"event"'):
            raise TraceError(f"{source}: line {bad[0]}, the only one, is cut short ({bad[1]}); "
                             "the writer stopped during its first event: the trace has no events")
        raise TraceError(f"{source}: line {bad[0]} is not a JSON object ({bad[1]}); "
                         "is this a stageload trace?")
    return events, bad is not None


def iter_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The raw lines of ``path``. Raises ``TraceError`` if it is missing or a directory."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"trace {p} not found")
    if p.is_dir():
        raise TraceError(f"{p} is a directory, not a trace file")
    with open(p, "rb") as f:
        yield from f


def read_trace(path: str | os.PathLike) -> list[dict]:
    """All events of the trace at ``path`` (see ``parse_lines``); a torn last line is dropped.
    Raises ``TraceError`` (missing file, not a trace)."""
    events, _ = parse_lines(iter_lines(path), source=str(path))
    return events
