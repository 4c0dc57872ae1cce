"""Read the next stage's model files ahead into the operating system's file cache.

OnnxStream (source 001) separates its engine from a ``WeightsProvider`` and has a
``DiskPrefetch`` one that reads weights ahead on a worker thread within a memory budget. Here
the reading goes into the OS's file cache, not into buffers of our own: clean file-backed
pages are not in the process's footprint (macOS ``phys_footprint``, Linux anonymous RSS) and
the OS drops them first under pressure, so a prefetch costs no footprint; the stage's load
then reads from memory instead of the disk. :class:`Prefetcher` never holds a tensor: it
opens each file, asks for its bytes, closes it. It imports nothing heavy (no torch).

How the bytes are asked for (``method``):

- ``"read"`` (the default everywhere): plain sequential ``readinto`` calls into one reused
  ``READ_BUFFER`` (1 MiB) buffer. A ``read()`` certainly fills the page cache (Linux) or the
  unified buffer cache (macOS), its seconds are the real read time, and the same code runs on
  both. Its cost, one copy of each byte into a 1 MiB buffer, is small next to the read
  (measured here: 0.05-0.3 s per GiB from the cache, on this project's 2-core Linux VM).
- ``"advise"`` (Linux only, opt-in): ``os.posix_fadvise(fd, offset, CHUNK,
  POSIX_FADV_WILLNEED)`` per chunk: the kernel is asked to start reading the range and the
  call returns. It was the Linux default until measured: on this project's machine (Linux
  6.18 in a VM) it left 25.0 % of a 1 GiB file resident, still 3-60 s later (``fincore``);
  one whole-file call left 0.8 %. That is 8 MiB per call: Linux's ``force_page_cache_ra``
  (mm/readahead.c) reads at most ``max(io_pages, ra_pages)`` pages per WILLNEED call, and
  this disk's read-ahead window (``/sys/block/vda/queue/read_ahead_kb``) is 8192 KiB. The
  window is per device and settable, so an advise-only prefetch reads an unknown part of
  each file (``bench/pixal3d/loadspeed.py`` records each method's residency in one run).

On macOS ``fcntl`` ``F_RDADVISE`` was not chosen: Python's ``fcntl`` has neither the constant
nor ``struct radvisory``, its ``ra_count`` is an ``int`` (under 2 GiB per call), and how much
of the range it reads before returning is not documented. Not run on macOS here.

Memory: before every chunk the reader reads the machine's available memory
(``stageload.meter.system_memory``) and goes on only while it is at least ``floor`` (the
guard's kill threshold, bytes; default 10 % of total memory, the guard's ``--kill-free``
default, SPEC §2.3) plus the bytes of this model's files not read ahead yet. Below that, or
when available memory is unknown, the model is ``skipped`` (nothing asked yet) or ``stopped``
(part asked), with the figures in ``reason``; the next model is still tried.

Stopping: :meth:`Prefetcher.stop` sets a flag the reader checks before every chunk, then joins
the thread; so it returns after at most one chunk's call (``CHUNK`` = 32 MiB). Every
:meth:`start` stops the previous reading first; no thread outlives :meth:`stop`.

Events (one ``prefetch`` per model asked for, also for those a stop came before: ``skipped``
with the stop's reason; from the reader's thread: the sink must be thread-safe;
``StagedModels`` serialises its own): ``model``, ``stage`` (the stage during which it ran),
``for_stage`` (the stage that needs it), ``bytes`` (bytes read ahead), ``file_bytes`` (its
files' size), ``seconds``, ``state`` (``"done"``, ``"stopped"`` or ``"skipped"``), ``reason``
(None when done), ``method``.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

from .events import EventSink, emit

#: Bytes asked for per call; the stop flag and the memory are checked between calls.
CHUNK = 32 << 20
#: Size of the one buffer the ``"read"`` method reads into (bytes).
READ_BUFFER = 1 << 20
#: Default floor as a fraction of total memory (the guard's ``--kill-free`` default, SPEC §2.3).
DEFAULT_FLOOR_FRACTION = 0.10
METHODS = ("advise", "read")

Available = Callable[[], Optional[int]]


def default_method() -> str:
    """``"read"``: the method that certainly fills the cache (module docstring: ``"advise"``
    was measured to leave most of a large file unread on Linux)."""
    return "read"


def _available() -> Optional[int]:
    from .meter import system_memory
    return system_memory().available


def default_floor() -> int:
    """10 % of total memory (bytes), 0 when total memory is unknown."""
    from .meter import system_memory
    total = system_memory().total
    return int(total * DEFAULT_FLOOR_FRACTION) if total else 0


class _Stopped(Exception):
    pass


class Prefetcher:
    """A background reader of model files (module docstring).

    Args:
        events: sink for ``prefetch`` events (called from the reader's thread), or None.
        floor: bytes of available memory to leave (the guard's kill threshold); None: 10 % of
            total memory.
        method: ``"advise"`` or ``"read"``; None: :func:`default_method`.
        available: zero-argument callable giving available memory in bytes (None = unknown);
            default ``stageload.meter.system_memory().available``.
        chunk: bytes per call (default ``CHUNK``).

    Raises ``ValueError`` for an unknown method, a negative floor or a chunk under 1 byte.
    """

    def __init__(self, events: Optional[EventSink] = None, *, floor: Optional[int] = None,
                 method: Optional[str] = None, available: Optional[Available] = None,
                 chunk: int = CHUNK):
        method = method or default_method()
        if method not in METHODS:
            raise ValueError(f"prefetch method must be one of {', '.join(METHODS)}, got {method!r}")
        if method == "advise" and not hasattr(os, "posix_fadvise"):
            raise ValueError("prefetch method 'advise' needs os.posix_fadvise (Linux); use 'read'")
        if floor is not None and floor < 0:
            raise ValueError(f"prefetch floor is bytes >= 0, got {floor}")
        if chunk < 1:
            raise ValueError(f"prefetch chunk is bytes >= 1, got {chunk}")
        self.events = events
        self.floor = default_floor() if floor is None else int(floor)
        self.method = method
        self.available = available or _available
        self.chunk = int(chunk)
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._reason = "stopped"
        self._done: set[str] = set()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """True while a reader thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, stage: Optional[str], for_stage: str,
              models: Sequence[tuple[str, Sequence[os.PathLike | str]]]) -> None:
        """Stop any reading in progress, then read ahead ``models`` ((name, files) pairs, in
        order) on a new thread. ``stage``/``for_stage`` go into the events. No models: no
        thread."""
        self.stop("superseded")
        models = [(name, [Path(f) for f in files]) for name, files in models]
        if not models:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stageload-prefetch", daemon=True,
                                        args=(stage, for_stage, models, self._stop))
        self._thread.start()

    def stop(self, reason: str = "stopped") -> None:
        """Stop the reading in progress (its model's event says ``stopped`` with ``reason``) and
        wait for the thread to end. No-op when nothing runs."""
        thread = self._thread
        if thread is None:
            return
        self._reason = reason
        self._stop.set()
        thread.join()
        self._thread = None

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the reading in progress ends by itself; True when no thread is left."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    def take(self, name: str) -> bool:
        """True when ``name``'s files were read ahead completely since it was last taken."""
        with self._lock:
            if name in self._done:
                self._done.discard(name)
                return True
            return False

    # ------------------------------------------------------------------ the reader thread
    def _run(self, stage, for_stage, models, stop: threading.Event) -> None:
        for name, files in models:
            start = time.perf_counter()
            fields = dict(model=name, stage=stage, for_stage=for_stage, method=self.method)
            try:
                size = sum(f.stat().st_size for f in files)
            except OSError as exc:
                self._event(fields, 0, 0, start, "skipped", f"cannot read its files: {exc}")
                continue
            if stop.is_set():  # every model gets its event, also those never started
                self._event(fields, 0, size, start, "skipped", self._reason)
                continue
            asked = [0]  # bytes asked so far, updated chunk by chunk
            try:
                for path in files:
                    self._read_ahead(path, size, asked, stop)
            except _Stopped as why:
                state = "skipped" if asked[0] == 0 else "stopped"
                self._event(fields, asked[0], size, start, state, str(why))
                continue
            except OSError as exc:
                why = f"{type(exc).__name__}: {exc}"
                self._event(fields, asked[0], size, start, "stopped", why)
                continue
            with self._lock:
                self._done.add(name)
            self._event(fields, asked[0], size, start, "done", None)

    def _read_ahead(self, path: Path, size: int, asked: list, stop: threading.Event) -> None:
        """Ask for every byte of ``path``, adding each chunk to ``asked[0]`` (``size``: the
        model's bytes in all). Raises ``_Stopped``."""
        buffer = None
        if self.method == "read":
            buffer = memoryview(bytearray(min(READ_BUFFER, self.chunk)))
        with open(path, "rb", buffering=0) as f:
            end, done = os.fstat(f.fileno()).st_size, 0
            while done < end:
                self._check(stop, size - asked[0])
                n = min(self.chunk, end - done)
                if buffer is None:
                    os.posix_fadvise(f.fileno(), done, n, os.POSIX_FADV_WILLNEED)
                else:
                    n = _read_chunk(f, buffer, n)
                    if n == 0:
                        break
                done += n
                asked[0] += n

    def _check(self, stop: threading.Event, remaining: int) -> None:
        if stop.is_set():
            raise _Stopped(self._reason)
        available = self.available()
        if available is None:
            raise _Stopped("available memory is unknown")
        if available < self.floor + remaining:
            raise _Stopped(f"available memory {available} bytes < floor {self.floor} + "
                           f"{remaining} bytes still to read")

    def _event(self, fields: dict, done: int, size: int, start: float, state: str,
               reason: Optional[str]) -> None:
        emit(self.events, "prefetch", **fields, bytes=done, file_bytes=size,
             seconds=time.perf_counter() - start, state=state, reason=reason)


def _read_chunk(f, buffer: memoryview, n: int) -> int:
    """Read up to ``n`` bytes of ``f`` through ``buffer``; returns the bytes read."""
    got = 0
    while got < n:
        k = f.readinto(buffer[:min(len(buffer), n - got)])
        if not k:
            break
        got += k
    return got
