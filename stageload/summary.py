"""``python -m stageload summary TRACE [--json]`` and ``summarize(lines)``: what a trace says
about memory, swap, time and loading, per stage and overall.

Stage windows (docs/ARCHITECTURE.md): a stage's memory window begins at its ``ready`` event
(after the releases its ``stage`` event triggered) and ends at the next ``stage`` event, or at
the end of the trace for the last stage. A stage without a ``ready`` event (an older pipeline,
a run killed during release) gets a window from its ``stage`` event. Time between a ``stage``
and its ``ready`` (releases running) belongs to no stage's memory window; it counts for the
overall peak.

Peaks combine two sources: the sampled ``footprint`` of each sample in the window, and the
kernel high-water mark ``hwm`` where it can be placed wholly inside the window (rule in
``stageload.meter._window.hwm_interval`` and docs/meter.md). A stage's ``peak`` is the larger.

Seconds per stage run from its ``stage`` event to the next ``stage`` event (or the end);
``release_seconds`` is the ``ready`` event's ``seconds``. Loads are ``load`` and ``reload``
events, counted in the stage whose [``stage``, next ``stage``) span holds their time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Iterable

from .meter._window import hwm_interval, window_peak
from .trace import TraceError, iter_lines, parse_lines
from .units import format_size

LOAD_EVENTS = ("load", "reload")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _overall_peak(samples: list[dict]) -> dict:
    best = {"bytes": None, "t": None, "source": None}
    prev = None
    for s in samples:
        fp = s.get("footprint")
        if _num(fp) and (best["bytes"] is None or fp > best["bytes"]):
            best = {"bytes": int(fp), "t": s["t"], "source": "footprint"}
        span = hwm_interval(prev, s)
        if span is not None and (best["bytes"] is None or span[2] > best["bytes"]):
            best = {"bytes": span[2], "t": span[1], "source": "hwm"}
        prev = s
    return best


def _stages(events: list[dict], end_t: float | None) -> list[dict]:
    marks = [e for e in events if e.get("event") == "stage" and e.get("parent") is None]
    out = []
    for k, ev in enumerate(marks):
        nxt = marks[k + 1]["t"] if k + 1 < len(marks) else None
        ready = next((e for e in events if e.get("event") == "ready"
                      and e.get("stage") == ev.get("stage") and e["t"] >= ev["t"]
                      and (nxt is None or e["t"] < nxt)), None)
        out.append({"stage": ev.get("stage"), "index": ev.get("index"), "count": ev.get("count"),
                    "start": ev["t"], "ready": ready["t"] if ready else None,
                    "end": nxt if nxt is not None else end_t,
                    "last": nxt is None,
                    "release_seconds": ready.get("seconds") if ready else None,
                    "released_bytes": ready.get("released_bytes") if ready else None})
    return out


def _substeps(events: list[dict], samples: list[dict], st: dict) -> list[dict]:
    """Sub-steps of stage ``st``: ``stage`` events whose ``parent`` is its name, inside its
    span. Each one's window runs from its event to the next sub-step's, or to the end of the
    parent's window."""
    end = None if st["last"] else st["end"]
    marks = [e for e in events if e.get("event") == "stage" and e.get("parent") == st["stage"]
             and e["t"] >= st["start"] and (end is None or e["t"] < end)]
    out = []
    for k, ev in enumerate(marks):
        stop = marks[k + 1]["t"] if k + 1 < len(marks) else end
        win = window_peak(samples, ev["t"], stop)
        out.append({"stage": ev.get("stage"), "index": ev.get("index"),
                    "seconds": (stop if stop is not None else st["end"]) - ev["t"],
                    "peak": win["peak"], "peak_footprint": win["footprint"],
                    "peak_hwm": win["hwm"], "samples": win["samples"]})
    return out


def summarize(lines: Iterable[str | bytes | dict]) -> dict:
    """Summary of one trace.

    ``lines``: trace lines (str/bytes JSONL) or event dicts, in file order. Returns a
    JSON-serialisable dict, sizes in bytes (int), times in seconds (float), ``None`` where the
    trace does not say::

        {"seconds", "samples", "sample_hz", "truncated",
         "peak": {"bytes", "t" (s from trace start), "source": "footprint"|"hwm", "stage"},
         "swap": {"start", "peak", "end", "growth"}, "available_min",
         "loads": {"count", "reloads", "bytes", "seconds"},
         "outside_stage": [{"model", "stage", "event", "bytes", "seconds", "t"}],
         "stages": [{"stage", "index", "count", "seconds", "release_seconds", "released_bytes",
                     "window_seconds", "peak", "peak_footprint", "peak_hwm", "samples",
                     "loads", "load_bytes", "load_seconds", "gpu_peak",
                     "substeps": [{"stage", "index", "seconds", "peak", "peak_footprint",
                                   "peak_hwm", "samples"}]}]}

    Sub-steps are ``stage`` events carrying ``"parent": <stage>`` (the export stage's steps,
    runner/PROTOCOL.md); they do not end their parent's window and are listed under it.

    Raises ``TraceError`` if a line other than the last is not JSON or there are no events.
    """
    events, truncated = parse_lines(lines)
    events = [e for e in events if _num(e.get("t"))]
    if not events:
        raise TraceError("the trace has no events")
    events.sort(key=lambda e: e["t"])  # stable: file order among equal times
    t0, t_end = events[0]["t"], events[-1]["t"]
    samples = [e for e in events if e.get("event") == "sample"]
    loads = [e for e in events if e.get("event") in LOAD_EVENTS]

    stages = []
    for st in _stages(events, t_end):
        start = st["ready"] if st["ready"] is not None else st["start"]
        end = None if st["last"] else st["end"]
        win = window_peak(samples, start, end)
        in_span = [e for e in loads if e["t"] >= st["start"] and (end is None or e["t"] < end)]
        gpu = [max(v for k in ("peak", "current", "allocated") if _num(v := e.get(k)))
               for e in events if e.get("event") == "gpu" and e["t"] >= start
               and (end is None or e["t"] < end)
               and any(_num(e.get(k)) for k in ("peak", "current", "allocated"))]
        stages.append({
            "stage": st["stage"], "index": st["index"], "count": st["count"],
            "seconds": st["end"] - st["start"],
            "release_seconds": st["release_seconds"], "released_bytes": st["released_bytes"],
            "window_seconds": st["end"] - start,
            "peak": win["peak"], "peak_footprint": win["footprint"], "peak_hwm": win["hwm"],
            "samples": win["samples"],
            "loads": len(in_span),
            "load_bytes": sum(int(e.get("bytes") or 0) for e in in_span),
            "load_seconds": sum(float(e.get("seconds") or 0) for e in in_span),
            "gpu_peak": int(max(gpu)) if gpu else None,
            "substeps": _substeps(events, samples, st),
        })

    peak = _overall_peak(samples)
    peak_stage = None
    if peak["t"] is not None:
        for st, raw in zip(stages, _stages(events, t_end)):
            w_start = raw["ready"] if raw["ready"] is not None else raw["start"]
            if peak["t"] >= w_start and (raw["last"] or peak["t"] < raw["end"]):
                peak_stage = st["stage"]
        peak["t"] = peak["t"] - t0
    peak["stage"] = peak_stage

    swaps = [s["swap"] for s in samples if _num(s.get("swap"))]
    avail = [s["available"] for s in samples if _num(s.get("available"))]
    gaps = [b["t"] - a["t"] for a, b in zip(samples, samples[1:]) if b["t"] > a["t"]]
    outside = [{"model": e.get("model"), "stage": e.get("stage"), "event": e["event"],
                "bytes": e.get("bytes"), "seconds": e.get("seconds"), "t": e["t"] - t0}
               for e in loads if e.get("outside_stage")]
    return {
        "seconds": t_end - t0,
        "samples": len(samples),
        "sample_hz": (1.0 / statistics.median(gaps)) if gaps else None,
        "truncated": truncated,
        "peak": peak,
        "swap": {"start": swaps[0] if swaps else None, "peak": max(swaps) if swaps else None,
                 "end": swaps[-1] if swaps else None,
                 "growth": (max(swaps) - swaps[0]) if swaps else None},
        "available_min": min(avail) if avail else None,
        "loads": {"count": len(loads), "reloads": sum(e["event"] == "reload" for e in loads),
                  "bytes": sum(int(e.get("bytes") or 0) for e in loads),
                  "seconds": sum(float(e.get("seconds") or 0) for e in loads)},
        "outside_stage": outside,
        "stages": stages,
    }


# -- text -------------------------------------------------------------------------------------
def _size(n) -> str:
    """``n`` bytes for people (:func:`stageload.units.format_size`: ``"1.2 GiB"``); ``"–"`` for None."""
    return format_size(n, unknown="–")


def _sec(x) -> str:
    if x is None:
        return "–"
    return f"{x:.2f} s" if abs(x) < 10 else f"{x:.1f} s"


def format_text(summary: dict, name: str = "trace") -> str:
    """The summary as text a person reads (sizes in GiB/MiB = 1024³/1024² bytes, seconds)."""
    s = summary
    hz = f" at {s['sample_hz']:.1f} Hz" if s["sample_hz"] else ""
    lines = [f"{name}: {s['seconds']:.1f} s, {s['samples']} samples{hz}"
             + ("  (last line was cut off and skipped)" if s["truncated"] else "")]
    p = s["peak"]
    if p["bytes"] is None:
        lines.append("peak footprint: – (no samples)")
    else:
        where = f" in stage {p['stage']}" if p["stage"] else ""
        how = " (kernel high-water mark, between samples)" if p["source"] == "hwm" else ""
        lines.append(f"peak footprint: {_size(p['bytes'])} at {p['t']:.1f} s{where}{how}")
    sw = s["swap"]
    growth = "" if sw["growth"] is None else f" (+{_size(sw['growth'])})"
    lines.append(f"swap used: start {_size(sw['start'])}, peak {_size(sw['peak'])}{growth}, "
                 f"end {_size(sw['end'])}")
    if s["available_min"] is not None:
        lines.append(f"lowest available memory: {_size(s['available_min'])}")
    ld = s["loads"]
    lines.append(f"loaded: {ld['count']} loads ({ld['reloads']} of them reloads), {_size(ld['bytes'])} "
                 f"in {_sec(ld['seconds'])}; {len(s['outside_stage'])} outside their stage")
    if s["stages"]:
        width = max(12, max(len(str(st["stage"])) for st in s["stages"]) + 2,
                    max((len(str(sub["stage"])) + 6 for st in s["stages"]
                         for sub in st.get("substeps") or ()), default=0))
        lines += ["", f"{'stage':<{width}}{'time':>9}{'release':>9}{'peak':>11}  loads"]
        for st in s["stages"]:
            mark = "*" if st["peak_hwm"] is not None and st["peak_hwm"] == st["peak"] \
                and st["peak_hwm"] != st["peak_footprint"] else " "
            loads = (f"{st['loads']} · {_size(st['load_bytes'])} · {_sec(st['load_seconds'])}"
                     if st["loads"] else "–")
            lines.append(f"{str(st['stage']):<{width}}{_sec(st['seconds']):>9}"
                         f"{_sec(st['release_seconds']):>9}{_size(st['peak']):>11}{mark} {loads}")
            for sub in st.get("substeps") or ():
                name = f"  · {sub['stage']}"
                lines.append(f"{name:<{width}}{_sec(sub['seconds']):>9}{'':>9}"
                             f"{_size(sub['peak']):>11}")
        if any(st["peak_hwm"] is not None and st["peak_hwm"] == st["peak"]
               and st["peak_hwm"] != st["peak_footprint"] for st in s["stages"]):
            lines.append("* peak from the kernel high-water mark (a spike between samples)")
    if s["outside_stage"]:
        lines += ["", "loads outside their stage:"]
        for o in s["outside_stage"]:
            lines.append(f"  {o['model']} ({o['event']}) during {o['stage']}: "
                         f"{_size(o['bytes'])} in {_sec(o['seconds'])} at {o['t']:.1f} s")
    return "\n".join(lines)


# Exit status when the reader of stdout went away (``summary … | head -1``): 128 + SIGPIPE, the
# status a C tool killed by SIGPIPE reports, so ``set -o pipefail`` scripts see the same thing.
EXIT_BROKEN_PIPE = 141


def print_quietly(text: str) -> int:
    """Print ``text`` and flush; 0, or :data:`EXIT_BROKEN_PIPE` without a word when stdout was
    closed by its reader (e.g. ``| head -1``).

    Python ignores SIGPIPE, so a closed pipe shows up as ``BrokenPipeError``; stdout is then
    pointed at ``os.devnull`` so that the interpreter's own flush at exit does not raise (and
    print "Exception ignored …") again — the recipe in the Python docs' ``signal`` page, "Note on
    SIGPIPE"."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return 0
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    """Command line: print the summary of TRACE as text, or JSON (bytes, seconds) with
    ``--json``. Exit 0; 2 with a one-line message when the trace is missing, unreadable or not a
    trace; 141 quietly when stdout was closed early (``| head``)."""
    parser = argparse.ArgumentParser(
        prog="python -m stageload summary",
        description="Peak footprint per stage and overall, swap at start/peak/end, seconds per "
                    "stage, bytes and seconds loaded, loads outside their stage.")
    parser.add_argument("trace", help="JSONL trace written by stageload's Sampler (e.g. a --trace option)")
    parser.add_argument("--json", action="store_true", help="print JSON (sizes in bytes)")
    args = parser.parse_args(argv)
    try:
        summary = summarize(iter_lines(args.trace))
    except TraceError as exc:
        print(f"stageload summary: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"stageload summary: cannot read {args.trace}: {exc.strerror or exc}; check the "
              "path and that you may read it", file=sys.stderr)
        return 2
    return print_quietly(json.dumps(summary, indent=2) if args.json
                         else format_text(summary, args.trace))


if __name__ == "__main__":
    sys.exit(main())
