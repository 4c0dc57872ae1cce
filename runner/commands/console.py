"""The runner's stdout for a person: when stdout is a terminal (and ``--json`` was not given),
``python -m runner``, ``runner batch`` and ``runner export`` print short lines instead of
NDJSON events.

A single run: one line as each stage starts (``[2/4] shape``), progress lines within it (the
percent, the sampler's step, the sub-step, the process tree's footprint and peak) at most one
every ``PROGRESS_EVERY`` seconds, one when it ends (``[2/4] shape done 3.4 s, peak 1.2 GiB``),
and the guard's wait (``waiting: 31 % free, needs 40 %``). A batch: one line per image as it
finishes (``3/12 orc.png done 12.3 s, peak 1.2 GiB`` or ``… failed (not_an_image) 0.1 s``).
Results and errors already get their line on stderr (``runner: wrote …``, ``runner: KIND: …``),
so they are not repeated here. A pipe or a file gets the events exactly as before
(``runner.protocol.Emitter``); the trace always holds the events.

Plain lines, not a redrawn bar (a library such as tqdm): the terminal is shared with the
worker's own stderr, the guard's and the runner's stderr lines, none of which would go
through the bar's writer, so a line redrawn in place would be torn by each of them. Plain
lines also read the same in a scrollback or a ``script`` log. Standard library only, plus
``meshfacts.units`` (itself standard library only), so the supervisor stays light.
"""
from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import Callable

from meshfacts.units import format_size
from runner.protocol import Emitter

PROGRESS_EVERY = 2.0
"""Seconds between two progress lines of one stage (a stage's start, its end and a new
sub-step are always shown)."""

QUIET_AFTER = 10.0
"""Seconds without a line after which a ``memory`` event alone gives a progress line, so a
stage that sends no progress (a model loading) still shows it is alive."""


def stdout_is_terminal() -> bool:
    """True when this process's stdout is a terminal (``isatty``); False for a pipe, a file,
    ``/dev/null`` or a closed stdout."""
    try:
        return bool(sys.stdout is not None and sys.stdout.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def wanted(json_events: bool) -> bool:
    """Whether human lines replace the events: stdout is a terminal and ``--json`` was not
    given (``json_events``)."""
    return not json_events and stdout_is_terminal()


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def _name(path) -> str:
    return Path(str(path)).name if path else "?"


def guard_words(event: dict) -> str | None:
    """What a ``guard`` ``waiting`` event means for a person: ``waiting: 31 % free, needs
    40 %`` (``--wait-free``), ``waiting: 5.1 GiB free, needs 6.0 GiB`` (``--need``), or the
    guard's own ``reason`` when no threshold says it (``--busy``, swap). None for the other
    states (``started`` is the guard's own stderr line; ``timeout`` and ``stopped`` end in an
    error, said on stderr)."""
    if event.get("state") != "waiting":
        return None
    readings = event.get("readings") if isinstance(event.get("readings"), dict) else {}
    thresholds = event.get("thresholds") if isinstance(event.get("thresholds"), dict) else {}
    available, total = readings.get("available"), readings.get("total")
    parts = []
    for cond in thresholds.values():
        if not isinstance(cond, dict):
            continue
        percent, required = cond.get("percent"), cond.get("required")
        if isinstance(percent, (int, float)) and isinstance(available, int) and total:
            parts.append(f"{100 * available / total:.0f} % free, needs {percent:g} %")
        elif isinstance(required, int):
            parts.append(f"{format_size(available)} free, needs {format_size(required)}")
    if not parts:
        parts = [str(event.get("reason") or "no room yet")]
    return "waiting: " + "; ".join(parts)


def batch_line(event: dict, finished: int | None = None) -> str:
    """One ``batch_item`` as a line: ``3/12 orc.png done 12.3 s, peak 1.2 GiB``, ``… failed
    (not_an_image) 0.1 s``, ``… skipped (done before)``, ``… cancelled 4.0 s``. ``finished``:
    how many images have finished with this one (the line's ``k`` of ``k/N``), else the
    event's ``index`` (its place in the folder)."""
    place = event.get("index") if finished is None else finished
    head = f"{place}/{event.get('count')} {_name(event.get('image'))}"
    status, seconds = event.get("status"), event.get("seconds")
    took = f" {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    if status == "done":
        return f"{head} done{took}, peak {format_size(event.get('peak'))}"
    if status == "skipped":
        return f"{head} skipped (done before)"
    if status == "failed":
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        return f"{head} failed ({error.get('kind', '?')}){took}"
    return f"{head} {status}{took}"


class ProgressView:
    """Turns the protocol's events, in stream order, into the lines a person reads (see the
    module's docstring). ``clock`` (seconds, monotonic) paces the progress lines; stage times
    come from the events' own ``t``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.mode = "single"
        self.stage: dict | None = None  # the current stage event (with its start "t")
        self.substep: str | None = None
        self.progress: dict = {}
        self.memory: dict = {}
        self.last_line = float("-inf")
        self.images: dict = {}  # batch: item → image name, from its ``input``
        self.finished = 0  # batch: images finished so far (a cluster's finish out of order)

    def lines(self, event: dict) -> list[str]:
        """The lines ``event`` adds (often none)."""
        kind = event.get("event")
        if kind == "hello":
            return self._hello(event)
        if kind == "guard":
            words = guard_words(event)
            if words is None:
                return []
            item = event.get("item")
            return [f"{self.images.get(item, '')}: {words}" if item is not None else words]
        if self.mode == "batch":
            return self._batch(kind, event)
        if kind == "stage":
            return self._stage(event)
        if kind == "progress":
            self.progress = event
            return self._progress(force=False)
        if kind == "memory":
            self.memory = event
            quiet = self.clock() - self.last_line >= QUIET_AFTER
            return self._progress(force=False) if quiet and self.stage else []
        if kind == "asset":  # runner export: what it is about to export, and its plan
            return [f"asset: {_count(event.get('faces'))} faces, "
                    f"{_count(event.get('vertices'))} vertices, {_count(event.get('voxels'))} "
                    f"voxels; planned peak {format_size(event.get('predicted_peak'))}"]
        if kind in ("result", "error"):
            return self._end_stage(event.get("t"), "done" if kind == "result" else "stopped")
        return []

    def _hello(self, event: dict) -> list[str]:
        self.mode = "batch" if event.get("mode") == "batch" else "single"
        backend = event.get("backend")
        if self.mode == "batch":
            return [f"batch {event.get('input_dir')} → {event.get('output_dir')} ({backend})"]
        if event.get("mode") == "export" and event.get("asset"):
            return [f"{_name(event.get('asset'))} → {event.get('output')} (export)"]
        if not event.get("image"):  # a usage error: its stderr line says it all
            return []
        return [f"{_name(event.get('image'))} → {event.get('output')} ({backend})"]

    def _batch(self, kind, event: dict) -> list[str]:
        if kind == "input" and event.get("item") is not None:
            self.images[event["item"]] = _name(event.get("path"))
        if kind == "batch_item":
            # k of N by completion: the nodes of a cluster finish in any order, and the
            # folder's position would read as a countdown
            self.finished += 1
            return [batch_line(event, self.finished)]
        return []

    def _stage(self, event: dict) -> list[str]:
        if event.get("parent"):  # a sub-step: its own line, inside the stage's
            self.substep = event.get("stage")
            return self._progress(force=True) if self.stage else []
        lines = self._end_stage(event.get("t"), "done")
        self.stage, self.substep, self.progress = event, None, {}
        self.last_line = self.clock()
        return lines + [self._head()]

    def _head(self, stage: dict | None = None) -> str:
        stage = stage or self.stage or {}
        index, count = stage.get("index"), stage.get("count")
        where = f"[{index + 1}/{count}] " if isinstance(index, int) and count else ""
        return f"{where}{stage.get('stage')}"

    def _progress(self, force: bool) -> list[str]:
        now = self.clock()
        if not self.stage or (not force and now - self.last_line < PROGRESS_EVERY):
            return []
        self.last_line = now
        parts = [self._head()]
        if self.substep:
            parts.append(self.substep)
        progress = self.progress if self.progress.get("stage") == self.stage.get("stage") else {}
        step, steps = progress.get("step"), progress.get("steps")
        if isinstance(step, int) and isinstance(steps, int) and steps:
            parts.append(f"step {step}/{steps}")
        fraction = progress.get("fraction")
        if isinstance(fraction, (int, float)):
            parts.append(f"{100 * fraction:.0f} %")
        if self.memory:
            parts.append(f"{format_size(self.memory.get('footprint'))}, peak "
                         f"{format_size(self.memory.get('peak'))}")
        return [" · ".join(parts)]

    def _end_stage(self, t, how: str) -> list[str]:
        stage, self.stage = self.stage, None
        if stage is None:
            return []
        start, took = stage.get("t"), ""
        if isinstance(start, (int, float)) and isinstance(t, (int, float)) and t >= start:
            took = f" {t - start:.1f} s"
        peak = (self.memory.get("stage_peak") if self.memory.get("stage") == stage.get("stage")
                else None)
        peak_words = f", peak {format_size(peak)}" if isinstance(peak, int) else ""
        return [f"{self._head(stage)} {how}{took}{peak_words}"]


class Console(Emitter):
    """An ``Emitter`` that writes ``ProgressView``'s lines instead of the events: same
    locking, flushing and broken-stream handling (a closed terminal cancels the job, as a
    closed pipe does). Lines are written in the terminal's encoding; what it cannot show
    (a path's undecodable bytes) is written as a backslash escape, never an error."""

    human = True
    """Lines for a person (``runner.commands.cli.run_and_report`` then shows the last stage's end
    before the stderr verdict)."""

    def __init__(self, stream=None, on_broken=None, view: ProgressView | None = None):
        super().__init__(stream, on_broken)
        self.view = view or ProgressView()
        self._failed = False

    def _write(self, obj: dict) -> None:
        try:
            lines = self.view.lines(obj)
        except Exception as exc:  # the display only: the trace still holds every event
            if not self._failed:
                self._failed = True
                print(f"runner: progress display: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)
            return
        if not lines:
            return
        text = "".join(line + "\n" for line in lines)
        if isinstance(self.stream, io.TextIOBase):
            self.stream.write(text)
        else:
            encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
            self.stream.write(text.encode(encoding, "backslashreplace"))
        self.stream.flush()


def stderr_is_terminal() -> bool:
    """True when this process's stderr is a terminal (``isatty``)."""
    try:
        return bool(sys.stderr is not None and sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class EventsWithLines(Emitter):
    """The protocol's events on stdout (a file or a pipe) and a person's lines on stderr, when
    stderr is a terminal: ``python -m runner IMG -o OUT.glb > events.ndjson`` at a terminal
    shows its progress instead of an hour of silence. A failing display never stops the
    events (``Console`` reports it once)."""

    human = True
    """A person reads stderr (``runner.commands.cli.run_and_report``: the last stage's end
    before the verdict line)."""

    def __init__(self, on_broken=None):
        super().__init__(on_broken=on_broken)
        self.lines = Console(stream=sys.stderr)

    def _write(self, obj: dict) -> None:
        super()._write(obj)
        try:
            self.lines.emit(obj)
        except Exception:  # the display only: the events above are what the reader relies on
            pass


def make_emitter(json_events: bool, on_broken=None) -> Emitter:
    """The stdout writer of a single run or a batch: a ``Console`` when :func:`wanted`; the
    protocol's ``Emitter`` otherwise — with a person's lines on stderr too
    (``EventsWithLines``) when ``--json`` was not given and only stderr is a terminal."""
    if wanted(json_events):
        return Console(on_broken=on_broken)
    if not json_events and stderr_is_terminal():
        return EventsWithLines(on_broken=on_broken)
    return Emitter(on_broken=on_broken)


__all__ = ["Console", "EventsWithLines", "ProgressView", "batch_line", "guard_words",
           "make_emitter", "wanted", "stdout_is_terminal", "stderr_is_terminal"]
