"""The stage-window rule: which memory readings count for which stage, and for the run's peak.

One rule for every reader of samples — the live ``memory`` events the runner sends the add-on
(``runner``'s memory tracker), ``python -m stageload summary``, ``MemoryMeter`` phases and the
benchmark — so that the panel and the summary blame the same stage for one peak. Documented in
docs/meter.md ("Stage windows" and "How hwm is attributed").

- A ``stage`` event with a ``parent`` is a sub-step of that stage (the export stage's steps,
  runner/PROTOCOL.md), not a stage: it neither ends nor starts a stage window.
- A stage's *window* begins at its ``ready`` event (after the releases its ``stage`` event
  triggered, SPEC §2.1) and ends at the next ``stage`` event. A stage that never gets a
  ``ready`` (an older pipeline, a run killed during release) is given the window from its
  ``stage`` event once the next ``stage`` event (or the end) shows that none came.
- A sample at time ``t`` counts for the window with ``start <= t < end``: its ``footprint``
  always, its kernel high-water mark ``hwm`` only when the span in which the mark was reached
  (:func:`hwm_interval`) begins inside the window too — a mark that straddles the window's
  start may belong to the previous stage or to the release, and counts for no stage.
- The run's *peak* is the largest footprint or placeable ``hwm`` of all samples; it is blamed
  on the stage whose window peak it is, and on no stage when it lies outside every window
  (before the first stage, during a release, or an ``hwm`` straddling a window's start).

Everything here is streaming: feed samples and events in time order, memory stays constant.
Samples are dicts with ``t`` (seconds, ``time.time()``), ``footprint``, ``hwm`` and
``hwm_since`` (bytes / seconds or None), as ``stageload.meter`` writes them; values are
expected to be validated where they entered (``stageload.trace`` does it for trace files).
"""
from __future__ import annotations

from typing import Callable, Optional

__all__ = ["hwm_interval", "WindowPeak", "window_peak", "StagePeaks"]


def hwm_interval(prev: dict | None, cur: dict) -> tuple[float, float, int] | None:
    """The time span ``(lo, hi)`` (``time.time()`` seconds) in which ``cur["hwm"]`` (bytes) was
    reached, with the value: ``(lo, hi, hwm)``; ``None`` when it cannot be placed.

    - ``cur["hwm_since"]`` is a number (the sampler reset the mark at that time): the peak lies
      in ``[hwm_since, t]``.
    - otherwise the mark is a lifetime peak; it says something about this interval only if it
      rose since the previous sample: ``(prev["t"], cur["t"]]``. Unchanged, or no previous
      sample: ``None`` (the peak happened at an unknown earlier time).

    Example: ``hwm_interval({"t": 1, "hwm": 5}, {"t": 2, "hwm": 8})`` is ``(1.0, 2.0, 8)``.
    """
    hwm = cur.get("hwm")
    if hwm is None:
        return None
    since = cur.get("hwm_since")
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return float(since), float(cur["t"]), int(hwm)
    if prev is None or prev.get("hwm") is None or hwm <= prev["hwm"]:
        return None
    return float(prev["t"]), float(cur["t"]), int(hwm)


class WindowPeak:
    """Peak of one window that begins at ``start`` (seconds); streaming.

    Feed it, in time order, every sample with ``start <= t < end`` through ``add(prev, cur)``
    (``prev``: the sample before ``cur``, which may lie before the window, or None). Samples
    before ``start`` are ignored. Attributes (bytes, or None when nothing counted):
    ``footprint``, ``hwm``, ``peak`` (the larger), ``samples`` (count).
    """

    def __init__(self, start: float):
        self.start = start
        self.footprint: Optional[int] = None
        self.hwm: Optional[int] = None
        self.samples = 0

    def add(self, prev: dict | None, cur: dict) -> None:
        """Count ``cur`` (see the module docstring for the rule)."""
        if cur["t"] < self.start:
            return
        self.samples += 1
        fp = cur.get("footprint")
        if fp is not None:
            self.footprint = int(fp) if self.footprint is None else max(self.footprint, int(fp))
        span = hwm_interval(prev, cur)
        if span is not None and span[0] >= self.start:
            self.hwm = span[2] if self.hwm is None else max(self.hwm, span[2])

    @property
    def peak(self) -> Optional[int]:
        """max(footprint, hwm), or None when neither was seen."""
        values = [v for v in (self.footprint, self.hwm) if v is not None]
        return max(values) if values else None

    def as_dict(self) -> dict:
        """``{"footprint", "hwm", "peak", "samples"}``."""
        return {"footprint": self.footprint, "hwm": self.hwm, "peak": self.peak,
                "samples": self.samples}


def window_peak(samples: list[dict], start: float, end: float | None) -> dict:
    """Peak in the window ``start <= t < end`` (``end`` None = open) over ``samples`` (time
    ordered ``sample`` dicts of one process): ``{"footprint", "hwm", "peak", "samples"}``
    (bytes, count), the :class:`WindowPeak` rule applied to a list.

    Example: ``window_peak([{"t": 1, "footprint": 5}], 0, None)["peak"]`` is ``5``.
    """
    win = WindowPeak(start)
    prev = None
    for s in samples:
        if end is not None and s["t"] >= end:
            break
        win.add(prev, s)
        prev = s
    return win.as_dict()


class StagePeaks:
    """Follows ``stage`` / ``ready`` events and samples in time order and keeps each stage
    window's peak and the run's peak, blamed on a stage by the module's rule. Streaming.

    ``on_close(record)`` (optional) gets each stage's record when its window ends (at the next
    ``stage`` event or :meth:`finish`): a dict ``{"stage", "index", "count", "start", "ready"
    (seconds or None), "end" (None when finished without an end time), "release_seconds",
    "released_bytes", "window": WindowPeak}``; without ``ready`` the window is the one from the
    ``stage`` event.

    Live view while running: ``stage`` (current stage name or None), ``stage_peak`` (bytes: the
    current stage's window peak so far; None before its ``ready``), ``peak`` (bytes, the run's
    peak so far) and :meth:`peak_info`.

    Example::

        peaks = StagePeaks()
        peaks.on_event({"event": "stage", "t": 0.0, "stage": "a"})
        peaks.on_event({"event": "ready", "t": 0.5, "stage": "a"})
        peaks.on_sample({"t": 1.0, "footprint": 100})
        peaks.stage_peak, peaks.peak_info()["stage"]   # (100, "a")
    """

    def __init__(self, on_close: Optional[Callable[[dict], None]] = None):
        self.on_close = on_close
        self.current: Optional[dict] = None
        self._prev: Optional[dict] = None
        self._best: Optional[dict] = None  # {"bytes", "t", "source", "record", "before_ready"}

    @property
    def stage(self) -> Optional[str]:
        return self.current["stage"] if self.current else None

    @property
    def stage_peak(self) -> Optional[int]:
        cur = self.current
        return cur["window"].peak if cur and cur["ready"] is not None else None

    @property
    def peak(self) -> Optional[int]:
        return self._best["bytes"] if self._best else None

    def on_event(self, ev: dict) -> None:
        """Follow a ``stage`` (closes the current window, opens the next) or ``ready`` event
        (of the current stage: its window starts here); other events, and ``stage`` events
        with a ``parent`` (sub-steps), are ignored."""
        kind, t = ev.get("event"), ev.get("t")
        if kind == "stage" and ev.get("parent") is None:
            self._close(t)
            self.current = {"stage": ev.get("stage"), "index": ev.get("index"),
                            "count": ev.get("count"), "start": t, "ready": None, "end": None,
                            "release_seconds": None, "released_bytes": None,
                            "window": WindowPeak(t), "from_stage": WindowPeak(t)}
        elif kind == "ready" and self.current is not None and self.current["ready"] is None \
                and ev.get("stage") == self.current["stage"]:
            self.current.update(ready=t, window=WindowPeak(t), release_seconds=ev.get("seconds"),
                                released_bytes=ev.get("released_bytes"))

    def on_sample(self, sample: dict) -> None:
        """Count one ``sample`` (``t`` required) for the current window and the run's peak."""
        prev, self._prev = self._prev, sample
        cur = self.current
        if cur is not None:
            cur["window"].add(prev, sample)
            if cur["ready"] is None:
                cur["from_stage"].add(prev, sample)
        self._offer(sample.get("footprint"), sample["t"], "footprint", None)
        span = hwm_interval(prev, sample)
        if span is not None:
            self._offer(span[2], span[1], "hwm", span[0])

    def _offer(self, value, t: float, source: str, lo: Optional[float]) -> None:
        if value is None or (self._best is not None and value <= self._best["bytes"]):
            return
        cur = self.current
        placed = cur is not None and t >= cur["start"] and (lo is None or lo >= cur["start"])
        before_ready = cur is not None and cur["ready"] is None
        if placed and not before_ready:
            placed = t >= cur["ready"] and (lo is None or lo >= cur["ready"])
        self._best = {"bytes": int(value), "t": t, "source": source,
                      "record": cur if placed else None, "before_ready": before_ready}

    def _close(self, end: Optional[float]) -> None:
        cur = self.current
        if cur is None:
            return
        cur["end"] = end
        if cur["ready"] is None:
            cur["window"] = cur["from_stage"]
        record = {k: v for k, v in cur.items() if k != "from_stage"}
        if self.on_close is not None:
            self.on_close(record)

    def finish(self, end: Optional[float] = None) -> None:
        """End the last stage's window at ``end`` (seconds; None = end of the data)."""
        self._close(end)
        self.current = None

    def peak_info(self) -> dict:
        """The run's peak: ``{"bytes", "t" (seconds, time of the sample that showed it),
        "source": "footprint" | "hwm", "stage"}`` (None values when no sample had a size).
        ``stage`` is the stage whose window holds the peak, or None (module docstring)."""
        best = self._best
        if best is None:
            return {"bytes": None, "t": None, "source": None, "stage": None}
        record = best["record"]
        if record is not None and best["before_ready"] and record["ready"] is not None:
            record = None  # seen during the release; the stage's window began later, at ready
        return {"bytes": best["bytes"], "t": best["t"], "source": best["source"],
                "stage": record["stage"] if record is not None else None}
