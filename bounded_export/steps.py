"""Sub-step reporting and cancel checks: ``stage`` events with ``"parent": "export"`` (the
runner's protocol for sub-steps, runner/PROTOCOL.md), ``progress`` events inside a step,
seconds per step, and the caller's cancel flag checked at every piece.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from bounded_export.errors import ExportCancelled
from meshfacts.events import make

PARENT = "export"
SUBSTEPS = ("load", "cleanup", "orient", "decimate", "uv_unwrap", "bake", "seams", "write")
PROGRESS_EVERY = 0.5  # seconds between progress events of one step
HEARTBEAT = 2.0  # seconds between repeated progress events while a child process works
#: each sub-step's share of the export's time at the defaults (measured on a 5 M-face asset by
#: ``python -m bench.export_engine``; ``orient``: about half the cleanup's seconds in the same
#: run, ``python -m bench.export_orient``): turns a step's own fraction into the export stage's
#: fraction.
WEIGHTS = {"load": 0.03, "cleanup": 0.07, "orient": 0.04, "decimate": 0.2, "uv_unwrap": 0.35,
           "bake": 0.25, "seams": 0.05, "write": 0.05}


class Steps:
    """Reports the engine's sub-steps to ``emit`` and checks ``cancel``.

    ``emit``: an event sink (None: events dropped). ``cancel``: None, a callable returning
    True when the export must stop, or an object with ``is_set()`` (``threading.Event``).
    ``seconds`` maps each begun step to its duration (the current one up to now).
    """

    def __init__(self, emit: Callable[[dict], None] | None = None, cancel=None):
        self.emit = emit or (lambda event: None)
        self._cancel = cancel
        self.current: str | None = None
        self.seconds: dict[str, float] = {}
        self._began = 0.0
        self._last_progress = 0.0
        self._fraction = 0.0
        self._fields: dict = {}

    def cancelled(self) -> bool:
        flag = self._cancel
        if flag is None:
            return False
        return bool(flag.is_set() if hasattr(flag, "is_set") else flag())

    def check(self) -> None:
        """Raise ``ExportCancelled`` when the cancel flag is set."""
        if self.cancelled():
            raise ExportCancelled(self.current or "export")

    def begin(self, step: str, **fields) -> None:
        """End the current step and announce ``step`` (index among ``SUBSTEPS``); ``fields``
        go into its ``stage`` event (e.g. the decimation's ``method``)."""
        self.check()
        self.end()
        self.current = step
        self._began = self._last_progress = time.perf_counter()
        self._fraction = 0.0
        self._fields = {}
        self.emit(make("stage", stage=step, index=SUBSTEPS.index(step),
                             count=len(SUBSTEPS), parent=PARENT, **fields))

    def progress(self, fraction: float, force: bool = False, **fields) -> None:
        """After a cancel check, a ``progress`` event (at most one per ``PROGRESS_EVERY`` s
        unless ``force``): ``stage`` "export" with ``fraction`` of the whole export (the steps'
        ``WEIGHTS``), ``substep`` and ``substep_fraction`` (``fraction``, 0..1, of this one),
        and ``fields`` (kept for this step's later events: the heartbeat repeats them)."""
        self.check()
        self._fields = {**self._fields, **fields}
        now = time.perf_counter()
        if force or now - self._last_progress >= PROGRESS_EVERY:
            self._last_progress = now
            own = min(max(float(fraction), 0.0), 1.0)
            self._fraction = own
            done = sum(WEIGHTS[s] for s in SUBSTEPS[:SUBSTEPS.index(self.current)])
            whole = (done + WEIGHTS[self.current] * own) / sum(WEIGHTS.values())
            self.emit(make("progress", stage=PARENT, fraction=round(whole, 4),
                                 substep=self.current, substep_fraction=round(own, 4),
                                 **self._fields))

    def heartbeat(self) -> None:
        """While a child process works (``stoppable``): a cancel check, and the last
        ``progress`` again every ``HEARTBEAT`` s, so a reader (the runner's stall watch) sees
        the export alive although this process itself uses no CPU."""
        self.check()
        if self.current is not None and time.perf_counter() - self._last_progress >= HEARTBEAT:
            self.progress(self._fraction, force=True)

    def end(self) -> None:
        """Record the current step's seconds (idempotent)."""
        if self.current is not None:
            self.seconds[self.current] = time.perf_counter() - self._began
