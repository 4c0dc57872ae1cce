"""Numbers from one benchmark trace: stage windows and peaks, loads, releases, resident weights.

Input is the list of records of one JSONL trace (``sample`` lines from the outside sampler and
the worker's events, docs/ARCHITECTURE.md "Trace"). All sizes are bytes, times seconds.

Stage window: from the stage's ``ready`` event (ARCHITECTURE: "a stage's memory window begins
at its ready event") to the next ``stage`` event, or to the end of the trace for the last stage.
Stage peaks and windows come from ``stageload.summary.summarize`` (the same numbers
``python -m stageload summary`` prints): the largest sampled footprint in the window, or a
kernel high-water mark the sampler could place wholly inside it, whichever is larger. This module
adds what the summary does not: the baseline before a stage, resident weights replayed from the
events, and load throughput.
"""
from __future__ import annotations

from statistics import median

from stageload.meter.window import window_peak  # the placement rule summarize uses
from stageload.summary import summarize


def split(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """(samples, events) of a trace, each in time order."""
    samples = sorted((r for r in records if r.get("event") == "sample"), key=lambda r: r["t"])
    events = sorted((r for r in records if r.get("event") != "sample"), key=lambda r: r["t"])
    return samples, events


def stage_windows(events: list[dict], end: float) -> list[dict]:
    """One dict per ``stage`` event in order (sub-steps, which have a ``parent``, stay in
    their stage): ``stage``, ``start`` (the stage event's t),
    ``ready`` (its ready event's t, or None when none came), ``end`` (next stage's t or
    ``end``), ``release_seconds`` (the ready event's ``seconds``), ``released_bytes``."""
    stages = [e for e in events if e["event"] == "stage" and e.get("parent") is None]
    out = []
    for i, ev in enumerate(stages):
        stop = stages[i + 1]["t"] if i + 1 < len(stages) else end
        ready = next((e for e in events if e["event"] == "ready" and e.get("stage") == ev["stage"]
                      and ev["t"] <= e["t"] <= stop), None)
        out.append({"stage": ev["stage"], "start": ev["t"], "end": stop,
                    "ready": ready["t"] if ready else None,
                    "release_seconds": ready.get("seconds") if ready else None,
                    "released_bytes": ready.get("released_bytes") if ready else None})
    return out


def stage_peaks(records: list[dict]) -> dict[str, dict]:
    """Per stage of one trace, from ``stageload.summary.summarize``: ``peak`` (bytes, window
    from ready to next stage), ``samples`` (samples in the window), ``release_seconds``,
    ``released_bytes``, ``seconds`` (window length). A stage entered twice keeps its larger
    peak."""
    out: dict[str, dict] = {}
    for st in summarize(records)["stages"]:
        row = {"peak": st["peak"], "samples": st["samples"],
               "release_seconds": st["release_seconds"], "released_bytes": st["released_bytes"],
               "seconds": st["window_seconds"]}
        prev = out.get(st["stage"])
        if prev is None or (row["peak"] or 0) > (prev["peak"] or 0):
            out[st["stage"]] = row
    return out


def sample_hz(records: list[dict]) -> float | None:
    """Achieved sampling rate of a trace (1 / median gap between samples, Hz)."""
    return summarize(records)["sample_hz"]


def overall_peak(records: list[dict]) -> int | None:
    """Largest footprint or placed high-water mark of the whole trace (bytes; None without
    samples), as ``stageload.summary`` computes it."""
    return summarize(records)["peak"]["bytes"]


def baseline_before(records: list[dict], stage: str) -> int | None:
    """Least sampled footprint between ``stage``'s ``stage`` event and its ``ready`` (bytes):
    the process before the stage allocates anything (used by the "alone" run)."""
    samples, events = split(records)
    end = max([r["t"] for r in records] or [0.0])
    for w in stage_windows(events, end):
        if w["stage"] == stage and w["ready"] is not None:
            values = [s["footprint"] for s in samples if w["start"] <= s["t"] < w["ready"]
                      and s.get("footprint") is not None]
            return min(values) if values else None
    return None


def working_alone(records: list[dict]) -> dict[str, dict]:
    """Per stage of an "alone" trace: ``baseline`` (bytes before the allocation), ``peak``
    (bytes in the window), ``working`` = peak - baseline (bytes, >= 0)."""
    peaks = stage_peaks(records)
    out = {}
    for stage, row in peaks.items():
        base = baseline_before(records, stage)
        work = None if base is None or row["peak"] is None else max(0, row["peak"] - base)
        out[stage] = {"baseline": base, "peak": row["peak"], "working": work}
    return out


def compute_working(records: list[dict]) -> dict[str, dict]:
    """Per stage of a "compute" trace (every model loaded up front, a ``bench_idle`` event and
    a ``--hold`` wait after each stage's end, before the next ``stage`` event): ``start`` (the
    least footprint from the last ``bench_idle`` before the stage to its ``stage`` event:
    runtime and every weight, nothing of a stage held), ``weights`` (the idle event's
    ``resident_bytes``: every distinct weight tensor loaded then — the port's four image
    backbones share one set, and it drops MoGe-2 after camera — or None when the event has
    none), ``runtime`` = start − weights (the interpreter as the run has grown it by this
    stage; None without weights), ``peak`` (as
    :func:`stage_peaks`), ``loaded`` (bytes of loads in the stage's window: the port loads
    MoGe-2 on first use even when it loads the rest up front; subtracted, since they are
    weights, not computation) and ``working`` = peak − start − loaded (bytes, >= 0). A stage
    with no ``bench_idle`` since the previous stage began (the first, ``setup``, where the
    models load) or no sample between the two is left out."""
    samples, events = split(records)
    end = max([r["t"] for r in records] or [0.0])
    peaks = stage_peaks(records)
    idles = [e for e in events if e["event"] == "bench_idle"]
    out: dict[str, dict] = {}
    previous = None
    for w in stage_windows(events, end):
        since = previous if previous is not None else float("-inf")
        previous = w["start"]
        before = [e for e in idles if since <= e["t"] <= w["start"]]  # the previous stage's end
        if not before or w["stage"] not in peaks or peaks[w["stage"]]["peak"] is None:
            continue
        idle = before[-1]
        quiet = [s["footprint"] for s in samples if idle["t"] <= s["t"] < w["start"]
                 and s.get("footprint") is not None]
        if not quiet:
            continue
        loaded = sum(int(e.get("bytes") or 0) for e in events
                     if e["event"] in ("load", "reload") and w["start"] <= e["t"] <= w["end"])
        start, peak = min(quiet), peaks[w["stage"]]["peak"]
        weights = idle.get("resident_bytes")
        out[w["stage"]] = {"start": start, "weights": weights,
                           "runtime": None if weights is None else start - int(weights),
                           "peak": peak, "loaded": loaded,
                           "working": max(0, peak - start - loaded)}
    return out


def loads(records: list[dict]) -> dict:
    """Loading figures of one trace: ``count``, ``bytes``, ``seconds`` (sums over ``load`` and
    ``reload`` events), ``throughput`` (bytes/s), ``outside_stage`` (count), ``per_model``
    ({model: [bytes, seconds] per load})."""
    ev = [e for e in split(records)[1] if e["event"] in ("load", "reload")]
    total_b = sum(int(e.get("bytes") or 0) for e in ev)
    total_s = sum(float(e.get("seconds") or 0.0) for e in ev)
    per_model: dict[str, list] = {}
    for e in ev:
        per_model.setdefault(e["model"], []).append([e.get("bytes"), e.get("seconds")])
    return {"count": len(ev), "bytes": total_b, "seconds": total_s,
            "throughput": total_b / total_s if total_s > 0 else None,
            "outside_stage": sum(1 for e in ev if e.get("outside_stage")),
            "per_model": per_model}


def resident_weights(records: list[dict]) -> dict:
    """Weights resident per stage, replayed from load/reload/release events.

    Returns ``{"per_stage": {stage: {"max_bytes": int, "models": [names resident at that
    max]}}, "double_loads": [{"model", "stage", "t"}]}``: a double load is a load of a model
    that is already resident (no release in between) — two copies of its weights.
    """
    _, events = split(records)
    resident: dict[str, int] = {}
    current = None
    per_stage: dict[str, dict] = {}
    doubles = []

    def note() -> None:
        if current is None:
            return
        total = sum(resident.values())
        row = per_stage.setdefault(current, {"max_bytes": 0, "models": []})
        if total >= row["max_bytes"]:
            row["max_bytes"] = total
            row["models"] = sorted(resident)

    for e in events:
        kind = e["event"]
        if kind == "stage" and e.get("parent") is None:  # a sub-step stays in its stage
            current = e["stage"]
        elif kind == "ready":
            note()  # after the stage's releases: what the stage starts with
        elif kind in ("load", "reload"):
            if e["model"] in resident:
                doubles.append({"model": e["model"], "stage": e.get("stage"), "t": e["t"]})
            resident[e["model"]] = resident.get(e["model"], 0) + int(e.get("bytes") or 0)
            note()
        elif kind == "release":
            resident.pop(e["model"], None)
    return {"per_stage": per_stage, "double_loads": doubles}


def load_transients(records: list[dict], interval: float) -> list[dict]:
    """How much memory each ``load``/``reload`` took while it ran, in copies of its weights.

    For a load of ``bytes`` that ended at ``t`` after ``seconds``: ``before`` = the least sampled
    footprint from two sampling intervals before the load's start to one interval after it;
    ``during`` = the peak (sampled footprint or placed
    high-water mark) in ``[t - seconds, t + interval]``; ``copies`` = (during - before) /
    bytes. A loader that allocates the weights once reads about 1.0 (more when the stage also
    allocates other memory meanwhile); one that builds a randomly initialised model and then
    copies a loaded state dict into it reads about 2.0 — two copies of those weights at once.
    ``anon_copies`` is the same rise counted in private (anonymous) memory only, from the
    samples' ``rss_anon`` (None when the trace has no such field): it separates a second
    private copy from mapped file pages being read.
    Loads under 1 MB or without samples around them are skipped (too small to read). The
    benchmark's worker waits ``--load-pause`` (two intervals) after each load of >= 32 MiB, so
    the window's tail reads what the load left, not the stage's first computation.
    """
    samples, events = split(records)
    out = []
    for e in events:
        if e["event"] not in ("load", "reload") or int(e.get("bytes") or 0) < 2**20:
            continue
        start, end = e["t"] - float(e.get("seconds") or 0.0), e["t"] + interval
        # Baseline: the least footprint from two samples before the load to one interval into
        # it, so memory freed just before the load (the stage change's releases) is not
        # counted as the load's.
        around = [x for x in samples if start - 2 * interval <= x["t"] <= min(start + interval,
                                                                              e["t"])
                  and x.get("footprint") is not None]
        peak = window_peak(samples, start, end)["peak"]
        if not around or peak is None:
            continue
        before = min(x["footprint"] for x in around)
        anon = [x["rss_anon"] for x in samples if start <= x["t"] <= end
                and x.get("rss_anon") is not None]
        anon_around = [x["rss_anon"] for x in around if x.get("rss_anon") is not None]
        anon_before = min(anon_around) if anon_around else None
        anon_copies = ((max(anon) - anon_before) / int(e["bytes"])
                       if anon and anon_before is not None else None)
        out.append({"model": e["model"], "stage": e.get("stage"), "bytes": int(e["bytes"]),
                    "seconds": e.get("seconds"), "before": before, "during": peak,
                    "copies": (peak - before) / int(e["bytes"]),
                    "anon_copies": anon_copies})
    return out


def span(values: list[float | int | None]) -> dict:
    """``{"min", "max", "median", "runs"}`` of the non-None values (all None when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"min": None, "max": None, "median": None, "runs": list(values)}
    return {"min": min(vals), "max": max(vals), "median": median(vals), "runs": list(values)}
