"""``Guard``: admission, start, budget and stop for one command, every decision logged.

Library use (a program that supervises its own command)::

    guard = Guard(GuardConfig.from_args(ns), log=sink)
    if not guard.wait_for_admission():       # logs "waiting" … then "timeout"
        return 4
    popen = guard.start(argv)                # own session + process group; logs "started"
    for sample in samples:                   # meter samples (available, total, swap …)
        if guard.check(sample):              # logs "stopped" and stops the whole tree
            return 3
    guard.stop("cancelled")                  # on cancel; idempotent

or simply ``Guard(config).run(argv)``, which is what ``python -m stageload guard`` does.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Callable, TextIO

from ..events import make_event
from . import readings as readings_mod
from .admission import Verdict
from .budget import Budget
from .busy import find_busy, own_lineage
from .config import ConfigError, GuardConfig
from .peers import Peers, looks_like_guard
from .process_tree import ProcessTree, StopReport
from .reservations import Admission, explained
from .waiting import Decision, WaitClock, WaitingLog, decide

#: Exit codes of :meth:`Guard.run` (and of ``python -m stageload guard``) besides the command's own.
EXIT_STOPPED = 3
EXIT_TIMEOUT = 4
EXIT_CANNOT_START = 127
EXIT_SIGNAL_BASE = 128

_LABELS = {"waiting": "waiting", "started": "start", "stopped": "stop", "timeout": "timeout"}
#: How often check() re-reads the command's process tree (seconds); one pass over the process
#: table costs a few milliseconds, so a 10 Hz sampler must not trigger it every time.
REFRESH_EVERY = 0.5
_SLICE = 0.05  # seconds; the longest a signal or an exit goes unnoticed


class Guard:
    """Guard one command at a time.

    ``config``: a :class:`GuardConfig`. ``log``: optional sink (callable taking one dict) that
    receives each decision as ``{"event": "guard", "t": seconds, "state": "waiting" | "started" |
    "stopped" | "timeout", "reason": str, "readings": {...}}`` (readings in bytes, see
    :mod:`stageload.guard.readings`). ``human``: where the one-line human form goes (default
    stderr; None for silence). ``read``: zero-argument callable returning a readings dict
    (default: the meter's ``system_memory()``), replaceable for tests on recorded figures.

    Raises :class:`ConfigError` when ``config.log`` cannot be opened for appending.
    """

    def __init__(self, config: GuardConfig, log: Callable[[dict], None] | None = None, *,
                 human: TextIO | None = sys.stderr,
                 read: Callable[[], dict] | None = None) -> None:
        self.config = config
        self._sink = log
        self._human = human
        self._read = read or readings_mod.read_system
        self._log_file = None
        if config.log:
            try:
                self._log_file = open(config.log, "a", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"--log: cannot append to {config.log!r}: "
                                  f"{exc.strerror or exc}") from None
        self.tree: ProcessTree | None = None
        self.budget: Budget | None = None
        self.decisions: list[dict] = []
        self.stop_report: StopReport | None = None
        self.stopped_by: str | None = None  # "budget" or the reason given to stop()
        self.cancel_signal: int | None = None
        self._cancelled = False
        self._sink_failed = False
        self._admission: tuple[Verdict, dict] | None = None
        self._next_refresh = 0.0
        self.admission = Admission()  # reservations of admitted needs, machine-wide
        if config.need is not None:  # a need is only honoured with usable reservations
            try:
                self.admission.reservations.check()
            except OSError as exc:
                raise ConfigError(
                    f"--need: the guards' reservations cannot be used: {exc}. Without them "
                    "guards started together could each admit the same free memory; set "
                    "$STAGELOAD_GUARD_DIR to a folder only you can use (it is made 0700), or "
                    "drop --need") from None
        self.peers = Peers()
        self.peers.register()  # from the start: other guards must not count this one as busy
        self.exit_code: int | None = None

    # -- logging -----------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        if self._human is not None:
            try:
                print(text, file=self._human, flush=True)
            except (OSError, ValueError):
                pass

    def _decide(self, state: str, reason: str, readings: dict, thresholds: dict | None = None,
                **context) -> dict:
        event = make_event("guard", state=state, reason=reason, readings={**readings, **context})
        if thresholds is not None:  # what available memory must reach (Verdict.thresholds)
            event["thresholds"] = thresholds
        self.decisions.append(event)
        self._say(f"guard: {_LABELS.get(state, state)}: {reason}; "
                  f"{readings_mod.describe(readings)}")
        self._record(event)
        return event

    def _record(self, event: dict) -> None:
        """Write ``event`` to the ``--log`` file and the sink only (no human line)."""
        if self._log_file is not None:
            try:
                self._log_file.write(json.dumps(event) + "\n")
                self._log_file.flush()
            except OSError as exc:
                self._say(f"guard: warning: cannot write --log: {exc}")
        if self._sink is not None:
            try:
                self._sink(event)
            except Exception as exc:  # a broken sink must never keep the guard from stopping
                if not self._sink_failed:
                    self._sink_failed = True
                    self._say(f"guard: warning: log sink failed ({exc!r}); decisions go to stderr "
                              f"only")

    def close(self) -> None:
        """Close the ``--log`` file (decisions already written stay written), leave the
        registry of guards (:mod:`stageload.guard.peers`) and drop this guard's memory
        reservation (:mod:`stageload.guard.reservations`)."""
        self.peers.unregister()
        self.admission.reservations.release()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    # -- admission ---------------------------------------------------------------------------
    def cancel(self, signum: int | None = None) -> None:
        """Ask :meth:`wait_for_admission` / :meth:`run` to give up at their next step (≤ 0.05 s).

        Safe to call from a signal handler or another thread. ``signum`` is remembered so that
        :meth:`run` exits ``128 + signum``.
        """
        if signum is not None and self.cancel_signal is None:
            self.cancel_signal = signum
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` has been called."""
        return self._cancelled

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + max(0.0, seconds)
        while not self._cancelled:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(_SLICE, left))

    def wait_for_admission(self) -> bool:
        """Poll every ``config.poll`` seconds until every admission condition holds.

        Returns True when the command may start, False when ``config.start_timeout`` passed
        (a ``timeout`` decision is logged) or :meth:`cancel` was called. A ``waiting`` decision
        is logged at the first refusal, whenever the blocking conditions change, and every
        10 s while they do not (``waiting.WaitingLog``). Quiet time for ``--busy``: see
        ``waiting.WaitClock``.
        """
        config = self.config
        clock, waiting = WaitClock(config, time.monotonic()), WaitingLog()
        ignore = own_lineage()
        if config.busy:
            self.peers.register()  # other guards must not count this process as busy
        while not self._cancelled:
            decision, now = self._poll(clock, ignore)
            verdict, readings = decision.verdict, decision.readings
            if verdict.ok:
                self._admission = (verdict, readings)
                return True
            context = {"busy": decision.busy} if decision.busy else {}
            if waiting.due(verdict.blocking, now):
                self._decide("waiting", verdict.reason, readings, verdict.thresholds, **context)
            if clock.expired(now):
                self._decide("timeout", f"no room after {config.start_timeout:g} s: "
                             f"{verdict.reason}", readings, verdict.thresholds, **context)
                return False
            self._sleep(clock.pause(now, decision.busy))
        return False

    def _poll(self, clock: WaitClock, ignore: set[int]) -> tuple[Decision, float]:
        """One admission poll: the readings, what other admitted jobs hold, the busy scan,
        the decision (``waiting.decide``) and, when it admits, its confirmation
        (:meth:`_confirm`). Returns the decision and the poll's monotonic time."""
        config = self.config
        readings, held = self._read(), self.admission.held(config)
        busy = self._find_busy(ignore)
        now = time.monotonic()
        quiet = clock.observe(now, busy)
        decision = decide(config, readings, held=held, busy_seen=busy, quiet_seconds=quiet)
        if decision.verdict.ok:
            decision = self._confirm(decision, readings, clock, ignore, now)
        return decision, now

    def _confirm(self, look: Decision, readings: dict, clock: WaitClock, ignore: set[int],
                 now: float) -> Decision:
        """Confirm an admitting ``look`` (made on ``readings`` at ``now``): with ``--busy``,
        under the peers' start lock (only one guard at a time passes from here to its
        command's exec; under it a peer's command that started a moment ago is visible,
        ``peers.py``), then under the machine-wide reservation lock (``reservations.py``),
        which records this guard's need. A refusal releases the start lock."""
        config, quiet = self.config, clock.quiet
        if config.busy:
            if not self.peers.try_lock():
                peer = Verdict(False, "another guard is starting its command", ("peer",))
                return Decision(explained(peer, look.readings), look.readings, look.held)
            busy = self._find_busy(ignore)
            if busy:
                self.peers.unlock()
                clock.observe(now, busy)
                return decide(config, readings, held=look.held, busy_seen=busy,
                              quiet_seconds=quiet)
        decision = self.admission.admit(config, lambda held: decide(
            config, readings, held=held, quiet_seconds=quiet))
        if not decision.verdict.ok:
            self.peers.unlock()
        return decision

    def _find_busy(self, ignore: set[int]) -> list[str]:
        """``--busy`` matches, skipping this process's lineage and every registered guard."""
        if not self.config.busy:
            return []
        return find_busy(self.config.busy, ignore, skip=looks_like_guard,
                         guards=self.peers.guard_pids())

    # -- running -----------------------------------------------------------------------------
    def start(self, argv: list[str], **popen_kwargs):
        """Start ``argv`` in its own session and process group; return its ``subprocess.Popen``.

        Records swap in use at start (the swap budget's baseline) and logs a ``started``
        decision. ``popen_kwargs`` go to ``Popen`` (see :class:`ProcessTree` for the few that
        are refused). Raises ``OSError`` (e.g. ``FileNotFoundError``) when the command cannot
        be started — exit code 127 by convention — and ``RuntimeError`` when a command is
        already running under this guard.
        """
        if self.tree is not None and self.tree.poll() is None:
            raise RuntimeError("a command is already running under this guard")
        readings = self._read()
        self.peers.register()
        try:
            self.tree = ProcessTree(argv, **popen_kwargs)
        finally:
            self.peers.unlock()  # the command has been exec'd (or failed): others may look now
        self.admission.reservations.started(self.tree.pid)  # it now grows into its need
        self.budget = Budget(self.config, readings.get("swap"))
        self.stop_report = None
        self.stopped_by = None
        why = self._admission[0].reason if self._admission else "started without an admission check"
        self._decide("started", f"pid {self.tree.pid}: {why}", readings,
                     pid=self.tree.pid, swap_at_start=readings.get("swap"))
        return self.tree.popen

    def check(self, sample: dict | None = None) -> dict | None:
        """Judge one sample against the budget; stop the command when it is over.

        ``sample``: the meter's ``sample`` dict (``available``, ``total``, ``swap`` … bytes,
        None = unknown) or None to read the system now. Also remembers the command's current
        descendants (so escaped ones can be found later). Returns None while within budget;
        otherwise logs a ``stopped`` decision, stops the whole process tree (SIGTERM, grace,
        SIGKILL — this blocks up to ``config.grace`` + a few seconds) and returns the decision
        dict. Returns None when no command runs.
        """
        if self.tree is None or self.budget is None or self.stop_report is not None:
            return None
        readings = readings_mod.from_sample(sample) if sample is not None else self._read()
        now = time.monotonic()
        if now >= self._next_refresh:  # at most every REFRESH_EVERY s, however fast samples come
            self._next_refresh = now + REFRESH_EVERY
            self.tree.refresh()
        reason = self.budget.observe(readings)
        if reason is None:
            return None
        event = self._decide("stopped", reason, readings, pid=self.tree.pid,
                             swap_at_start=self.budget.swap_at_start,
                             swap_growth=self.budget.growth(readings),
                             low_samples=self.budget.low_samples,
                             pressure_samples=self.budget.pressure_samples)
        self.stopped_by = "budget"
        self._stop_tree()
        return event

    def stop(self, reason: str) -> StopReport | None:
        """Stop the command's whole process tree for ``reason`` (e.g. "cancelled by the user"),
        logging a ``stopped`` decision with the current readings. Idempotent: a second call
        logs nothing and only stops processes that appeared since. Returns the
        :class:`StopReport`, or None when nothing was ever started."""
        if self.tree is None:
            return None
        if self.stop_report is None:
            self._decide("stopped", reason, self._read(), pid=self.tree.pid)
            self.stopped_by = self.stopped_by or reason
        return self._stop_tree()

    def stop_leftovers(self) -> StopReport | None:
        """After the command's leader has exited by itself: stop whatever it left running in
        its group or tree (no ``stopped`` decision — the command was not stopped; a human line
        says how many). Returns the :class:`StopReport`, or None when nothing was left."""
        if self.tree is None:
            return None
        leftovers = self.tree.members(scan=True)
        if not leftovers:
            return None
        code = self.tree.poll()
        self._say(f"guard: the command exited ({code}) leaving {len(leftovers)} process(es); "
                  f"stopping them")
        return self._stop_tree()

    def _stop_tree(self) -> StopReport:
        report = self.tree.stop(self.config.grace)
        if self.stop_report is None:
            self.stop_report = report
        text = (f"guard: stopped {len(report.terminated)} process(es) with SIGTERM"
                f"{f', {len(report.killed)} needed SIGKILL' if report.killed else ''} in "
                f"{report.seconds:.1f} s")
        if report.survivors:
            text += f"; still alive: {report.survivors}"
        self._say(text)
        return report

    def run(self, argv: list[str], **popen_kwargs) -> int:
        """Admission, start, budget, stop — the whole life of one command. Returns the exit code:
        the command's own (128+N when a signal N ended it), 3 stopped by the budget, 4
        admission timed out, 127 could not start, 128+N when :meth:`cancel` was called with
        signal N (the command is stopped first).

        When the command ends by itself, processes it left behind in its group or tree are
        stopped too (a leftover the guard no longer watched could exhaust memory unseen).

        Writes a last line to the ``--log`` file (and the sink) so scripts can tell the
        command's own code from the guard's: ``{"event": "guard", "state": "exited",
        "exit_code": N, "by": "command" | "guard"}``.
        """
        try:
            code, by = self._run(argv, popen_kwargs)
            self._release_watch()
            self.exit_code = code
            self._record(make_event("guard", state="exited", exit_code=code, by=by))
            return code
        finally:
            self._release_watch()
            self.close()

    def _watch_death(self) -> None:
        """Start the watcher that stops the command's group if this guard dies (SIGKILL
        included; ``stageload.guard.deathwatch``). A watcher that cannot start is said on
        stderr; the command runs on, watched by this guard as before."""
        from .deathwatch import DeathWatch

        try:
            self._deathwatch = DeathWatch(self.tree.pgid, self.config.grace).start()
        except OSError as exc:
            self._deathwatch = None
            self._say(f"guard: no watcher for the guard's own death ({exc.strerror or exc}); "
                      "if this guard is killed, its command keeps running")

    def _release_watch(self) -> None:
        watch = getattr(self, "_deathwatch", None)
        if watch is not None:
            watch.release()
            self._deathwatch = None

    def _run(self, argv: list[str], popen_kwargs: dict) -> tuple[int, str]:
        """:meth:`run` without the final record: (exit code, "command" | "guard")."""
        if not self.wait_for_admission():
            if self._cancelled:
                self._say("guard: interrupted while waiting; nothing was started")
                return self._cancel_code(), "guard"
            return EXIT_TIMEOUT, "guard"
        if self._cancelled:
            self._say("guard: interrupted while waiting; nothing was started")
            return self._cancel_code(), "guard"
        try:
            self.start(argv, **popen_kwargs)
        except OSError as exc:
            self._say(f"guard: cannot start {argv[0]!r}: "
                      f"{exc.strerror or exc}{_start_hint(argv[0], exc)}")
            return EXIT_CANNOT_START, "guard"
        self._watch_death()
        next_check = time.monotonic() + self.config.poll
        while True:
            code = self.tree.poll()
            if code is not None:
                break
            if self._cancelled:
                name = _signal_name(self.cancel_signal)
                self.stop(f"the guard got {name}; stopping the command first")
                return self._cancel_code(), "guard"
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.config.poll
                if self.check() is not None:
                    return EXIT_STOPPED, "guard"
            time.sleep(_SLICE)
        self.stop_leftovers()
        if self._cancelled:
            return self._cancel_code(), "guard"
        return (code if code >= 0 else EXIT_SIGNAL_BASE - code), "command"

    def _cancel_code(self) -> int:
        return EXIT_SIGNAL_BASE + (self.cancel_signal or signal.SIGTERM)


def _start_hint(program: str, exc: OSError) -> str:
    """What to do when ``program`` could not be exec'd with a permission error."""
    if not isinstance(exc, PermissionError):
        return ""
    if os.path.isdir(program):
        return f" ({program} is a folder, which cannot be run; give the program inside it)"
    if os.path.isfile(program):
        return (f" ({program} is not executable: make it so with chmod +x {program}, or run it "
                f"with its interpreter, e.g. -- sh {program} or -- python {program})")
    return ""


def _signal_name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name
    except (TypeError, ValueError):
        return "a cancel request"
