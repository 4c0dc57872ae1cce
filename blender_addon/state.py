"""Runner events → what the "Image to Mesh" panel shows. Pure Python: no bpy, no threads.

The add-on's timer callback feeds every event it reads from the runner (``runner/PROTOCOL.md``,
version 1) to :meth:`JobState.apply` on Blender's main thread; the panel draws
:meth:`JobState.view`. Keeping this free of ``bpy`` lets the tests replay a recorded event stream
and check the panel's content at every event.

Units: sizes are bytes (int) in the state and human-readable in the view through the project's
one byte formatter (``stageload.units.format_size``: binary multiples labelled KiB/MiB/GiB, as
the guard, ``stageload summary`` and the memory chart print them); times are
seconds (float, ``time.time()`` clock, the clock of the events' ``"t"`` field).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from . import events as _events
from . import runtime_facts as _facts

PROTOCOL_VERSION = _facts.PROTOCOL_VERSION

# Job statuses, in the order a run goes through them.
IDLE, STARTING, WAITING, RUNNING, IMPORTING, DONE, FAILED, CANCELLED = (
    "idle", "starting", "waiting", "running", "importing", "done", "failed", "cancelled")
FINISHED = (DONE, FAILED, CANCELLED)

PENDING, ACTIVE, COMPLETE = "pending", "running", "done"  # stage row statuses
_NEEDS_RE = re.compile(r"<\s*([0-9.]+\s*(?:%|[kMGT]?i?B))")


def human_bytes(n: float | int | None) -> str:
    """A byte count for people, as the whole project writes it (``stageload.units.format_size``:
    binary multiples labelled KiB/MiB/GiB, e.g. ``1288490189 -> "1.2 GiB"``); ``"unknown"`` for
    None."""
    return _facts.format_size(n)


def human_seconds(s: float | None) -> str:
    """Format a duration in seconds: ``75.2 -> "1:15"``, ``4.25 -> "4.2 s"``."""
    if s is None:
        return "–"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _peak_bytes(value) -> int | None:
    """A peak as bytes from a ``result`` event: a number, or the trace summary's
    ``{"bytes": …, "t": …, "stage": …}`` form; None when absent."""
    if isinstance(value, dict):
        value = value.get("bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class StageRow:
    """One row of the stage list: ``name``, ``status`` (pending / running / done), ``seconds``
    spent in it (None until it ends)."""
    name: str
    status: str = PENDING
    seconds: float | None = None
    started: float | None = None


@dataclass
class PanelView:
    """Everything the panel draws for a job, as plain strings and numbers.

    ``stage_rows``: list of (stage name, status, seconds text); ``progress``: 0..1 over the whole
    run; the ``*_text`` fields are ready to print ("" = draw nothing).
    """
    status: str
    headline: str
    stage_rows: list[tuple[str, str, str]]
    progress: float
    progress_text: str
    memory_text: str
    swap_text: str
    guard_text: str
    elapsed_text: str
    result_text: str
    error_text: str
    hint_text: str
    note_text: str = ""  # the runner's warnings, and a newer protocol version
    #: stage name → its sub-steps as (name, status, seconds text), e.g. export's remesh, bake
    substep_rows: dict = field(default_factory=dict)


@dataclass
class JobState:
    """The state of one runner job, built only from the runner's events.

    Call :meth:`begin` when the process is spawned, :meth:`apply` for each event (in order),
    :meth:`finish_process` when the process has exited (its return code and stderr tail catch a
    runner that died without an ``error`` event), and :meth:`mark_cancelled` on user cancel.
    """
    image: str = ""
    status: str = IDLE
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
    history: list = field(default_factory=list)  # every status taken, in order

    MAX_WARNINGS = 20
    MAX_SUBSTEPS = 32  # per stage; the pixal3d export has 8 (runner/PROTOCOL.md)

    def __setattr__(self, name, value):
        # Record every status transition where it happens, so a test (or a log) sees each one,
        # however quickly the next follows.
        if name == "status" and self.__dict__.get("status") != value:
            self.__dict__.setdefault("history", []).append(value)
        object.__setattr__(self, name, value)

    # ------------------------------------------------------------------ transitions
    def begin(self, image: str, now: float | None = None) -> None:
        """Reset for a new run of ``image`` (path str); ``now`` in seconds (default: now)."""
        self.__dict__.pop("history", None)
        self.__init__(image=image, status=STARTING, started=time.time() if now is None else now)
        self.history = [STARTING]

    def fail(self, kind: str, message: str, hint: str = "", now: float | None = None) -> None:
        """Record a failure found by the add-on itself (bad preference, spawn failure …)."""
        self.status = FAILED
        self.error = {"kind": kind, "message": message, "hint": hint}
        self.ended = time.time() if now is None else now
        self._close_running_stage(self.ended)

    def mark_cancelled(self, now: float | None = None) -> None:
        """The user cancelled: the job ends as ``cancelled`` whatever the runner prints next."""
        if self.status in FINISHED:
            return
        self.status = CANCELLED
        self.ended = time.time() if now is None else now
        self.error = {"kind": "cancelled", "message": "Cancelled; the runner was stopped.",
                      "hint": ""}
        self._close_running_stage(self.ended, done=False)

    def mark_importing(self) -> None:
        """The GLB is written and is being imported into the scene."""
        if self.status not in FINISHED:
            self.status = IMPORTING

    def mark_done(self, now: float | None = None) -> None:
        """The mesh is in the scene."""
        self.status = DONE
        self.ended = time.time() if now is None else now

    def finish_process(self, returncode: int | None, stderr_tail: str = "",
                       now: float | None = None) -> None:
        """The runner process has exited with ``returncode``; decide the outcome if no event did.

        A ``result`` event leaves the status for the caller (it imports next); an ``error`` event
        already failed the job; silence plus a non-zero code becomes a ``runner_died`` failure
        carrying the last lines of stderr.
        """
        now = time.time() if now is None else now
        if self.status in FINISHED or self.result is not None:
            return
        tail = stderr_tail.strip().splitlines()[-3:]
        self.fail("runner_died",
                  f"The runner exited with code {returncode} without reporting a result."
                  + (f" Last output: {' | '.join(tail)}" if tail else ""),
                  "Run “Check” in the add-on preferences; see the system console for the log.",
                  now=now)

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
            self.status = STARTING

    def _on_guard(self, ev: dict, t: float) -> None:
        self.guard_state = ev.get("state")
        self.guard_reason = ev.get("reason") or ""
        readings = ev.get("readings") or {}
        self.guard_readings = readings if isinstance(readings, dict) else {}
        for key in ("available", "total", "swap"):
            if self.guard_readings.get(key) is not None:
                setattr(self, key, self.guard_readings[key])
        if self.guard_state == "waiting" and self.status not in FINISHED:
            self.status = WAITING
        elif self.guard_state == "started" and self.status not in FINISHED:
            self.status = RUNNING
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

    def _close_running_stage(self, t: float, done: bool = True) -> None:
        self._close_rows(self._all_rows(), t, done)

    def _all_rows(self) -> list[StageRow]:
        """The stage rows, then every stage's sub-step rows."""
        return self.stages + [r for rows in self.substeps.values() for r in rows]

    @staticmethod
    def _close_rows(rows: list[StageRow], t: float, done: bool = True) -> None:
        """End the running row(s) of ``rows`` at ``t`` (seconds): done, or back to pending."""
        for row in rows:
            if row.status == ACTIVE:
                row.seconds = max(0.0, t - row.started) if row.started is not None else None
                row.status = COMPLETE if done else PENDING

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
            self.status = RUNNING

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
        self._close_running_stage(t)
        for row in self._all_rows():
            if row.status == PENDING:
                row.status = COMPLETE
        self.stage_fraction, self.substep = 1.0, None
        if self.status != CANCELLED:
            self.status = IMPORTING
            self.ended = t

    def _on_error(self, ev: dict, t: float) -> None:
        if self.status == CANCELLED:
            return
        self.error = {"kind": ev.get("kind") or "error", "message": ev.get("message") or "",
                      "hint": ev.get("hint") or "", "exit_code": ev.get("exit_code")}
        self.status = FAILED
        self.ended = t
        self._close_running_stage(t, done=False)

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
        """The guard's state for people, e.g. ``"waiting: 31 % free, needs 40 %"``."""
        if self.guard_state is None:
            return ""
        r = self.guard_readings
        avail, total = r.get("available"), r.get("total")
        free = (f"{100.0 * avail / total:.0f} % free"
                if isinstance(avail, (int, float)) and isinstance(total, (int, float)) and total
                else "")
        # stageload.guard words a wait as "available 31 % < 40 %" (or "… 7.2 GiB < 9.5 GiB"): the
        # threshold is what follows "<".
        m = _NEEDS_RE.search(self.guard_reason)
        need_txt = f"needs {m.group(1).strip()}" if m else ""
        if self.guard_state == "waiting":
            details = ", ".join(x for x in (free, need_txt) if x) or self.guard_reason
            return f"waiting: {details}" if details else "waiting"
        if self.guard_state == "started":
            return f"admitted{': ' + free if free else ''}"
        return f"{self.guard_state}: {self.guard_reason}".rstrip(": ")

    def view(self, now: float | None = None) -> PanelView:
        """What the panel draws now (``now`` in seconds, default: the current time)."""
        now = time.time() if now is None else now
        rows = [self._row_view(r, now) for r in self.stages]
        sub_rows = {parent: [self._row_view(r, now) for r in subs]
                    for parent, subs in self.substeps.items()}
        n = len(self.stages)
        idx = next((i for i, r in enumerate(self.stages) if r.name == self.stage), None)
        if self.status in (IMPORTING, DONE):
            ptext = "done" if self.status == DONE else "importing"
        elif self.stage is not None and idx is not None:
            ptext = f"{self.stage} ({idx + 1}/{n}) {self.stage_fraction * 100:.0f} %"
            if self.substep and self.status not in FINISHED:
                ptext += f" · {self.substep}"
        else:
            # Between spawn (or admission) and the first stage the worker is still starting.
            ptext = {WAITING: "waiting for memory", STARTING: "starting…",
                     RUNNING: "starting…"}.get(self.status, "")
        mem = ""
        if self.footprint is not None or self.peak is not None:
            mem = f"footprint {human_bytes(self.footprint)} · peak {human_bytes(self.peak)}"
            if self.stage_peak is not None and self.stage:
                mem += f" · {self.stage} peak {human_bytes(self.stage_peak)}"
        swap = ""
        if self.swap is not None:
            swap = f"swap {human_bytes(self.swap)}"
            if self.swap_start is not None and self.swap != self.swap_start:
                grow = self.swap - self.swap_start
                swap += f" ({'+' if grow > 0 else ''}{human_bytes(grow)} since start)"
        if self.available is not None:
            avail = f"available {human_bytes(self.available)}"
            if self.total:
                avail += f" of {human_bytes(self.total)}"
            swap = f"{swap} · {avail}" if swap else avail
        elapsed = ""
        if self.started is not None:
            end = self.ended if self.ended is not None else now
            elapsed = f"elapsed {human_seconds(max(0.0, end - self.started))}"
        result = ""
        if self.result is not None and self.status in (IMPORTING, DONE):
            secs = self.result.get("seconds")
            result = f"{self.output}" + (f" in {human_seconds(secs)}" if secs else "")
            if self.peak is not None:
                result += f", peak {human_bytes(self.peak)}"
            if self.input_notes:
                result += f" (input: {'; '.join(self.input_notes)})"
        err = hint = ""
        if self.error is not None:
            err = self.error.get("message") or self.error.get("kind", "")
            hint = self.error.get("hint") or ""
        headline = {
            IDLE: "Ready", STARTING: "Starting the runner…", WAITING: "Waiting for memory",
            RUNNING: f"Running: {self.stage}" if self.stage else "Running",
            IMPORTING: "Importing the mesh", DONE: "Done", FAILED: "Failed",
            CANCELLED: "Cancelled",
        }[self.status]
        return PanelView(self.status, headline, rows, self.progress(), ptext, mem, swap,
                         self.guard_text(), elapsed, result, err, hint,
                         " ".join([self.stall_text, *self.runner_warnings,
                                   self.protocol_note]).strip(),
                         sub_rows)

    @staticmethod
    def _row_view(r: StageRow, now: float) -> tuple[str, str, str]:
        """A stage or sub-step row as (name, status, seconds text) at ``now`` (seconds)."""
        if r.status == ACTIVE and r.started is not None:
            return r.name, r.status, human_seconds(max(0.0, now - r.started))
        return r.name, r.status, human_seconds(r.seconds) if r.seconds is not None else ""
