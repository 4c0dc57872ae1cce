"""Where a sample's high-water mark belongs in time: the rule shared by ``MemoryMeter`` and
``stageload.summary`` (documented in docs/meter.md, "How hwm is attributed")."""
from __future__ import annotations


def hwm_interval(prev: dict | None, cur: dict) -> tuple[float, float, int] | None:
    """The time span ``(lo, hi)`` (``time.time()`` seconds) in which ``cur["hwm"]`` (bytes) was
    reached, with the value: ``(lo, hi, hwm)``; ``None`` when it cannot be placed.

    - ``cur["hwm_since"]`` is a number (the sampler reset the mark at that time): the peak lies
      in ``[hwm_since, t]``.
    - otherwise the mark is a lifetime peak; it says something about this interval only if it
      rose since the previous sample: ``(prev["t"], cur["t"]]``. Unchanged, or no previous
      sample: ``None`` (the peak happened at an unknown earlier time).
    """
    hwm = cur.get("hwm")
    if hwm is None:
        return None
    since = cur.get("hwm_since")
    if isinstance(since, (int, float)):
        return float(since), float(cur["t"]), int(hwm)
    if prev is None or prev.get("hwm") is None or hwm <= prev["hwm"]:
        return None
    return float(prev["t"]), float(cur["t"]), int(hwm)


def window_peak(samples: list[dict], start: float, end: float | None) -> dict:
    """Peak in the window ``start <= t < end`` (``end`` None = open) over ``samples`` (time
    ordered ``sample`` dicts of one process).

    Returns ``{"footprint": max sampled footprint or None, "hwm": max high-water mark placed
    wholly inside the window or None, "peak": the larger of the two or None, "samples": n}``
    (bytes). A mark whose span crosses a window edge counts for no window (only for the run's
    overall peak), so a stage is never blamed for memory that may belong to its neighbour.
    """
    def inside(x: float) -> bool:
        return x >= start and (end is None or x < end)

    fp = None
    hw = None
    n = 0
    prev = None
    for s in samples:
        if inside(s["t"]):
            n += 1
            if s.get("footprint") is not None:
                fp = s["footprint"] if fp is None else max(fp, s["footprint"])
        span = hwm_interval(prev, s)
        if span is not None and inside(span[0]) and (end is None or span[1] <= end) \
                and span[1] >= start:
            hw = span[2] if hw is None else max(hw, span[2])
        prev = s
    candidates = [v for v in (fp, hw) if v is not None]
    return {"footprint": fp, "hwm": hw, "peak": max(candidates) if candidates else None,
            "samples": n}
