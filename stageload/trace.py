"""JSONL traces: a writer that is an event sink (one line per event, flushed per line) and a
reader that tolerates a truncated last line.

Format: docs/ARCHITECTURE.md "Trace" (field names), docs/meter.md (full description).

Why by hand and not a JSONL library: the one property that matters — each line reaches the
kernel in a single ``write(2)`` on an ``O_APPEND`` descriptor, so a SIGKILLed writer leaves only
whole lines (at most a torn last line if it dies inside that one call) — is a few lines of
``os.write``; a buffered file object would split long lines across writes.
"""
from __future__ import annotations

import gzip
import heapq
import json
import math
import os
import stat
import threading
import zlib
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

#: The longest trace line read (bytes). Real lines are well under 64 KiB (the runner's ``result``
#: event with its summary is the longest); a longer one means the file is not a trace, and
#: reading it whole would put an arbitrary amount in memory.
MAX_LINE = 8 * 1024 * 1024

#: Numeric fields checked where a trace is read. Sizes (and a stage's ``index``/``count``): a
#: number 0 <= v < 2**63 (what a signed 64-bit counter holds). Seconds: a duration,
#: 0 <= v < 10**9. Times: ``time.time()`` or seconds from a start, 0 <= v < 10**12. A value that
#: is none of these (a string, a bool, NaN, 1e400 = infinity, negative) is dropped from its
#: event and counted (``skipped``).
SIZE_FIELDS = ("footprint", "hwm", "swap", "available", "total", "bytes", "file_bytes",
               "released_bytes",
               "peak", "current", "allocated", "index", "count")
SECONDS_FIELDS = ("seconds",)
TIME_FIELDS = ("hwm_since",)


def _usable(value, kind: str) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if kind == "size":
        return 0 <= value < 2**63
    if kind == "seconds":
        return 0 <= value < 1e9
    return 0 <= value < 1e12


def _check_fields(event: dict) -> tuple[dict, list[str]]:
    """``(event, dropped)``: ``event`` itself when every numeric field is usable, else a copy
    with the unusable ones set to None (a caller's dict is never changed); ``dropped`` says
    which (``["footprint=\"abc\""]``)."""
    dropped = []
    for kind, names in (("size", SIZE_FIELDS), ("seconds", SECONDS_FIELDS), ("time", TIME_FIELDS)):
        for name in names:
            value = event.get(name)
            if value is not None and not _usable(value, kind):
                if not dropped:
                    event = dict(event)
                dropped.append(f"{name}={_shown(value)}")
                event[name] = None
    return event, dropped


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (int, float, str, bool)) else type(value).__name__
    return text if len(text) <= 24 else text[:21] + "..."


class TraceReader:
    """Streams the events of a trace: ``for event in TraceReader(lines): ...``, memory bounded.

    ``lines``: trace lines (``bytes``/``str`` JSONL, e.g. :func:`iter_lines`) or event dicts,
    in file order. Yields event dicts:

    - parsed as :func:`parse_lines` does (blank lines skipped; a last line that is not JSON is
      dropped and sets ``truncated``; any other bad line raises :class:`TraceError` naming it);
    - validated: an event whose ``t`` is not a usable time is skipped; a numeric field in
      :data:`SIZE_FIELDS` / :data:`SECONDS_FIELDS` / :data:`TIME_FIELDS` that is not usable
      (string, bool, NaN, infinity, negative, absurdly large) is set to None. Both are counted:
      ``skipped`` (int) and ``first_skipped`` (``"line 12: footprint=\"abc\""`` or None);
    - in time order: several writers append to one trace (the worker its events, the
      supervisor its samples), so neighbouring lines can be slightly out of order; a buffer of
      ``reorder`` events (default 4096) puts them in order. An event further out of place than
      that comes in file order.

    After iteration: ``lines`` (lines read), ``truncated``, ``skipped``, ``first_skipped``.
    A reader is iterated once.
    """

    def __init__(self, lines: Iterable[str | bytes | dict], source: str = "trace",
                 reorder: int = 4096):
        self._lines = lines
        self.source = source
        self.reorder = max(1, reorder)
        self.lines = 0
        self.truncated = False
        self.skipped = 0
        self.first_skipped: str | None = None

    def __iter__(self) -> Iterator[dict]:
        heap: list[tuple[float, int, dict]] = []
        for number, event in self._parsed():
            t = event.get("t")
            if not _usable(t, "time"):
                self._skip(number, f"t={_shown(t)}" if "t" in event else "no t")
                continue
            event, dropped = _check_fields(event)
            for text in dropped:
                self._skip(number, text)
            heapq.heappush(heap, (float(t), number, event))
            if len(heap) > self.reorder:
                yield heapq.heappop(heap)[2]
        while heap:
            yield heapq.heappop(heap)[2]

    def _skip(self, number: int, what: str) -> None:
        self.skipped += 1
        if self.first_skipped is None:
            self.first_skipped = f"line {number}: {what}"

    def _parsed(self) -> Iterator[tuple[int, dict]]:
        bad: tuple[int, str] | None = None
        line_text = ""  # the text of the bad line, when it was not JSON at all
        seen = False
        for number, line in enumerate(self._lines, 1):
            self.lines = number
            if isinstance(line, dict):
                item = line
            else:
                if isinstance(line, bytes):
                    line = line.decode("utf-8", errors="replace")
                if not line.strip():
                    continue
                if bad is not None:
                    raise self._not_a_trace(bad)
                try:
                    item = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    bad, line_text = (number, str(exc) if not isinstance(exc, RecursionError)
                                      else "nested too deeply"), line[:64]
                    continue
                if not isinstance(item, dict):
                    bad = (number, f"a JSON {_JSON_KIND.get(type(item), type(item).__name__)}")
                    continue
                if "event" not in item:
                    bad = (number, "no \"event\" field")
                    continue
            if bad is not None:
                raise self._not_a_trace(bad)
            seen = True
            yield number, item
        if bad is not None and not seen:
            # the only line is bad: a one-line text file, ``[1, 2, 3]``, or a writer killed
            # inside its very first write. Say which line and why rather than "no events".
            if line_text.lstrip().startswith('{"event"'):
                raise TraceError(f"{self.source}: line {bad[0]}, the only one, is cut short "
                                 f"({bad[1]}); the writer stopped during its first event: the "
                                 "trace has no events")
            raise self._not_a_trace(bad)
        self.truncated = bad is not None

    def _not_a_trace(self, bad: tuple[int, str]) -> TraceError:
        return TraceError(f"{self.source}: line {bad[0]} is not a JSON object ({bad[1]}); "
                          "is this a stageload trace?")


def parse_lines(lines: Iterable[str | bytes | dict],
                source: str = "trace") -> tuple[list[dict], bool]:
    """All events of ``lines`` as a list, in time order and validated (see
    :class:`TraceReader`, which streams the same without holding them): ``(events,
    truncated)``. Raises :class:`TraceError` as :class:`TraceReader` does."""
    reader = TraceReader(lines, source)
    events = list(reader)
    return events, reader.truncated


def iter_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The raw lines of the trace file at ``path``, read as they are used (memory bounded).

    A gzip-compressed trace (``run.jsonl.gz``, as the benchmarks keep theirs, or any trace a
    user compressed) is read the same way, decompressed as it streams: it is recognised by the
    gzip magic bytes ``1f 8b`` (RFC 1952 §2.3.1), not by its name. A compressed stream cut short
    ends the lines where the data ends (its last line then counts as torn, as for a plain trace
    cut by a kill); data that is not a valid gzip stream raises :class:`TraceError`.

    Raises :class:`TraceError` when ``path`` is missing, a directory, or not a regular file (a
    FIFO, a device, a socket: such a file may never end, or block until someone writes), or a
    line is longer than :data:`MAX_LINE`. ``OSError`` (permission denied, I/O error) passes
    through. Opened with ``O_NONBLOCK`` and checked with ``fstat`` before anything is read, so
    opening a FIFO with no writer does not hang.
    """
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise TraceError(f"trace {p} not found") from None
    except IsADirectoryError:
        raise TraceError(f"{p} is a directory, not a trace file") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise TraceError(f"{p} is a directory, not a trace file")
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise TraceError(f"{p} is {kind}, not a trace file; give the .jsonl file a run wrote "
                         "(copy a stream to a file first)")
    with open(fd, "rb") as raw:
        if raw.peek(2)[:2] == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield from _gzip_lines(f, p)
        else:
            yield from _lines(raw, p)


#: The first two bytes of every gzip member (RFC 1952 §2.3.1).
GZIP_MAGIC = b"\x1f\x8b"


def _lines(f, p: Path) -> Iterator[bytes]:
    number = 0
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE:
            raise TraceError(f"{p}: line {number} is longer than {MAX_LINE // 2**20} MiB; "
                             "is this a stageload trace?")
        yield line


#: What :func:`iter_lines` yields in place of the rest of a compressed trace that was cut short:
#: not JSON, so :class:`TraceReader` counts it as a torn last line (``truncated``) and the
#: summary says the trace was cut, as it does for a plain trace cut by a kill.
GZIP_CUT_LINE = b"(the compressed trace ends here: its gzip stream was cut short)\n"


def _gzip_lines(f: gzip.GzipFile, p: Path) -> Iterator[bytes]:
    """The lines of a gzip stream; a stream cut short (``EOFError`` from :mod:`gzip`, which
    drops the partial line it had buffered) ends with :data:`GZIP_CUT_LINE`; bad data is a
    :class:`TraceError`."""
    try:
        yield from _lines(f, p)
    except EOFError:
        yield GZIP_CUT_LINE
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{p} starts like a gzip file but its data is damaged ({exc}); "
                         "give the trace a run wrote, or decompress it with gzip -d to see "
                         "how much can be read") from None


def compress_trace(path: str | os.PathLike, *, level: int = 9) -> Path:
    """Compress the finished trace at ``path`` to ``path + ".gz"`` and remove ``path``; returns
    the new path. Every reader here (:func:`iter_lines`, so ``stageload summary`` and ``plot``)
    reads the result directly. JSONL traces compress about 10:1 (their keys repeat on every
    line), which is why the benchmarks keep theirs this way.

    The compressed file is written under a temporary name and renamed, so a crash leaves the
    original whole. Raises ``FileExistsError`` when ``path + ".gz"`` exists (never replaced),
    :class:`TraceError` when ``path`` is missing or not a regular file; ``OSError`` passes
    through."""
    src = Path(path)
    if not src.is_file():
        raise TraceError(f"trace {src} not found (or not a regular file)")
    dst = src.with_name(src.name + ".gz")
    if dst.exists():
        raise FileExistsError(f"{dst} already exists; remove it first to compress {src} again")
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        with open(src, "rb") as fin, open(tmp, "xb") as fout, \
                gzip.GzipFile(filename="", mode="wb", fileobj=fout, compresslevel=level,
                              mtime=0) as gz:
            while chunk := fin.read(1 << 20):
                gz.write(chunk)
        os.link(tmp, dst)  # fails, never replaces, when dst appeared meanwhile
    finally:
        tmp.unlink(missing_ok=True)
    src.unlink()
    return dst


def read_trace(path: str | os.PathLike) -> list[dict]:
    """All events of the trace at ``path`` (see ``parse_lines``); a torn last line is dropped.
    Raises ``TraceError`` (missing file, not a trace)."""
    events, _ = parse_lines(iter_lines(path), source=str(path))
    return events


def peak_from_trace(path: str | os.PathLike) -> int:
    """Peak footprint in bytes of an earlier run: the largest ``footprint`` or ``hwm`` of the
    ``sample`` events of the trace at ``path`` (streamed; junk values skipped, see
    :class:`TraceReader`). Every ``hwm`` counts, placeable in time or not: this is a prediction
    of what the run will need (``--need-from``), where too much is safer than too little.

    Raises :class:`TraceError` when the file is missing, not a regular file or not a trace, or
    holds no sample with a size; ``OSError`` when it cannot be read.
    """
    peak = None
    reader = TraceReader(iter_lines(path), source=str(path), reorder=1)
    for event in reader:
        if event.get("event") != "sample":
            continue
        for key in ("footprint", "hwm"):
            value = event.get(key)
            if value is not None:
                peak = value if peak is None else max(peak, value)
    if peak is None:
        raise TraceError(f"{path} has no 'sample' events with a footprint; is it a stageload "
                         "trace?")
    return int(peak)
