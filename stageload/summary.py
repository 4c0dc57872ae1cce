"""``python -m stageload summary TRACE [--json]`` and ``summarize(lines)``: what a trace says
about memory, swap, time and loading, per stage and overall.

Stage windows and peaks follow the one rule in :mod:`stageload.meter.window` (also used by the
runner's live ``memory`` events, so the add-on's panel and this summary blame the same stage):
a stage's memory window begins at its ``ready`` event and ends at the next ``stage`` event (or
the end of the trace); a stage without ``ready`` gets the window from its ``stage`` event. A
stage's ``peak`` is the larger of the sampled ``footprint`` and the kernel high-water mark
``hwm`` placed wholly inside the window. docs/meter.md describes both.

Seconds per stage run from its ``stage`` event to the next ``stage`` event (or the end);
``release_seconds`` is the ``ready`` event's ``seconds``. Loads are ``load`` and ``reload``
events, counted in the stage whose [``stage``, next ``stage``) span holds their time; their
seconds are also split by the cache hit: ``loads.prefetched`` (the event says
``prefetched: true``: its files were read ahead, ``stageload.prefetch``) and ``loads.cold``
(the others). ``prefetch`` counts the ``prefetch`` events by ``state`` with their bytes and
seconds.

Streaming: the trace is read once, line by line (:class:`stageload.trace.TraceReader`), and
memory stays bounded whatever its length — per stage one row, at most
:data:`OUTSIDE_STAGE_KEPT` outside-stage loads listed (all counted), and the sample rate from a
fixed-size reservoir of sample gaps (:data:`GAP_RESERVOIR`; exact below that many samples).
Junk numbers (strings, NaN, 1e400, negatives) are skipped and counted, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from typing import Iterable

from meshfacts.units import format_size

from .meter.window import StagePeaks, WindowPeak
from .trace import TraceError, TraceReader, iter_lines

LOAD_EVENTS = ("load", "reload")
GPU_FIELDS = ("peak", "current", "allocated")
OUTSIDE_STAGE_KEPT = 1000
GAP_RESERVOIR = 10_000
OUTSIDE_STAGE_SHOWN = 20  # in the text; --json has OUTSIDE_STAGE_KEPT
FACT_TEXT_MAX = 80  # characters of a sub-step fact given as text


PREFETCH_STATES = ("done", "stopped", "skipped")


def _tally() -> dict:
    return {"count": 0, "bytes": 0, "seconds": 0.0}


def _add(tally: dict, ev: dict) -> None:
    """Count one event's ``bytes`` and ``seconds`` (junk numbers count as 0: the reader has
    already skipped and counted them)."""
    size, secs = ev.get("bytes"), ev.get("seconds")
    tally["count"] += 1
    tally["bytes"] += size if isinstance(size, int) and not isinstance(size, bool) else 0
    tally["seconds"] += float(secs) if isinstance(secs, (int, float)) and not isinstance(secs,
                                                                                         bool) \
        else 0.0


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


class Summarizer:
    """Streaming form of :func:`summarize`: ``add(event)`` each validated event in time order
    (what :class:`stageload.trace.TraceReader` yields), then ``result(reader)`` gives the same
    dict. ``t0`` is the first event's time (None until one was added). Memory stays bounded
    (module docstring). Used by ``stageload plot`` to read a trace once for both its line and
    its summary."""

    def __init__(self):
        self.peaks = StagePeaks(on_close=self._stage_closed)
        self.stages: list[dict] = []
        self.t0 = self.t_end = None
        self.samples = 0
        self._last_sample_t = None
        self._gaps: list[float] = []
        self._gap_count = 0
        self._rng = random.Random(0)  # reservoir sampling, reproducible
        self.swap = {"start": None, "peak": None, "end": None}
        self.available_min = None
        self.loads = {"count": 0, "reloads": 0, "bytes": 0, "seconds": 0.0,
                      "prefetched": _tally(), "cold": _tally()}
        self.prefetch = {state: _tally() for state in PREFETCH_STATES}
        self.outside: list[dict] = []
        self.outside_count = 0
        self._stage_extra = self._new_extra()
        self._prev_sample: dict | None = None
        self._substeps: list[dict] = []  # of the current stage, closed ones
        self._substep: dict | None = None  # the open one: its event's fields and a WindowPeak
        self.skipped_facts = 0  # sub-step facts that were not a number or a short text

    @staticmethod
    def _new_extra() -> dict:
        return {"loads": 0, "load_bytes": 0, "load_seconds": 0.0, "gpu_all": None,
                "gpu_ready": None}

    def add(self, ev: dict) -> None:
        t = ev["t"]
        self.t0 = t if self.t0 is None else self.t0
        self.t_end = t
        kind = ev.get("event")
        if kind == "sample":
            self._sample(ev)
        elif kind == "stage" and ev.get("parent") is not None:
            self._substep_event(ev)
        elif kind == "stage":
            self.peaks.on_event(ev)  # closes the previous stage with its extras and sub-steps
            self._stage_extra = self._new_extra()
            self._substeps, self._substep = [], None
        elif kind == "ready":
            self.peaks.on_event(ev)
        elif kind in LOAD_EVENTS:
            self._load(ev)
        elif kind == "progress":
            self._facts(ev)
        elif kind == "prefetch" and ev.get("state") in PREFETCH_STATES:
            _add(self.prefetch[ev["state"]], ev)
        elif kind == "gpu":
            values = [ev[k] for k in GPU_FIELDS if ev.get(k) is not None]
            if values and self.peaks.current is not None:
                extra = self._stage_extra
                extra["gpu_all"] = _max(extra["gpu_all"], int(max(values)))
                if self.peaks.current["ready"] is not None:
                    extra["gpu_ready"] = _max(extra["gpu_ready"], int(max(values)))

    def _substep_event(self, ev: dict) -> None:
        # a sub-step of the current stage (others are ignored): it runs to the next sub-step
        # of that stage or to the end of the stage's window
        cur = self.peaks.current
        if cur is None or ev.get("parent") != cur["stage"]:
            return
        self._close_substep(ev["t"])
        self._substep = {"stage": ev.get("stage"), "index": ev.get("index"), "t": ev["t"],
                         "window": WindowPeak(ev["t"]), "facts": {}}

    def _facts(self, ev: dict) -> None:
        """Keep the open sub-step's ``facts``: a ``progress`` event of that sub-step
        (``substep`` its name) may carry ``facts`` (name → number or text: what the step
        found, e.g. the share of a texture its source covered); the last ones stand. Values
        that are not a finite number or a short text are skipped and counted."""
        sub, facts = self._substep, ev.get("facts")
        if sub is None or ev.get("substep") != sub["stage"] or not isinstance(facts, dict):
            return
        for name, value in facts.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value)
            if isinstance(name, str) and (number or (isinstance(value, str)
                                                     and len(value) <= FACT_TEXT_MAX)):
                sub["facts"][name] = value
            else:
                self.skipped_facts += 1

    def _close_substep(self, stop: float | None) -> None:
        sub = self._substep
        if sub is None:
            return
        win = sub["window"]
        self._substeps.append({
            "stage": sub["stage"], "index": sub["index"], "start": sub["t"] - self.t0,
            "seconds": (stop if stop is not None else self.t_end) - sub["t"],
            "peak": win.peak, "peak_footprint": win.footprint, "peak_hwm": win.hwm,
            "samples": win.samples, "facts": sub["facts"]})
        self._substep = None

    def _sample(self, ev: dict) -> None:
        self.samples += 1
        self.peaks.on_sample(ev)
        if self._substep is not None:
            self._substep["window"].add(self._prev_sample, ev)
        self._prev_sample = ev
        t, last = ev["t"], self._last_sample_t
        self._last_sample_t = t
        if last is not None and t > last:
            self._gap_count += 1
            if len(self._gaps) < GAP_RESERVOIR:
                self._gaps.append(t - last)
            else:
                k = self._rng.randrange(self._gap_count)
                if k < GAP_RESERVOIR:
                    self._gaps[k] = t - last
        swap = ev.get("swap")
        if swap is not None:
            sw = self.swap
            sw["start"] = swap if sw["start"] is None else sw["start"]
            sw["peak"], sw["end"] = _max(sw["peak"], swap), swap
        self.available_min = (ev.get("available") if self.available_min is None
                              else min(v for v in (self.available_min, ev.get("available"))
                                       if v is not None))

    def _load(self, ev: dict) -> None:
        size, secs = int(ev.get("bytes") or 0), float(ev.get("seconds") or 0)
        ld = self.loads
        ld["count"] += 1
        ld["reloads"] += ev["event"] == "reload"
        ld["bytes"] += size
        ld["seconds"] += secs
        _add(ld["prefetched"] if ev.get("prefetched") is True else ld["cold"], ev)
        if self.peaks.current is not None:
            extra = self._stage_extra
            extra["loads"] += 1
            extra["load_bytes"] += size
            extra["load_seconds"] += secs
        if ev.get("outside_stage"):
            self.outside_count += 1
            if len(self.outside) < OUTSIDE_STAGE_KEPT:
                self.outside.append({"model": ev.get("model"), "stage": ev.get("stage"),
                                     "event": ev["event"], "bytes": ev.get("bytes"),
                                     "seconds": ev.get("seconds"), "t": ev["t"] - self.t0})

    def _stage_closed(self, rec: dict) -> None:
        self._close_substep(rec["end"])
        end = rec["end"] if rec["end"] is not None else self.t_end
        extra, win = self._stage_extra, rec["window"]
        self.stages.append({
            "stage": rec["stage"], "index": rec["index"], "count": rec["count"],
            "start": rec["start"] - self.t0,
            "ready": rec["ready"] - self.t0 if rec["ready"] is not None else None,
            "seconds": end - rec["start"],
            "release_seconds": rec["release_seconds"], "released_bytes": rec["released_bytes"],
            "window_seconds": end - win.start,
            "peak": win.peak, "peak_footprint": win.footprint, "peak_hwm": win.hwm,
            "samples": win.samples,
            "loads": extra["loads"], "load_bytes": extra["load_bytes"],
            "load_seconds": extra["load_seconds"],
            "gpu_peak": extra["gpu_ready"] if rec["ready"] is not None else extra["gpu_all"],
            "substeps": self._substeps,
        })

    def result(self, reader: TraceReader) -> dict:
        """The summary dict (see :func:`summarize`); ``reader`` says what was truncated or
        skipped. Call once, after the last ``add``."""
        self.peaks.finish(None)
        peak = self.peaks.peak_info()
        if peak["t"] is not None:
            peak["t"] -= self.t0
        sw = self.swap
        return {
            "seconds": self.t_end - self.t0,
            "samples": self.samples,
            "sample_hz": (1.0 / statistics.median(self._gaps)) if self._gaps else None,
            "truncated": reader.truncated,
            "skipped": reader.skipped,
            "first_skipped": reader.first_skipped,
            "peak": peak,
            "swap": dict(sw, growth=(sw["peak"] - sw["start"]) if sw["start"] is not None
                         else None),
            "available_min": self.available_min,
            "loads": self.loads,
            "prefetch": self.prefetch,
            "outside_stage": self.outside,
            "outside_stage_count": self.outside_count,
            "stages": self.stages,
        }


def summarize(lines: Iterable[str | bytes | dict], source: str = "trace") -> dict:
    """Summary of one trace, read in one streaming pass.

    ``lines``: trace lines (str/bytes JSONL, e.g. ``stageload.trace.iter_lines(path)``) or
    event dicts, in file order; ``source`` names them in errors. Returns a JSON-serialisable
    dict, sizes in bytes (int), times in seconds (float), ``None`` where the trace does not
    say::

        {"seconds", "samples", "sample_hz", "truncated", "skipped" (values and events dropped
         as unusable), "first_skipped" ("line 12: footprint=\"abc\"" or None),
         "peak": {"bytes", "t" (s from trace start), "source": "footprint"|"hwm", "stage"},
         "swap": {"start", "peak", "end", "growth"}, "available_min",
         "loads": {"count", "reloads", "bytes", "seconds"},
         "outside_stage": [{"model", "stage", "event", "bytes", "seconds", "t"}] (the first
         1000), "outside_stage_count",
         "stages": [{"stage", "index", "count", "start", "ready" (s from trace start; ready
                     None without a ready event), "seconds", "release_seconds", "released_bytes",
                     "window_seconds", "peak", "peak_footprint", "peak_hwm", "samples",
                     "loads", "load_bytes", "load_seconds", "gpu_peak",
                     "substeps": [{"stage", "index", "start", "seconds", "peak",
                                   "peak_footprint", "peak_hwm", "samples",
                                   "facts" (the sub-step's ``progress`` events' last
                                   ``facts``: name → number or text, {} without)}]}]}

    Sub-steps are ``stage`` events carrying ``"parent": <stage>`` (the export stage's steps,
    runner/PROTOCOL.md); they do not end their parent's window and are listed under it, each
    with a window from its event to the next sub-step's or the end of its parent's window.

    Raises ``TraceError`` if a line other than the last is not a JSON object with ``"event"``,
    or there are no events with a usable ``t``.

    Example: ``summarize(iter_lines("run.trace.jsonl"))["peak"]["stage"]``.
    """
    reader = TraceReader(lines, source)
    acc = Summarizer()
    for event in reader:
        acc.add(event)
    if acc.t0 is None:
        raise TraceError(f"{source}: the trace has no events"
                         + (f" with a usable time ({reader.first_skipped})"
                            if reader.skipped else ""))
    return acc.result(reader)


# -- text -------------------------------------------------------------------------------------
def _size(n) -> str:
    """``n`` bytes for people (:func:`meshfacts.units.format_size`: ``"1.2 GiB"``); ``"–"`` for
    None."""
    return format_size(n, unknown="–")


def _sec(x) -> str:
    if x is None:
        return "–"
    return f"{x:.2f} s" if abs(x) < 10 else f"{x:.1f} s"


def _stage_table(stages: list[dict]) -> list[str]:
    """``format_text``'s table: one line per stage (time, release, peak, loads), its sub-steps
    under it, and the footnote when a peak came from the kernel high-water mark."""
    width = max(12, max(len(str(st["stage"])) for st in stages) + 2,
                max((len(str(sub["stage"])) + 6 for st in stages
                     for sub in st.get("substeps") or ()), default=0))
    lines = [f"{'stage':<{width}}{'time':>9}{'release':>9}{'peak':>11}  loads"]
    for st in stages:
        mark = "*" if st["peak_hwm"] is not None and st["peak_hwm"] == st["peak"] \
            and st["peak_hwm"] != st["peak_footprint"] else " "
        loads = (f"{st['loads']} · {_size(st['load_bytes'])} · {_sec(st['load_seconds'])}"
                 if st["loads"] else "–")
        lines.append(f"{str(st['stage']):<{width}}{_sec(st['seconds']):>9}"
                     f"{_sec(st['release_seconds']):>9}{_size(st['peak']):>11}{mark} {loads}")
        for sub in st.get("substeps") or ():
            name = f"  · {sub['stage']}"
            facts = "  ".join(f"{k} {v:.4g}" if not isinstance(v, str) else f"{k} {v}"
                              for k, v in (sub.get("facts") or {}).items())
            lines.append(f"{name:<{width}}{_sec(sub['seconds']):>9}{'':>9}"
                         f"{_size(sub['peak']):>11}" + (f"   {facts}" if facts else ""))
    if any(st["peak_hwm"] is not None and st["peak_hwm"] == st["peak"]
           and st["peak_hwm"] != st["peak_footprint"] for st in stages):
        lines.append("* peak from the kernel high-water mark (a spike between samples)")
    return lines


def format_text(summary: dict, name: str = "trace") -> str:
    """The summary as text a person reads (sizes in GiB/MiB = 1024³/1024² bytes, seconds)."""
    s = summary
    hz = f" at {s['sample_hz']:.1f} Hz" if s["sample_hz"] else ""
    lines = [f"{name}: {s['seconds']:.1f} s, {s['samples']} samples{hz}"
             + ("  (last line was cut off and skipped)" if s["truncated"] else "")]
    if s.get("skipped"):
        lines.append(f"skipped {s['skipped']} value(s) that are not a usable number "
                     f"(first: {s['first_skipped']})")
    p = s["peak"]
    if p["bytes"] is None:
        lines.append("peak footprint: – (no samples)")
    else:
        where = f" in stage {p['stage']}" if p["stage"] is not None else \
            " outside every stage's window" if s["stages"] else ""
        how = " (kernel high-water mark, between samples)" if p["source"] == "hwm" else ""
        lines.append(f"peak footprint: {_size(p['bytes'])} at {p['t']:.1f} s{where}{how}")
    sw = s["swap"]
    growth = "" if sw["growth"] is None else f" (+{_size(sw['growth'])})"
    lines.append(f"swap used: start {_size(sw['start'])}, peak {_size(sw['peak'])}{growth}, "
                 f"end {_size(sw['end'])}")
    if s["available_min"] is not None:
        lines.append(f"lowest available memory: {_size(s['available_min'])}")
    ld = s["loads"]
    lines.append(f"loaded: {ld['count']} loads ({ld['reloads']} of them reloads), "
                 f"{_size(ld['bytes'])} "
                 f"in {_sec(ld['seconds'])}; {s['outside_stage_count']} outside their stage")
    hit, cold = ld["prefetched"], ld["cold"]
    pre = s["prefetch"]
    if hit["count"] or any(pre[state]["count"] for state in PREFETCH_STATES):
        lines.append(f"load seconds: {_sec(hit['seconds'])} in {hit['count']} loads whose files "
                     f"were read ahead ({_size(hit['bytes'])}), {_sec(cold['seconds'])} in "
                     f"{cold['count']} without ({_size(cold['bytes'])})")
        lines.append("prefetch: " + ", ".join(
            f"{pre[state]['count']} {state} ({_size(pre[state]['bytes'])} in "
            f"{_sec(pre[state]['seconds'])})" for state in PREFETCH_STATES))
    if s["stages"]:
        lines += [""] + _stage_table(s["stages"])
    if s["outside_stage"]:
        lines += ["", "loads outside their stage:"]
        for o in s["outside_stage"][:OUTSIDE_STAGE_SHOWN]:
            lines.append(f"  {o['model']} ({o['event']}) during {o['stage']}: "
                         f"{_size(o['bytes'])} in {_sec(o['seconds'])} at {o['t']:.1f} s")
        if s["outside_stage_count"] > OUTSIDE_STAGE_SHOWN:
            lines.append(f"  … and {s['outside_stage_count'] - OUTSIDE_STAGE_SHOWN} more "
                         "(--json lists the first 1000)")
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
    parser.add_argument("trace",
                        help="JSONL trace written by stageload's Sampler (e.g. a --trace option)")
    parser.add_argument("--json", action="store_true", help="print JSON (sizes in bytes)")
    args = parser.parse_args(argv)
    try:
        summary = summarize(iter_lines(args.trace), source=args.trace)
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
