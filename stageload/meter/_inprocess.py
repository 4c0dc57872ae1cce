"""``MemoryMeter``: an in-process context manager for library users (peak and per-phase peaks
of the calling process, sampled from a thread of that same process)."""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from ..events import make_event
from ._sampler import Sampler
from .window import window_peak


class MemoryMeter:
    """Measure the footprint of this process (and its children) while a block runs.

    ::

        with MemoryMeter() as meter:
            with meter.phase("encode"):
                ...
            with meter.phase("decode"):
                ...
        meter.peak            # bytes, whole block
        meter.phases          # {"encode": bytes, "decode": bytes}

    A ``Sampler`` thread samples this process every ``interval`` seconds (default 0.05) and the
    kernel high-water mark (reset after each sample where the platform allows: Linux) covers the
    time between samples, so a short spike still counts. Phase edges take a sample at once, so
    no sample interval crosses a phase edge. Caveat of measuring in-process: while native code
    holds the GIL the thread cannot sample; the high-water mark still sees the peak (Linux
    ``VmHWM``; macOS the interval peak, or only a lifetime mark where macOS lacks
    ``proc_reset_footprint_interval``). For other processes use ``Sampler`` from outside.

    Attributes: ``peak`` (bytes or None before any sample), ``phases`` (dict name → peak bytes,
    in the order phases ended), ``samples`` (the ``sample`` dicts), ``events`` (``stage`` /
    ``ready`` dicts, one pair per phase, in the trace format), ``sink`` (optional callable also
    given every sample and event, e.g. a ``TraceWriter``).

    Phases do not nest: ``phase()`` inside ``phase()`` raises ``RuntimeError``.
    """

    def __init__(self, interval: float = 0.05, *, tree: bool = True, sink=None):
        self.interval = interval
        self.tree = tree
        self.sink = sink
        self.samples: list[dict] = []
        self.events: list[dict] = []
        self.phases: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self._sampler: Sampler | None = None
        self._start: float | None = None
        self._end: float | None = None
        self._current: str | None = None

    def _record(self, item: dict) -> None:
        with self._lock:
            (self.samples if item.get("event") == "sample" else self.events).append(item)
        if self.sink is not None:
            self.sink(item)

    def __enter__(self) -> "MemoryMeter":
        self._sampler = Sampler(os.getpid(), self._record, self.interval, tree=self.tree)
        self._start = time.time()
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._sampler is not None:
            self._sampler.stop(final=True)
        self._end = time.time()

    def _snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.samples)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure the peak of the enclosed block under ``name`` (stored in ``phases[name]``,
        bytes). Must be used inside ``with MemoryMeter()``; raises ``RuntimeError`` otherwise or
        when nested."""
        if self._sampler is None or self._end is not None:
            raise RuntimeError("MemoryMeter.phase() must be used inside 'with MemoryMeter() as "
                               "meter:'")
        if self._current is not None:
            raise RuntimeError(f"phase {name!r} started inside phase {self._current!r}; "
                               "phases do not nest")
        self._current = name
        index = len(self.phases)
        # A sample at the edge closes the previous interval; the phase starts at that sample
        # (the mark is reset right after it, so the next mark lies wholly inside the phase).
        first = self._sampler.sample_now()
        start = first["t"] if first else time.time()
        self._record(make_event("stage", t=start, stage=name, index=index, count=None))
        self._record(make_event("ready", t=start, stage=name, seconds=0.0, released_bytes=0))
        try:
            yield
        finally:
            last = self._sampler.sample_now()
            end = (last["t"] if last else time.time()) + 1e-6
            self.phases[name] = window_peak(self._snapshot(), start, end)["peak"]
            self._current = None

    @property
    def peak(self) -> int | None:
        """Peak footprint (bytes) since the block began: sampled footprint or high-water mark,
        whichever is higher; ``None`` before the first sample."""
        if self._start is None:
            return None
        return window_peak(self._snapshot(), self._start, None)["peak"]
