"""``Sampler``: watch a process tree from a thread of the watching process, one ``sample`` dict
per tick (format: docs/ARCHITECTURE.md "Trace", extended in docs/meter.md)."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

from ..events import make_event
from . import _platform
from ._common import descendants, tree_footprint

Sink = Callable[[dict], None]


class Sampler:
    """Samples the memory of process ``pid`` (and its descendants) every ``interval`` seconds.

    Runs in a daemon thread of the *calling* process, so the watched process's own interpreter
    (a GIL held by native code, a stuck thread) cannot delay or hide a sample. Each tick calls
    ``sink`` with one dict::

        {"event": "sample", "t": <time.time(), s>, "pid": pid,
         "footprint": <bytes, process tree>, "hwm": <bytes or None, root process>,
         "hwm_since": <time.time() of the reset that started this mark, or None>,
         "available": <bytes|None>, "total": <bytes|None>, "swap": <bytes|None>,
         "pressure": <1|2|4|None>}

    High-water mark: when ``reset_hwm`` (default) and the platform allows it (Linux
    ``clear_refs``; macOS ``proc_reset_footprint_interval``; our own processes), the kernel
    mark is reset right after each read, so every sample's ``hwm`` is the peak of the root
    process between the previous sample and this one (``hwm_since`` says from when). This is
    how a spike shorter than ``interval`` still shows. Where it cannot be reset (a macOS
    without the interval call: ``ri_lifetime_max_phys_footprint``; a foreign process),
    ``hwm_since`` is ``None`` and ``hwm`` is a lifetime peak; ``note`` then says why when the
    reader knows (set by ``start()``, else None).

    Arguments: ``pid`` (int), ``sink`` (callable taking one dict), ``interval`` (seconds between
    samples, > 0; 0.1 = 10 Hz), ``tree`` (include descendants), ``reset_hwm`` (see above),
    ``tree_refresh`` (seconds between scans for new descendants; default 1.0). Finding descendants
    means reading every process on the machine (psutil), which at 10 Hz was most of the sampler's
    CPU time (python -m bench.sampler_overhead); between scans the known descendants are read
    directly, so a child started less than ``tree_refresh`` ago is not counted yet.
    ``tree_refresh=0`` scans on every sample.

    The thread ends by itself when the root process is gone (``exited`` becomes True) or when
    the sink raises (the exception is kept in ``error``, nothing is re-raised in the thread).
    ``start()`` returns self; ``stop()`` ends the thread and (``final=True``) takes one last
    sample if the process is still there. Also a context manager. ``sample_now()`` takes a sample
    at once from the caller's thread (serialised with the thread's own samples).

    Raises ``ValueError`` for a non-positive ``interval``.
    """

    def __init__(self, pid: int, sink: Sink, interval: float = 0.1, *, tree: bool = True,
                 reset_hwm: bool = True, tree_refresh: float = 1.0):
        if not interval or interval <= 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        self.pid = int(pid)
        self.sink = sink
        self.interval = float(interval)
        self.tree = tree
        self.reset_hwm = reset_hwm
        self.exited = False
        self.error: BaseException | None = None
        self.last: dict | None = None
        self.note: str | None = None
        self.count = 0
        self._reader = _platform.load_reader()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hwm_since: float | None = None
        self._stopped = False
        self.tree_refresh = float(tree_refresh)
        self._below: list[int] | None = None
        self._below_at = 0.0

    # -- one sample ---------------------------------------------------------------------------
    def _read(self) -> dict:
        reader = self._reader
        t = time.time()
        if self.tree:
            now = time.monotonic()
            if self._below is None or now - self._below_at >= self.tree_refresh:
                self._below, self._below_at = descendants(self.pid), now
        # ProcessLookupError when the root is gone
        fp = tree_footprint(self.pid, reader.process_footprint, self.tree, self._below)
        hwm = reader.high_water_mark(self.pid)
        since = self._hwm_since
        if self.reset_hwm:
            reset_at = time.time()
            self._hwm_since = reset_at if reader.reset_high_water_mark(self.pid) else None
        sysmem = reader.system_memory()
        return make_event("sample", t=t, pid=self.pid, footprint=fp, hwm=hwm,
                          hwm_since=since if hwm is not None else None,
                          available=sysmem.available, total=sysmem.total,
                          swap=sysmem.swap_used, pressure=sysmem.pressure)

    def sample_now(self) -> dict | None:
        """Take one sample now, send it to the sink and return it; ``None`` if the process is
        gone. Exceptions from the sink propagate to the caller."""
        with self._lock:
            if self.exited:
                return None
            try:
                sample = self._read()
            except (ProcessLookupError, PermissionError):
                self.exited = True
                return None
            self.last = sample
            self.count += 1
            self.sink(sample)
            return sample

    @contextlib.contextmanager
    def between_samples(self):
        """A block during which no sample is taken: one already begun (its ``t`` read) has
        reached the sink before the block starts, the next waits until it ends. For a watcher
        that places its own events among the samples by ``t``: inside the block, every sample
        stamped before it has been delivered. Not from the sink (the lock is not re-entrant)."""
        with self._lock:
            yield

    def _prime(self) -> None:
        """Reset the mark before the first sample so the first ``hwm`` covers only this run."""
        if self.reset_hwm and self._reader.reset_high_water_mark(self.pid):
            self._hwm_since = time.time()

    # -- thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                if self.sample_now() is None:
                    return
            except BaseException as exc:  # a broken sink ends sampling, kept for the owner
                self.error = exc
                return
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (machine busy): skip missed ticks, no burst
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def start(self) -> "Sampler":
        """Start the sampling thread (first sample at once); returns self. Raises
        ``RuntimeError`` if already started."""
        if self._thread is not None:
            raise RuntimeError("Sampler already started; make a new one to sample again")
        self._prime()
        self.note = getattr(self._reader, "hwm_note", lambda: None)()
        self._thread = threading.Thread(target=self._run, name=f"stageload-sampler-{self.pid}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, final: bool = True) -> None:
        """Stop the thread (waits for it); with ``final`` take one last sample if the process
        is still there and the sink has not failed. Safe to call twice."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if final and not self._stopped and self.error is None and self._thread is not None:
            try:
                self.sample_now()
            except Exception as exc:
                self.error = exc
        self._stopped = True

    @property
    def running(self) -> bool:
        """True while the sampling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
