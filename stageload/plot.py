"""``python -m stageload plot TRACE... -o chart.png``: footprint over time with stage bands,
several runs overlaid.

The chart: one line per run (footprint of the sampled process tree in GiB = 1024³ bytes, against
seconds since the run's first trace line), its peak marked and named in the legend. The first
run's stage windows are shaded (from each ``ready`` to the next ``stage``; the release time
between ``stage`` and ``ready`` is hatched) with the stage names along the top. With more than
one run, a lane per run under the chart shows each run's stages, so runs with different timing
can be compared at a glance.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend change), so
it works without a display and inside other programs. matplotlib is imported only here.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Iterable

from meshfacts.units import format_size

from .summary import Summarizer, print_quietly
from .trace import TraceError, TraceReader, iter_lines

GIB = 1024**3  # the y axis unit (meshfacts.units: binary multiples, IEC labels)
FORMATS = ("png", "svg", "pdf")  # the -o suffixes accepted; all written by matplotlib's Agg canvas
BAND_COLOURS = ["#dbe9f6", "#fde8cf", "#dcefd9", "#f3dcec", "#e8e1f5", "#f9f3c9", "#dff3f3",
                "#f1e0d6"]


#: At most this many points are kept per run's line (twice as many before a halving): a long
#: trace is thinned by keeping the higher of each neighbouring pair, so peaks survive and memory
#: stays bounded whatever the trace's length (a chart cannot show more points than its pixels).
MAX_POINTS = 20_000


class _Series:
    """Footprint over time, thinned to between MAX_POINTS and 2×MAX_POINTS points: each kept
    point is the highest of ``stride`` consecutive samples (stride doubles at each halving)."""

    def __init__(self, limit: int = MAX_POINTS):
        self.limit = limit
        self.times: list[float] = []
        self.values: list[float] = []
        self.stride = 1
        self._bucket: tuple[float, float] | None = None
        self._in_bucket = 0

    def add(self, t: float, value: float) -> None:
        if self._bucket is None or value > self._bucket[1]:
            self._bucket = (t, value)
        self._in_bucket += 1
        if self._in_bucket < self.stride:
            return
        self._flush()
        if len(self.times) >= 2 * self.limit:
            # an odd count leaves the last sample unpaired (strict=False drops it)
            pairs = zip(zip(self.times[0::2], self.values[0::2], strict=True),
                        zip(self.times[1::2], self.values[1::2], strict=True), strict=False)
            kept = [a if a[1] >= b[1] else b for a, b in pairs]
            self.times, self.values = [p[0] for p in kept], [p[1] for p in kept]
            self.stride *= 2

    def _flush(self) -> None:
        if self._bucket is not None:
            self.times.append(self._bucket[0])
            self.values.append(self._bucket[1])
        self._bucket, self._in_bucket = None, 0

    def finish(self) -> tuple[list[float], list[float]]:
        self._flush()
        return self.times, self.values


class Run:
    """One trace prepared for drawing, read in one streaming pass: ``label``, ``times`` (s from
    the first line), ``gib`` (footprint, GiB; thinned to at most 2×:data:`MAX_POINTS` points,
    peaks kept), ``stages`` (list of dicts: ``stage``, ``start``, ``ready``, ``end``, seconds
    from the first line; ``stage`` events with a ``parent`` are not stages), ``substeps``
    (``stage``, ``parent``, ``start``: those sub-step events, within their stage), ``summary``
    (``stageload.summary.summarize``'s dict).

    ``events``: trace lines or event dicts, in file order (e.g. ``iter_lines(path)``). Raises
    ``TraceError`` when they hold no events or are not a trace."""

    def __init__(self, label: str, events: Iterable[str | bytes | dict]):
        reader = TraceReader(events, source=label)
        summarizer = Summarizer()
        series = _Series()
        for ev in reader:
            summarizer.add(ev)
            if ev.get("event") == "sample" and ev.get("footprint") is not None:
                series.add(ev["t"], ev["footprint"] / GIB)
        if summarizer.t0 is None:
            raise TraceError(f"{label}: the trace has no events")
        self.label = label
        self.summary = summarizer.result(reader)
        times, self.gib = series.finish()
        self.times = [t - summarizer.t0 for t in times]
        self.stages = [{"stage": str(st["stage"]), "start": st["start"],
                        "ready": st["ready"] if st["ready"] is not None else st["start"],
                        "end": st["start"] + st["seconds"]} for st in self.summary["stages"]]
        self.substeps = [{"stage": str(sub["stage"]), "parent": str(st["stage"]),
                          "start": sub["start"]}
                         for st in self.summary["stages"] for sub in st["substeps"]]


def load_run(path: str | os.PathLike, label: str | None = None) -> Run:
    """Read the trace at ``path`` into a ``Run`` labelled ``label`` (default: the file stem),
    streaming (memory bounded whatever the trace's length). Raises ``TraceError`` when the file
    is missing, not a regular file (a FIFO) or not a trace."""
    return Run(label or trace_stem(path), iter_lines(path))


def trace_stem(path: str | os.PathLike) -> str:
    """A trace's default label: its file stem, the compression suffix aside (``run`` for
    ``run.jsonl`` and ``run.jsonl.gz`` alike)."""
    return Path(Path(path).name.removesuffix(".gz")).stem


def _stage_colours(runs: list[Run]) -> dict[str, str]:
    names: list[str] = []
    for run in runs:
        for st in run.stages:
            if st["stage"] not in names:
                names.append(st["stage"])
    return {n: BAND_COLOURS[i % len(BAND_COLOURS)] for i, n in enumerate(names)}


def _stagger_labels(fig, ax, texts) -> tuple[int, float]:
    """Move the stage names ``texts`` (horizontal, ``transAxes``, centred on their bands, in
    band order) into rows so that no two overlap: each goes into the first row from the top
    where it clears the previous name by a few pixels (greedy, left to right), and is kept
    inside the axes. Measured after a layout pass (``draw_without_rendering``), so the sizes
    are the ones drawn. Returns (rows used, height of one row as a fraction of the axes)."""
    if not texts:
        return 1, 0.0
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    gap = 4.0  # pixels between neighbours
    row_ends: list[float] = []
    row_height = 0.0
    placed = []
    for text in texts:
        ext = text.get_window_extent(renderer)
        width, height = ext.width, ext.height
        row_height = max(row_height, (height + 3.0) / box.height)
        centre = box.x0 + text.get_position()[0] * box.width
        centre = min(max(centre, box.x0 + width / 2 + 1), box.x1 - width / 2 - 1)
        left = centre - width / 2
        row = next((r for r, end in enumerate(row_ends) if end + gap <= left), len(row_ends))
        if row == len(row_ends):
            row_ends.append(0.0)
        row_ends[row] = left + width
        placed.append((text, (centre - box.x0) / box.width, row))
    for text, x, row in placed:
        text.set_position((x, 0.985 - row * row_height))
    return len(row_ends), row_height


def _draw_stage_bands(ax, run: Run, colours: dict[str, str], x_max: float) -> list:
    """Shade ``run``'s stage windows on ``ax`` (release time hatched), mark its sub-steps, and
    return the stage-name texts placed along the top (for :func:`_stagger_labels`)."""
    band_labels = []
    for st in run.stages:
        colour = colours[st["stage"]]
        if st["ready"] > st["start"]:
            ax.axvspan(st["start"], st["ready"], facecolor="none", edgecolor="#b0b0b0",
                       hatch="///", linewidth=0, zorder=0)
        ax.axvspan(st["ready"], st["end"], facecolor=colour, edgecolor="none", zorder=0)
        ax.axvline(st["start"], color="#909090", linewidth=0.8, zorder=1)
        width = (st["end"] - st["start"]) / x_max
        band_labels.append(ax.text((st["start"] + st["end"]) / 2 / x_max, 0.985, st["stage"],
                                   transform=ax.transAxes, ha="center", va="top",
                                   fontsize=10 if width > 0.07 else 9, color="#303030", zorder=4,
                                   bbox={"boxstyle": "round,pad=0.2", "facecolor": "white",
                                         "alpha": 0.75, "edgecolor": "none"}))
    for sub in run.substeps:  # sub-steps (e.g. export's): dotted lines, names at the bottom
        ax.axvline(sub["start"], color="#707070", linewidth=0.7, linestyle=":", zorder=1)
        ax.text(sub["start"], 0.01, f" {sub['stage']}", transform=ax.get_xaxis_transform(),
                rotation=90, ha="left", va="bottom", fontsize=7, color="#404040", zorder=4)
    return band_labels


def _draw_lanes(lane_ax, runs: list[Run], colours: dict[str, str], line_colours: list[str],
                x_max: float) -> None:
    """One lane per run under the chart with that run's own stage windows."""
    for i, run in enumerate(runs):
        y = len(runs) - 1 - i
        for st in run.stages:
            lane_ax.broken_barh([(st["ready"], st["end"] - st["ready"])], (y - 0.38, 0.76),
                                facecolors=colours[st["stage"]], edgecolors=line_colours[i],
                                linewidth=0.8)
            if (st["end"] - st["ready"]) / x_max > 0.06:
                lane_ax.text((st["ready"] + st["end"]) / 2, y, st["stage"], ha="center",
                             va="center", fontsize=8, clip_on=True)
    lane_ax.set_yticks(range(len(runs)), [run.label for run in reversed(runs)], fontsize=9)
    for tick, colour in zip(lane_ax.get_yticklabels(), reversed(line_colours), strict=False):
        tick.set_color(colour)
    lane_ax.set_ylim(-0.6, len(runs) - 0.4)
    lane_ax.set_xlabel("seconds since start of each run")
    lane_ax.set_title(f"stages of each run (shaded above: {runs[0].label})", fontsize=9,
                      loc="left")


def _draw_run(ax, run: Run, *, annotate: bool):
    """One run's footprint line on ``ax``, labelled with its peak, and the peak's ▼ marker
    (with its size written above it when ``annotate``). Returns the line."""
    p = run.summary["peak"]
    peak_txt = f"peak {format_size(p['bytes'])}" if p["bytes"] else "no peak"
    if p.get("stage"):
        peak_txt += f" in {p['stage']}"
    if p.get("source") == "hwm":
        peak_txt += " (kernel high-water mark, ▼ between samples)"
    (line,) = ax.plot(run.times, run.gib, linewidth=1.8, zorder=3,
                      label=f"{run.label} — {peak_txt}")
    if p["bytes"]:
        ax.plot([p["t"]], [p["bytes"] / GIB], marker="v", markersize=9, zorder=5,
                color=line.get_color(), markeredgecolor="black", markeredgewidth=0.6)
        if annotate:
            ax.annotate(format_size(p["bytes"]), (p["t"], p["bytes"] / GIB), xytext=(0, 8),
                        textcoords="offset points", ha="center", fontsize=9)
    return line


def make_figure(runs: list[Run], title: str | None = None):
    """A matplotlib ``Figure`` (Agg canvas attached) drawing ``runs``. Raises ``ValueError``
    when no run has a single sample."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not any(run.times for run in runs):
        raise ValueError("no samples in any trace: nothing to draw (was the trace written with a "
                         "Sampler, e.g. with a --trace option?)")
    lanes = len(runs) > 1
    fig = Figure(figsize=(12, 6.2 + (0.45 * len(runs) if lanes else 0)), dpi=110,
                 layout="constrained")
    FigureCanvasAgg(fig)
    if lanes:
        ax, lane_ax = fig.subplots(2, 1, sharex=True,
                                   gridspec_kw={"height_ratios": [6, 0.45 * len(runs) + 0.3]})
    else:
        ax, lane_ax = fig.subplots(1, 1), None
    colours = _stage_colours(runs)
    x_max = max(max(run.times, default=0) for run in runs)
    x_max = max([x_max] + [st["end"] for run in runs for st in run.stages]) or 1.0
    y_max = max(max(run.gib, default=0) for run in runs)
    peaks = [run.summary["peak"]["bytes"] for run in runs if run.summary["peak"]["bytes"]]
    y_max = max([y_max] + [p / GIB for p in peaks]) or 1.0

    band_labels = _draw_stage_bands(ax, runs[0], colours, x_max)
    ax.set_xlim(0, x_max)
    rows, row_height = _stagger_labels(fig, ax, band_labels)

    handles = [_draw_run(ax, run, annotate=len(runs) == 1) for run in runs]
    line_colours = [line.get_color() for line in handles]

    # headroom above the highest point for the peak label and every row of stage names
    ax.set_ylim(0, y_max / max(0.3, 0.82 - (rows - 1) * row_height))
    ax.set_ylabel("footprint (GiB)")
    ax.grid(True, axis="y", color="#d0d0d0", linewidth=0.6)
    # outside the axes, under the chart: never hides a line, a band name or the peak label
    fig.legend(handles=handles, loc="outside lower center", fontsize=9,
               ncols=1 if len(runs) < 4 else 2, frameon=False)
    ax.set_title(title or ("Memory footprint over time" if len(runs) == 1 else
                           f"Memory footprint over time — {len(runs)} runs"), fontsize=12)
    if lane_ax is None:
        ax.set_xlabel("seconds since start")
        return fig

    _draw_lanes(lane_ax, runs, colours, line_colours, x_max)
    return fig


def write_figure(fig, out: Path, fmt: str) -> None:
    """Save ``fig`` as ``out`` in ``fmt`` (``png``/``svg``/``pdf``) via a temporary file in the
    same folder, renamed over ``out`` only when complete (a failed or killed save never leaves a
    half chart under the real name). Raises ``OSError`` when the folder cannot be written; the
    temporary file is removed then.

    The temporary file is created with ``os.open(O_CREAT | O_EXCL, 0o666)`` rather than
    ``tempfile.mkstemp``: mkstemp makes files ``-rw-------`` whatever the umask, and the rename
    would give the chart those permissions; here the umask applies as for any new file."""
    for _ in range(100):
        tmp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name next to {out}")
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=fmt)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list[str] | None = None) -> int:
    """Command line. Exit 0 when the chart was written; 2 with a message for a missing or
    unreadable trace, an output that is a folder, an existing output (without ``--force``), a
    missing output folder, an output name without ``.png``/``.svg``/``.pdf`` or mismatched
    ``--label``s; 1 with a message when the chart cannot be written
    (folder not writable, read-only file system, disk full)."""
    parser = argparse.ArgumentParser(
        prog="python -m stageload plot",
        description="Chart of footprint over time (GiB) with stage bands; several runs overlaid.")
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="JSONL trace(s)")
    parser.add_argument("-o", "--output", required=True, help="image to write (.png, .svg, .pdf)")
    parser.add_argument("--label", action="append", default=None,
                        help="legend label per trace, in order (default: each file's stem)")
    parser.add_argument("--title", help="chart title")
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"stageload plot: {message}", file=sys.stderr)
        return 2

    labels = args.label or [None] * len(args.traces)
    if len(labels) != len(args.traces):
        return fail(f"{len(labels)} --label given for {len(args.traces)} traces; give one per "
                    "trace or none")
    out = Path(args.output)
    if out.is_dir():  # before "exists": --force cannot turn a folder into a chart
        return fail(f"{out} is a folder; give a file name such as {out / 'chart.png'}")
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        have = f"ends in .{fmt}" if fmt else "has no extension"
        return fail(f"{out} {have}; name the chart .png, .svg or .pdf (e.g. "
                    f"{out.with_suffix('.png').name if fmt else out.name + '.png'})")
    if out.exists() and not args.force:
        return fail(f"{out} exists; choose another name or add --force to replace it")
    if not out.parent.is_dir():
        return fail(f"folder {out.parent} does not exist")
    runs = []
    for path, label in zip(args.traces, labels, strict=True):
        try:
            runs.append(load_run(path, label))
        except TraceError as exc:
            return fail(str(exc))
        except OSError as exc:  # e.g. a trace this user may not read, or a read error
            return fail(f"cannot read {path}: {exc.strerror or exc}; check the path and that "
                        "you may read it")
    try:
        fig = make_figure(runs, args.title)
    except ValueError as exc:
        return fail(str(exc))
    try:
        write_figure(fig, out, fmt)
    except OSError as exc:
        print(f"stageload plot: cannot write {out}: {exc.strerror or exc}; choose a folder you "
              "can write to (-o)", file=sys.stderr)
        return 1
    return print_quietly(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
