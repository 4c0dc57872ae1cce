"""Runner events → what the "Image to Mesh" panel shows. Pure Python: no bpy, no threads.

The add-on's timer callback feeds every event it reads from the runner (``runner/PROTOCOL.md``,
version 1) to :meth:`JobState.apply` on Blender's main thread; the panel draws
:meth:`JobState.view`. Keeping this free of ``bpy`` lets the tests replay a recorded event stream
and check the panel's content at every event.

Units: sizes are bytes (int) in the state and human-readable in the view through the project's
one byte formatter (``meshfacts.units.format_size``: binary multiples labelled KiB/MiB/GiB, as
the guard, ``stageload summary`` and the memory chart print them); times are
seconds (float, ``time.time()`` clock, the clock of the events' ``"t"`` field).
"""
from __future__ import annotations

import time
from dataclasses import MISSING, dataclass, field, fields

from . import events as _events
from . import facts as _facts
from .status import (
    ACTIVE,
    CANCELLED,
    COMPLETE,
    DONE,
    FAILED,
    FINISHED,
    IDLE,
    IMPORTING,
    NEXT,
    PENDING,
    RUNNING,
    STARTING,
    WAITING,
    Status,
)
from .view import PanelView, guard_line, human_bytes, human_seconds, make_view  # noqa: F401

PROTOCOL_VERSION = _facts.PROTOCOL_VERSION


def _peak_bytes(value) -> int | None:
    """A peak as bytes from a ``result`` event: a number, or the trace summary's
    ``{"bytes": …, "t": …, "stage": …}`` form; None when absent."""
    if isinstance(value, dict):
        value = value.get("bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class StageRow:
    """One row of the stage list: ``name``, ``status`` (pending / running / done, or the job's
    end — failed / cancelled — for the row it stopped in), ``seconds``
    spent in it (None until it ends)."""
    name: str
    status: str = PENDING
    seconds: float | None = None
    started: float | None = None


GUI_DIED_HINT = "Run “Check” in the add-on preferences; see the system console for the log."
"""What to do when the runner died without an answer, in Blender's window."""


def command_line_died_hint(python: str) -> str:
    """What to do when the runner (run with the interpreter ``python``) died without an answer,
    for a ``headless.py`` user: there is no preferences window or system console there."""
    return (f"Check that interpreter with `{python} -m runner check`, or pass another with "
            "--python.")


@dataclass
class JobState:
    """The state of one runner job (one image, or a batch's image now running), built only
    from the runner's events.

    Call :meth:`begin` when the process is spawned, :meth:`apply` for each event (in order),
    :meth:`finish_process` when the process has exited (its return code and stderr tail catch a
    runner that died without an ``error`` event), and :meth:`mark_cancelled` on user cancel.
    :attr:`status` changes only through :meth:`transition`, which keeps to
    ``status.NEXT`` and records every status taken in :attr:`history`.
    """
    image: str = ""
    backend: str = ""
    output: str = ""
    trace: str = ""
    pid: int | None = None
    stages: list[StageRow] = field(default_factory=list)
    stage: str | None = None
    substeps: dict = field(default_factory=dict)  # stage name -> [StageRow] of its sub-steps
    substep: str | None = None  # the running sub-step of ``stage`` (memory.substep), or None
    stage_fraction: float = 0.0
    footprint: int | None = None
    peak: int | None = None
    stage_peak: int | None = None
    swap: int | None = None
    swap_start: int | None = None
    available: int | None = None
    total: int | None = None
    guard_state: str | None = None
    guard_reason: str = ""
    guard_readings: dict = field(default_factory=dict)
    guard_thresholds: dict = field(default_factory=dict)  # the guard event's thresholds
    started: float | None = None
    ended: float | None = None
    result: dict | None = None
    error: dict | None = None
    loaded: dict = field(default_factory=dict)  # model name -> bytes, currently resident
    unknown_events: int = 0
    warnings: list = field(default_factory=list)  # notes on invalid fields (at most MAX_WARNINGS)
    protocol_note: str = ""  # set when the runner speaks a newer protocol version
    runner_warnings: list = field(default_factory=list)  # the runner's warning events
    input_notes: list = field(default_factory=list)  # what the runner did to the picture
    stall_text: str = ""  # while the worker is stalled: what the runner said
    history: list = field(default_factory=list)  # every status taken, in order (transition)
    _status: Status = field(default=IDLE, repr=False)

    MAX_WARNINGS = 20
    MAX_SUBSTEPS = 32  # per stage; the pixal3d export has 8 (runner/PROTOCOL.md)

    # ------------------------------------------------------------------ transitions
    @property
    def status(self) -> Status:
        """The job's :class:`status.Status`; changed by :meth:`transition` only."""
        return self._status

    def transition(self, to: Status) -> bool:
        """Move to the status ``to`` when ``status.NEXT`` allows it from the current one, and
        record it in :attr:`history` (every status taken, however quickly the next follows);
        staying in the same status changes nothing. Returns False (and notes it in
        :attr:`warnings`) for a move the table does not allow: the status is kept."""
        to = Status(to)
        if to == self._status:
            return True
        if to not in NEXT[self._status]:
            self._warn(f"status {to} cannot follow {self._status}; kept {self._status}")
            return False
        self._status = to
        self.history.append(to)
        return True

    def begin(self, image: str, now: float | None = None) -> None:
        """Start over for a new run of ``image`` (path str): every field back to its default,
        then the status ``STARTING`` (the first entry of a new :attr:`history`); ``now`` in
        seconds (default: now)."""
        for each in fields(self):
            setattr(self, each.name, each.default if each.default_factory is MISSING
                    else each.default_factory())
        self.image, self.started = image, time.time() if now is None else now
        self.transition(STARTING)

    def fail(self, kind: str, message: str, hint: str = "", now: float | None = None) -> None:
        """Record a failure found by the add-on itself (bad preference, spawn failure …)."""
        self.transition(FAILED)
        self.error = {"kind": kind, "message": message, "hint": hint}
        self.ended = time.time() if now is None else now
        self._close_running_stage(self.ended, end=FAILED)

    def mark_cancelled(self, now: float | None = None) -> None:
        """The user cancelled: the job ends as ``cancelled`` whatever the runner prints next."""
        if self.status in FINISHED:
            return
        self.transition(CANCELLED)
        self.ended = time.time() if now is None else now
        self.error = {"kind": "cancelled", "message": "Cancelled; the runner was stopped.",
                      "hint": ""}
        self._close_running_stage(self.ended, end=CANCELLED)

    def mark_importing(self) -> None:
        """The GLB is written and is being imported into the scene."""
        if self.status not in FINISHED:
            self.transition(IMPORTING)

    def mark_done(self, now: float | None = None) -> None:
        """The mesh is in the scene."""
        self.transition(DONE)
        self.ended = time.time() if now is None else now

    def complete(self, now: float | None = None) -> None:
        """The run is over with its result — a ``result`` event, or in a batch the image's
        ``batch_item`` (done or skipped), which stands for it: the running row(s) end at
        ``now`` and every row not reached is complete."""
        t = time.time() if now is None else now
        self._close_running_stage(t)
        for row in self._all_rows():
            if row.status == PENDING:
                row.status = COMPLETE
        self.stage_fraction, self.substep = 1.0, None

    def mark_skipped(self, now: float | None = None) -> None:
        """A batch image an earlier run finished, its object already in the scene: nothing
        runs or imports; its rows are complete and the job is done."""
        t = time.time() if now is None else now
        self.complete(t)
        if self.status not in FINISHED:
            self.transition(DONE)
            self.ended = t

    def finish_process(self, returncode: int | None, stderr_tail: str = "",
                       now: float | None = None, hint: str = GUI_DIED_HINT) -> None:
        """The runner process has exited with ``returncode``; decide the outcome if no event did.

        A ``result`` event leaves the status for the caller (it imports next); an ``error`` event
        already failed the job; silence plus a non-zero code becomes a ``runner_died`` failure
        carrying the last lines of stderr, with ``hint`` (the add-on's: :data:`GUI_DIED_HINT`;
        ``headless.py`` gives a command-line one, :func:`command_line_died_hint`).
        """
        now = time.time() if now is None else now
        if self.status in FINISHED or self.result is not None:
            return
        tail = stderr_tail.strip().splitlines()[-3:]
        self.fail("runner_died",
                  f"The runner exited with code {returncode} without reporting a result."
                  + (f" Last output: {' | '.join(tail)}" if tail else ""),
                  hint, now=now)

    def apply(self, ev: dict) -> None:
        """Apply one runner event (a dict as in ``runner/PROTOCOL.md``); never raises.

        Every field read here is checked first (``events.clean``: types, finite numbers); a bad
        one is ignored and noted in :attr:`warnings`. Unknown events and fields are ignored, as
        the protocol requires. A newer protocol version (``"v"`` above
        :data:`PROTOCOL_VERSION`) is read as far as the fields known here go, and
        :attr:`protocol_note` says so for the panel."""
        if not isinstance(ev, dict):
            self._warn(f"runner event {ev!r:.60} is not a JSON object; ignored")
            return
        raw = ev
        ev, notes = _events.clean(ev)
        for note in notes:
            self._warn(note)
        if ev is None:  # a kind the runner's event schema does not declare
            self.unknown_events += 1
            return
        self._check_version(ev.get("v"))
        kind = ev.get("event")
        t = ev.get("t")
        t = float(t) if t is not None else time.time()
        if kind == "stage" and "parent" in raw and "parent" not in ev:
            return  # a sub-step whose parent is unreadable must not pass for a new stage
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            self.unknown_events += 1
            return
        if self.status == CANCELLED and kind not in ("result", "error"):
            return
        handler(ev, t)

    def _warn(self, note: str) -> None:
        if len(self.warnings) < self.MAX_WARNINGS:
            self.warnings.append(note)

    def _check_version(self, v) -> None:
        if isinstance(v, int) and v > PROTOCOL_VERSION and not self.protocol_note:
            self.protocol_note = (
                f"The runner speaks protocol version {v}; this add-on knows version "
                f"{PROTOCOL_VERSION}, so some of what it reports may be missing. Install the "
                "add-on and the runner from the same release (the extension zip carries both).")

    # ------------------------------------------------------------------ handlers
    def _on_hello(self, ev: dict, t: float) -> None:
        self.backend = ev.get("backend") or self.backend
        self.output = ev.get("output") or self.output
        self.trace = ev.get("trace") or self.trace
        self.pid = ev.get("pid")
        names = ev.get("stages") or []
        self.stages = [StageRow(str(n)) for n in names]
        if self.status in (IDLE, STARTING):
            self.transition(STARTING)

    def _on_guard(self, ev: dict, t: float) -> None:
        self.guard_state = ev.get("state")
        self.guard_reason = ev.get("reason") or ""
        readings = ev.get("readings") or {}
        self.guard_readings = readings if isinstance(readings, dict) else {}
        thresholds = ev.get("thresholds")
        self.guard_thresholds = thresholds if isinstance(thresholds, dict) else {}
        for key in ("available", "total", "swap"):
            if self.guard_readings.get(key) is not None:
                setattr(self, key, self.guard_readings[key])
        if self.guard_state == "waiting" and self.status not in FINISHED:
            self.transition(WAITING)
        elif self.guard_state == "started" and self.status not in FINISHED:
            self.transition(RUNNING)
            if self.swap_start is None:
                self.swap_start = self.swap

    def _row(self, name: str, index: int | None = None) -> StageRow:
        for row in self.stages:
            if row.name == name:
                return row
        row = StageRow(name)
        if index is not None and 0 <= index <= len(self.stages):
            self.stages.insert(index, row)
        else:
            self.stages.append(row)
        return row

    def _close_running_stage(self, t: float, end: str = COMPLETE) -> None:
        """End every running row (stages and sub-steps) at ``t`` with ``end``: ``COMPLETE``,
        or the job's end (``FAILED``, ``CANCELLED``) for the row(s) it stopped in."""
        self._close_rows(self._all_rows(), t, end)

    def _all_rows(self) -> list[StageRow]:
        """The stage rows, then every stage's sub-step rows."""
        return self.stages + [r for rows in self.substeps.values() for r in rows]

    @staticmethod
    def _close_rows(rows: list[StageRow], t: float, end: str = COMPLETE) -> None:
        """End the running row(s) of ``rows`` at ``t`` (seconds) with status ``end``."""
        for row in rows:
            if row.status == ACTIVE:
                row.seconds = max(0.0, t - row.started) if row.started is not None else None
                row.status = end

    def _on_stage(self, ev: dict, t: float) -> None:
        if ev.get("parent") is not None:
            self._on_substep(ev, t)
            return
        name = str(ev.get("stage"))
        index = ev.get("index")
        self._close_running_stage(t)
        row = self._row(name, index if isinstance(index, int) else None)
        # Every stage planned before this one is over, even one the backend skipped.
        for earlier in self.stages[: self.stages.index(row)]:
            if earlier.status == PENDING:
                earlier.status = COMPLETE
        row.status, row.started = ACTIVE, t
        self.stage, self.stage_fraction, self.stage_peak = name, 0.0, None
        self.substep = None
        if self.status not in FINISHED:
            self.transition(RUNNING)

    def _on_substep(self, ev: dict, t: float) -> None:
        """A ``stage`` event with ``parent``: a step inside that stage (runner/PROTOCOL.md). It
        leaves the current stage, its window and ``stage_peak`` alone; the step before it in the
        same parent is over."""
        rows = self.substeps.setdefault(ev["parent"], [])
        name = str(ev.get("stage"))
        self._close_rows(rows, t)
        row = next((r for r in rows if r.name == name), None)
        if row is None:
            if len(rows) >= self.MAX_SUBSTEPS:
                return
            row = StageRow(name)
            rows.append(row)
        row.status, row.started = ACTIVE, t
        self.substep = name if ev["parent"] == self.stage else self.substep

    def _on_warning(self, ev: dict, t: float) -> None:
        """The runner's advice (e.g. 1536_cascade on a Mac): shown with the job, kept in
        :attr:`runner_warnings`."""
        message = ev.get("message")
        if message and message not in self.runner_warnings and len(self.runner_warnings) < 5:
            self.runner_warnings.append(message)

    def _on_input(self, ev: dict, t: float) -> None:
        """The ``input`` event's notes ("EXIF orientation 6 applied" …): shown with the result
        (at most 5, each cut to 120 characters)."""
        self.input_notes = [str(n)[:120] for n in (ev.get("notes") or [])[:5]]

    def _on_stalled(self, ev: dict, t: float) -> None:
        """The runner noticed the worker stopped moving: said with the job until ``resumed``."""
        reason = ev.get("reason") or f"the worker is {ev.get('why')}"
        seconds = ev.get("seconds")
        self.stall_text = f"Stalled: {reason}" + (f" for {seconds:g} s" if seconds else "")

    def _on_resumed(self, ev: dict, t: float) -> None:
        self.stall_text = ""

    def _on_ready(self, ev: dict, t: float) -> None:
        pass  # the stage's memory window begins; nothing for the panel to change

    def _on_progress(self, ev: dict, t: float) -> None:
        frac = ev.get("fraction")
        if isinstance(frac, (int, float)) and (ev.get("stage") in (None, self.stage)):
            self.stage_fraction = min(1.0, max(0.0, float(frac)))

    def _on_load(self, ev: dict, t: float) -> None:
        if ev.get("model") is not None:
            self.loaded[str(ev["model"])] = int(ev.get("bytes") or 0)

    _on_reload = _on_load

    def _on_release(self, ev: dict, t: float) -> None:
        self.loaded.pop(str(ev.get("model")), None)

    def _on_memory(self, ev: dict, t: float) -> None:
        for key in ("footprint", "peak", "stage_peak", "swap", "available", "total"):
            if key in ev:
                setattr(self, key, ev[key])
        if "substep" in ev:
            self.substep = ev["substep"]
        if self.swap_start is None and self.swap is not None:
            self.swap_start = self.swap

    def _on_result(self, ev: dict, t: float) -> None:
        self.result = ev
        self.output = ev.get("output") or self.output
        self.trace = ev.get("trace") or self.trace
        peak = _peak_bytes(ev.get("peak"))
        if peak is None and isinstance(ev.get("summary"), dict):
            peak = _peak_bytes(ev["summary"].get("peak"))
        if peak is not None:
            self.peak = max(self.peak or 0, peak)
        self.complete(t)
        if self.status != CANCELLED:
            self.transition(IMPORTING)
            self.ended = t

    def _on_error(self, ev: dict, t: float) -> None:
        if self.status == CANCELLED:
            return
        self.error = {"kind": ev.get("kind") or "error", "message": ev.get("message") or "",
                      "hint": ev.get("hint") or "", "exit_code": ev.get("exit_code")}
        self.transition(FAILED)
        self.ended = t
        self._close_running_stage(t, end=CANCELLED if ev.get("kind") == "cancelled" else FAILED)

    # ------------------------------------------------------------------ view
    def progress(self) -> float:
        """Fraction 0..1 of the whole run: finished stages plus the current stage's fraction."""
        if self.status in (IMPORTING, DONE):
            return 1.0
        n = len(self.stages)
        if n == 0 or self.stage is None:
            return 0.0
        done = sum(1 for r in self.stages if r.status == COMPLETE)
        return min(1.0, (done + self.stage_fraction) / n)

    def guard_text(self) -> str:
        """The guard's state for people, e.g. ``"waiting: 31 % free, needs 40 %"``
        (``view.guard_line``: the threshold from the event's structured ``thresholds``)."""
        return guard_line(self)

    def view(self, now: float | None = None) -> PanelView:
        """What the panel draws now (``now`` in seconds, default: the current time;
        ``view.make_view``)."""
        return make_view(self, now)
