"""``MemoryTracker``: the supervisor's live view of a job's memory, turned into ``memory``
events (runner/PROTOCOL.md) from the samples of the job's process tree and the stage events.
"""
from __future__ import annotations

import threading
import time

MEMORY_INTERVAL = 0.25
"""Seconds between ``memory`` events on the protocol stream (at most 4 per second)."""


class MemoryTracker:
    """Turns samples and stage events into ``memory`` events.

    ``level`` of a sample = max(footprint, hwm) — ``hwm`` is the kernel high-water mark since
    the previous sample, so a spike between two samples still counts. ``peak`` = max level of
    the run (bytes); ``stage_peak`` = max level since the current stage's ``ready`` event
    (SPEC §2.1: the window begins at ``ready``), None before it. ``interval``: seconds between
    two ``memory`` events. Thread-safe.
    """

    def __init__(self, interval: float = MEMORY_INTERVAL):
        self.interval = interval
        self.peak: int | None = None
        self.stage: str | None = None
        self.stage_peak: int | None = None
        self._window_open = False
        self._last_emit = float("-inf")
        self._lock = threading.Lock()

    def on_event(self, ev: dict) -> None:
        """Follow ``stage`` / ``ready`` events (other events are ignored)."""
        with self._lock:
            if ev.get("event") == "stage":
                self.stage = ev.get("stage")
                self.stage_peak = None
                self._window_open = False
            elif ev.get("event") == "ready" and ev.get("stage") == self.stage:
                self._window_open = True
                self.stage_peak = None

    def on_sample(self, sample: dict, force: bool = False) -> dict | None:
        """Account one meter ``sample`` dict; return the fields of a ``memory`` event
        (``footprint``, ``peak``, ``stage``, ``stage_peak``, ``swap``, ``available``,
        ``total``, ``pressure``) when one is due (``force``: now, whatever the interval)."""
        footprint = sample.get("footprint")
        level = max(v for v in (footprint, sample.get("hwm"), 0) if v is not None)
        with self._lock:
            self.peak = level if self.peak is None else max(self.peak, level)
            if self._window_open:
                self.stage_peak = level if self.stage_peak is None else max(self.stage_peak, level)
            now = time.monotonic()
            if not force and now - self._last_emit < self.interval:
                return None
            self._last_emit = now
            return {"footprint": footprint, "peak": self.peak, "stage": self.stage,
                    "stage_peak": self.stage_peak, "swap": sample.get("swap"),
                    "available": sample.get("available"), "total": sample.get("total"),
                    "pressure": sample.get("pressure")}
