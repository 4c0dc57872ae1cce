"""The runner's event stream (``runner/PROTOCOL.md`` defines it): NDJSON on stdout, one object a
line, each with ``"v"``, ``"event"`` and ``"t"``.

``Emitter`` is the only writer of the supervisor's stdout. It serialises lines from several
threads (event relay, sampler, main) with a lock and flushes each line, so a reader never sees
half an object. A closed stdout (the reader went away: ``BrokenPipeError``) is reported once to
``on_broken`` — the supervisor treats it as a cancel — and later lines are dropped.
"""
from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from typing import Callable, TextIO

# Every event is made by the schema's one constructor (``meshfacts.events.make``), which checks it
# against its declaration when the schema is strict (the tests); the version lives there too.
from meshfacts.events import PROTOCOL_VERSION, check, make, strict


def relay(stageload_event: dict) -> dict:
    """A stageload event (dict with ``event`` and ``t``) as a protocol object: the same dict
    with ``"v"`` added in front; the input is not modified. stageload cannot import the
    runner's schema (it sits below the runner), so its events are checked here, when the
    schema is strict (``meshfacts.events.check``: raises ``SchemaError``)."""
    out = {"v": PROTOCOL_VERSION}
    out.update(stageload_event)
    out.setdefault("t", time.time())
    return check(out) if strict() else out


def dumps(obj: dict) -> str:
    """One line of NDJSON (no newline): compact, UTF-8 characters kept (``ensure_ascii=False``),
    non-JSON values (paths, numpy scalars) turned into strings rather than failing."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_default)


def encode_line(obj: dict, line: str | None = None) -> bytes:
    """The UTF-8 bytes of one protocol line. Paths that came in through ``argv`` under a
    non-UTF-8 locale hold lone surrogates (Python's ``surrogateescape``): they are turned back
    into their original bytes when those are valid UTF-8, else written as ``\\udcXX`` JSON
    escapes (pure ASCII), so the line is always valid UTF-8 JSON."""
    line = dumps(obj) + "\n" if line is None else line
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        data = line.encode("utf-8", "surrogateescape")
        data.decode("utf-8")
        return data
    except UnicodeError:
        return (json.dumps(obj, ensure_ascii=True, separators=(",", ":"), default=_default)
                + "\n").encode("ascii")


def _default(value):
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    return str(value)


class Emitter:
    """Writes protocol objects to ``stream`` (default: the binary buffer of ``sys.stdout``,
    UTF-8), one line each, flushed.

    ``on_broken`` is called once (no arguments) when the stream is closed by the reader.
    Thread-safe.
    """

    def __init__(self, stream: TextIO | None = None,
                 on_broken: Callable[[], None] | None = None):
        # Bytes to stdout's buffer: the protocol is UTF-8 whatever the locale says (a Latin-1
        # locale would otherwise fail on a path like "漢字.png").
        if stream is None:
            stream = getattr(sys.stdout, "buffer", sys.stdout)
        self.stream = stream
        self.on_broken = on_broken
        self.broken = False
        self.count = 0
        self._lock = threading.Lock()

    def emit(self, obj: dict) -> dict:
        """Write ``obj`` (a dict made by ``make``/``relay``) and return it. When the schema is
        strict, ``obj`` is checked again first (fields added after ``make``, such as a batch
        image's ``item``), raising ``meshfacts.events.SchemaError``."""
        if strict():
            check(obj)
        with self._lock:
            if self.broken:
                return obj
            try:
                self._write(obj)
                self.count += 1
            except (BrokenPipeError, ValueError, OSError):  # reader gone / stream closed
                self.broken = True
                callback = self.on_broken
            else:
                callback = None
        if callback is not None:
            callback()
        return obj

    def _write(self, obj: dict) -> None:
        """Write ``obj``'s line and flush (under the lock); ``runner.commands.console.Console``
        writes a person's lines here instead."""
        line = dumps(obj) + "\n"
        if isinstance(self.stream, io.TextIOBase):
            self.stream.write(line)
        else:
            self.stream.write(encode_line(obj, line))
        self.stream.flush()

    def event(self, name: str, **fields) -> dict:
        """``emit(make(name, **fields))``."""
        return self.emit(make(name, **fields))

    def __call__(self, obj: dict) -> None:
        """Use as a stageload sink: relays the event with ``"v"`` added."""
        self.emit(relay(obj) if "v" not in obj else obj)


def early_failure(err, mode: str, emitter: Emitter | None = None) -> int:
    """Report a failure found before any job exists (a bad command line, a missing dependency):
    a ``hello`` without a job (``backend``, ``image``, ``output``, ``trace`` null, ``stages``
    ``[]``; not for ``check``, whose answer is one line) and then ``error`` on stdout, the
    ``runner: KIND: message — hint`` line on stderr in between. ``err`` is a
    ``meshfacts.errors.RunnerError``; ``mode`` is ``single``, ``batch`` or ``check``. Returns
    ``err.exit_code``. Standard library only, so ``runner.__main__`` can use it before it has
    checked the third-party dependencies. ``emitter``: where the events go (default: an
    ``Emitter`` on stdout)."""
    from . import __version__

    emitter = emitter or Emitter()
    if mode != "check":  # check's answer is always one line: check or error (PROTOCOL.md)
        emitter.emit(make("hello", runner=__version__, pid=os.getpid(), mode=mode, backend=None,
                          image=None, output=None, trace=None, stages=[], python=sys.executable))
    from meshfacts.errors import explain

    explain(err.fields())
    emitter.emit(make("error", **err.fields()))
    return err.exit_code
