"""``MemoryTracker``: the supervisor's live view of a job's memory, turned into ``memory``
events (runner/PROTOCOL.md) from the samples of the job's process tree and the stage events.
"""
from __future__ import annotations

import bisect
import copy
import threading
import time

from stageload.meter.window import StagePeaks

MEMORY_INTERVAL = 0.25
"""Seconds between ``memory`` events on the protocol stream (at most 4 per second)."""

REORDER_SECONDS = 10.0
"""How far back in time (seconds of ``t``) a sample or event may arrive and still be put in
its place. The samples come from the supervisor's own thread, the stage events through the
worker's pipe, so an event can reach the tracker after samples taken after its ``t``; the
summary reads the trace in ``t`` order (``stageload.trace.TraceReader``), and so must this.
One later still is counted where it arrives, as the reader's bounded buffer does."""


class MemoryTracker:
    """Turns samples and stage events into ``memory`` events, by the one stage-window rule
    that ``python -m stageload summary`` applies to the trace afterwards
    (:class:`stageload.meter.window.StagePeaks`; docs/meter.md, "Stage windows"), so the
    panel's numbers and the summary's agree.

    ``peak`` = the run's peak so far (bytes): the largest sampled footprint or kernel
    high-water mark ``hwm`` that can be placed in time. ``stage_peak`` = the current stage's
    window peak so far: from its ``ready`` event (SPEC §2.1), footprints of the samples since
    and marks reached wholly since (a mark straddling ``ready`` may be the release's or the
    previous stage's, and counts only for ``peak``); None before ``ready``. ``stage`` events
    with a ``parent`` are sub-steps and leave the stage as it is (``substep`` names the
    current one, None after a new stage). Samples and events are accounted in ``t`` order, as
    the summary reads them, whatever order they arrive in (within :data:`REORDER_SECONDS`):
    one that arrives before something it follows is put in its place and the figures are
    recomputed from there. ``interval``: seconds
    between two ``memory`` events: one is due at each multiple of it (the first sample at or
    after each), so 10 Hz samples give 4 events a second. ``clock``: seconds, monotonic.
    Thread-safe.
    """

    def __init__(self, interval: float = MEMORY_INTERVAL, clock=time.monotonic):
        self.interval = interval
        self._clock = clock
        self._peaks = StagePeaks()  # every item accounted, in t order
        self._base = StagePeaks()  # the items older than the reorder window, folded
        self._base_last: dict | None = None  # the latest sample folded into _base
        self._recent: list[tuple[float, int, str, dict]] = []  # (t, arrival, kind, item)
        self._arrived = 0
        self.substep: str | None = None
        self._due = float("-inf")
        self._last: dict | None = None  # the latest sample accounted (by t)
        self._lock = threading.Lock()

    @property
    def peak(self) -> int | None:
        return self._peaks.peak

    @property
    def stage(self) -> str | None:
        return self._peaks.stage

    @property
    def stage_peak(self) -> int | None:
        return self._peaks.stage_peak

    def on_event(self, ev: dict) -> dict | None:
        """Follow ``stage`` / ``ready`` events (other events are ignored). An event without a
        numeric ``t`` is given the time it arrived.

        Returns the fields of a ``memory`` event to send *before* ``ev`` when ``ev`` begins a
        new stage (a ``stage`` event without ``parent``) while one runs: the ending stage's
        window peak with every sample counted so far (:meth:`closing`). The events are throttled
        (``interval``), so without it the last one of a stage missed the samples after it — up
        to ``interval`` of them — and a stage shorter than ``interval`` had none: a reader's
        figure for the stage (the terminal's ``done … peak`` line) was not the summary's."""
        if ev.get("event") not in ("stage", "ready"):
            return None
        if not isinstance(ev.get("t"), (int, float)) or isinstance(ev.get("t"), bool):
            ev = {**ev, "t": time.time()}
        with self._lock:
            begins = ev.get("event") == "stage" and ev.get("parent") is None
            before = self._account("event", ev)
            closing = before if begins and before["stage"] is not None else None
            if ev.get("event") == "stage":  # a sub-step names itself; a new stage clears it
                self.substep = ev.get("stage") if ev.get("parent") is not None else None
        return closing

    def closing(self) -> dict | None:
        """The fields of the current stage's last ``memory`` event (its window peak with every
        sample counted so far), for the end of a job; None before the first stage."""
        with self._lock:
            return self._fields(self._last, self._peaks) if self.stage is not None else None

    def on_sample(self, sample: dict, force: bool = False) -> dict | None:
        """Account one meter ``sample`` dict (``t`` in ``time.time()`` seconds, as the
        ``Sampler`` writes it); return the fields of a ``memory`` event (``footprint``,
        ``peak``, ``stage``, ``stage_peak``, ``swap``, ``available``, ``total``,
        ``pressure``) when one is due (``force``: now, whatever the interval)."""
        with self._lock:
            self._account("sample", sample)
            now = self._clock()
            if not force and now < self._due:
                return None
            # On a fixed grid (due += interval), so that 10 Hz samples give 4 events a second,
            # not one every third sample (3.3/s); after a stall the grid restarts from now.
            late = now - self._due >= self.interval
            self._due = now + self.interval if late else self._due + self.interval
            return self._fields(self._last, self._peaks)

    # -- time order ----------------------------------------------------------------------------
    def _account(self, kind: str, item: dict) -> dict | None:
        """Account ``item`` (a sample or a stage/ready event) in its ``t`` place. For an event,
        returns the ``memory`` fields just before it: the ending stage's closing figure when
        ``item`` begins a new stage (None for a sample). Called under the lock."""
        t = float(item["t"])
        entry = (t, self._arrived, kind, item)
        self._arrived += 1
        at = bisect.bisect(self._recent, (t, entry[1]))
        before = None
        if at == len(self._recent):  # in order, the usual case: no replay
            if kind == "event":
                before = self._fields(self._last, self._peaks)
            self._recent.append(entry)
            self._apply(self._peaks, entry)
            if kind == "sample":
                self._last = item
        else:  # it arrived after something it precedes: replay the window in t order
            self._recent.insert(at, entry)
            self._peaks, self._last = copy.deepcopy(self._base), self._base_last
            for index, done in enumerate(self._recent):
                if index == at and kind == "event":
                    before = self._fields(self._last, self._peaks)
                self._apply(self._peaks, done)
                if done[2] == "sample":
                    self._last = done[3]
        newest = self._recent[-1][0]
        while self._recent and self._recent[0][0] < newest - REORDER_SECONDS:
            folded = self._recent.pop(0)
            self._apply(self._base, folded)
            if folded[2] == "sample":
                self._base_last = folded[3]
        return before

    @staticmethod
    def _apply(peaks: StagePeaks, entry: tuple) -> None:
        if entry[2] == "sample":
            peaks.on_sample(entry[3])
        else:
            peaks.on_event(entry[3])

    def _fields(self, sample: dict | None, peaks: StagePeaks) -> dict:
        sample = sample or {}
        return {"footprint": sample.get("footprint"), "peak": peaks.peak,
                "stage": peaks.stage, "stage_peak": peaks.stage_peak,
                "substep": self.substep, "swap": sample.get("swap"),
                "available": sample.get("available"),
                "total": sample.get("total"), "pressure": sample.get("pressure")}
