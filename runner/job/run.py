"""``JobRun``: one job → GLB from validation to its last event, in named steps, for every
kind of input (``runner.job.inputs``: an image for a backend, a saved asset for the export
engine — ``job.input`` checks itself and makes its worker's job).

``validate`` (the input's backend, the input, output, trace — nothing of an earlier run is touched
before the trace opens) → ``admit`` (the guard's admission) → ``spawn`` (the worker, a
``runner.job.child.Child`` in its own process group) → relay and sample (the child's threads) →
``outcome`` (commit the partial GLB, or the ``RunnerError`` that explains the end, judged by
``runner.job.worker_process.judge_end``) → ``finish`` (the ``result`` or ``error`` event, written
to the
trace and returned in an ``Outcome``).

A step that fails raises ``RunnerError``; :meth:`JobRun.run` turns it into the job's
``error`` event.

This is the supervisor's side of a job: the process that runs it never imports torch (a test
checks ``sys.modules``); the worker (``python -m runner.worker.run``, same interpreter) runs in its
own session and process group through ``stageload.guard.Guard``, its tree sampled from outside
with ``stageload.meter.Sampler`` (10 Hz, ``runner.job.child``), its events relayed, samples turned
into ``memory`` events (``runner.job.memory``), every event and sample written to the JSONL trace
(``runner.job.trace``). ``runner/PROTOCOL.md`` defines the events.
"""
from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from meshfacts.errors import RunnerError
from meshfacts.events import make
from runner import __version__
from runner.job.cancel import Cancel, cancel_error
from runner.job.child import Child, Supervision
from runner.job.claims import claim_all, release_all
from runner.job.limits import resource_error
from runner.job.memory import MemoryTracker
from runner.job.outputs import (
    check_output,
    check_path_limits,
    check_trace,
    commit,
    discard,
    discard_dir,
    failed_runs_trace,
    job_dir,
    missing_folders,
    output_conflict,
    remove_empty,
    sweep_stale_job_dirs,
    sweep_stale_partials,
    temp_path,
    trace_conflict,
)
from runner.job.records import Job, Outcome, WorkerJob, explain_warning, warning_record
from runner.job.trace import JobTrace, log, summarize_trace
from runner.job.worker_process import judge_end, worker_argv
from runner.protocol import relay
from stageload.guard import Guard

RUNNER_VERSION = __version__
"""The ``runner`` field of ``hello`` and of a batch's manifest (``runner.__version__``)."""


class JobRun:
    """One job's run. ``emit`` gets each protocol object for stdout (with ``v``); the trace
    gets them too, plus the samples. ``preamble`` (e.g. ``hello``) is written first into the
    trace. ``tag`` fields are added to every published event (batch: ``item``). ``python`` is
    the worker's interpreter (default: this one). ``guard_config`` is a
    ``stageload.guard.GuardConfig``.

    The job's input says what it runs: its backend, its stage plan (:attr:`stages`) and its
    hand-over (:attr:`hand_over`: the backend's object for an export in a process of its own,
    e.g. the Pixal3D backend's ``runner.backends.pixal3d.handover.HandOver``, or None), which
    this run calls before the trace opens and once the model process has handed over, lending
    it :meth:`publish`, :meth:`wait_for_admission`, :meth:`launch`, :meth:`outcome` and
    :meth:`commit_output`."""

    def __init__(self, job: Job, emit: Callable[[dict], None], cancel: Cancel, guard_config, *,
                 preamble: list[dict] = (), python: str | None = None, tag: dict | None = None):
        self.job = job
        self.emit = emit
        self.cancel = cancel
        self.guard_config = guard_config
        self.python = python or sys.executable
        self.tag = dict(tag or {})
        self.started = time.time()
        self.trace = JobTrace()
        for obj in preamble:
            self.trace(obj)
        self.tracker = MemoryTracker()
        self.backend = None
        self.hand_over = None
        self.stages: list[str] = []
        self.guard = None
        self.output: Path | None = None
        self.partial: Path | None = None
        self.job_dir: Path | None = None
        self.children: list[Child] = []
        self.claims: list = []
        self.notes: list[str] = []
        self.warnings: list[dict] = []  # every warning event of the job (job.warning_record)
        self._order = threading.RLock()  # re-entrant: emit's broken-pipe callback may publish

    def publish(self, obj: dict) -> None:
        """Trace then print ``obj`` (tagged), under one lock: the relay and sampler threads
        publish concurrently, and the trace must hold the stdout lines in stdout's order."""
        obj = {**obj, **self.tag} if self.tag else obj
        with self._order:
            self.trace(obj)
            self.emit(obj)
            if obj.get("event") == "warning":
                self.warnings.append(warning_record(obj))
                explain_warning(obj)

    def run(self) -> Outcome:
        """Run every step; never raises for a job failure (the ``Outcome`` says it). A job
        refused for its input (``input.refused_kinds``) removes the folders it made."""
        made = missing_folders(self.job.output, self.job.resolved_trace()) \
            if self.job.input.refused_kinds else []
        try:
            try:
                self.validate()
                self.admit()
                info = self.outcome(self.spawn())
                handover = info.pop("handover", None)
                if handover and self.hand_over is not None:  # the model process has exited
                    info = self.hand_over.finish(self, info, handover)
                else:
                    info = self.commit_output(info)
            except RunnerError as err:
                return self.finish(err)
            return self.finish(None, info)
        finally:
            self.close()
            if self.refused:
                remove_empty(made)

    refused = False
    """True once the job ended refused for its input (``input.refused_kinds``)."""

    # -- validate ------------------------------------------------------------------------------
    def validate(self) -> None:
        """The input's backend (``input.backend``), its stage plan and hand-over, then the
        input, output and trace (no trace before they pass: nothing of an earlier run is
        touched); opens the trace and publishes the input's facts (``input`` for an image,
        ``asset`` for an asset)."""
        source = self.job.input
        self.backend = source.backend(self.job)
        self.stages = source.stages(self.backend)
        self.hand_over = source.hand_over(self.backend, self.job)
        try:
            event, self.notes = self._check_files()
        except RunnerError:
            raise
        except Exception as exc:  # a bug in validation: this job fails, the process goes on
            traceback.print_exc(file=sys.stderr)
            raise RunnerError("internal", f"Unexpected {type(exc).__name__} while checking "
                              f"the input: {exc}") from None
        self.publish(event)
        for note in self.notes:  # people read stderr: what was done to their picture
            log(f"note: {source.path.name}: {note}")
        if self.cancel:
            raise cancel_error(self.cancel, f"before {source.process[1]} started")

    def _check_files(self) -> tuple[dict, list[str]]:
        """Input, output and trace checks; opens the trace. Returns the input's event and
        notes (``input.check``)."""
        job = self.job
        replace = job.overwrite if job.replace_trace is None else job.replace_trace
        output_conflict(job.output, job.input.path, job.input.noun)
        trace_conflict(job.resolved_trace(), job.input.path, job.output, job.input.noun)
        checked = job.input.check(job)
        self.output = check_output(job.output, job.overwrite)
        trace_path = job.resolved_trace()
        check_path_limits(trace_path, "trace")  # before its claim file is made beside it
        # Held until the job's last line: no other runner writes this GLB or trace meanwhile.
        self.claims = claim_all([self.output, trace_path])
        check_output(self.output, job.overwrite)  # again: it may have appeared before the claim
        if self.hand_over is not None:  # before the trace opens: it reads an earlier run's
            self.hand_over.check(self, trace_path)
        self.open_trace(trace_path, replace)
        return checked

    def open_trace(self, trace_path: Path, replace: bool) -> None:
        """Check (``check_trace``) and open the job's trace at ``trace_path``, after the output
        was checked and both were claimed. ``replace``: an earlier runner trace there may be
        replaced (``--overwrite``, a batch re-run). Without it, the runner's own leftover of a
        failed or cancelled run of this output (``failed_runs_trace``: its ``hello`` names this
        output and a runner no longer running, it does not end in ``result``, no GLB) is
        replaced, one stderr line saying so, so the same command works again after a failure
        (docs/runner.md). Raises ``RunnerError`` (``check_trace``'s kinds)."""
        if not replace and failed_runs_trace(trace_path, self.output):
            log(f"replacing {trace_path}: the trace of an earlier run of {self.output.name} "
                "that produced no GLB")
            replace = True
        self.trace.open(check_trace(trace_path, replace), replace)

    def commit_output(self, info: dict) -> dict:
        """Commit the partial GLB to the output (``commit``); returns ``info`` with the
        engine's ``export.output`` naming the GLB, not the partial file the export process
        wrote in the job folder. Raises ``RunnerError`` (``commit``'s kinds)."""
        commit(self.partial, self.output, self.job.overwrite)
        self.partial = None
        export = info.get("export")
        if isinstance(export, dict) and "output" in export:
            info = {**info, "export": {**export, "output": str(self.output)}}
        return info

    # -- admit ---------------------------------------------------------------------------------
    def admit(self) -> None:
        """Create the guard and wait for its admission (a cancel stops the wait)."""
        try:
            self.guard = Guard(self.guard_config, log=lambda ev: self.publish(relay(ev)))
        except ValueError as exc:  # stageload.guard.ConfigError, e.g. --log cannot be opened
            raise RunnerError("usage", str(exc)) from None
        self.cancel.listeners.append(self._on_cancel)
        self.wait_for_admission("")

    def wait_for_admission(self, what: str) -> None:
        """The guard's admission wait; ``what`` (e.g. " the export") names what waits in the
        messages. Raises ``RunnerError`` (``cancelled`` / ``guard_timeout``)."""
        admitted = self.guard.wait_for_admission()
        if self.cancel:
            raise cancel_error(self.cancel, f"while waiting for the guard's admission{what}")
        if not admitted:
            raise RunnerError("guard_timeout", f"The guard did not find room to start{what} "
                              f"within {self.guard_config.start_timeout:g} s.")

    def _on_cancel(self, reason: str) -> None:
        self.guard.cancel()

    # -- spawn, relay, sample ------------------------------------------------------------------
    def spawn(self) -> Child:
        """Start the input's worker (``input.worker_mode``, ``input.worker_job``) on a fresh
        partial file, relay its events and sample it until it ends. Returns the finished
        ``Child``. A worker in ``model`` mode (the job has a hand-over: its export runs in a
        process of its own) or ``export`` mode (an asset's export process) writes its partial
        GLB in a private job folder next to the output; in ``model`` mode it writes the decoded
        asset to the hand-over file in that folder."""
        source = self.job.input
        mode = source.worker_mode(self.hand_over)
        stale = sweep_stale_partials(self.output) if mode != "export" else []
        for path in stale + sweep_stale_job_dirs(self.output.parent):
            log(f"removed {path.name}, left by a runner that was killed")
        self.partial, handover = temp_path(self.output), None
        if mode != "whole":
            try:
                self.job_dir = job_dir(self.output)
            except OSError as exc:
                raise RunnerError("output_unwritable", f"Cannot create a temporary folder next "
                                  f"to {self.output} ({exc.strerror or exc}).") from None
            self.partial = self.job_dir / f"{self.output.stem}.glb"
            handover = str(self.job_dir / "asset.npz") if mode == "model" else None
        name, what = source.process
        work = source.worker_job(self.job, mode, self.partial, handover, self.hand_over)
        return self.launch(name, work, what, stdin=source.handover_pixels())

    def supervision(self) -> Supervision:
        """What this job lends each of its children: guard, cancel, trace, publish, tracker
        (after :meth:`admit`, which creates the guard)."""
        return Supervision(guard=self.guard, cancel=self.cancel, trace=self.trace,
                           publish=self.publish, tracker=self.tracker,
                           stall_timeout=self.job.stall_timeout)

    def launch(self, name: str, job: WorkerJob, what: str,
               announce: Callable[[Child], None] | None = None,
               stdin: bytes | None = None) -> Child:
        """Start ``runner.worker.run`` with ``job`` as the child ``name`` under the guard, then
        relay and sample it until it ends (:meth:`run_child`); returns the finished
        ``Child``. ``what`` (e.g. "the worker") words the ``worker_unstartable`` error raised
        when the interpreter cannot be started at all (a missing or non-executable file:
        whatever the job needs, torch or not). ``announce(child)`` runs once it is started,
        before its events are relayed and it is sampled. ``stdin``: bytes written to the
        child's stdin (the decoded image, ``WorkerJob.probed``)."""
        child = Child(self.supervision(), name)
        try:
            child.spawn(lambda fd: worker_argv(self.python, fd, job), stdin=stdin)
        except OSError as exc:
            limited = resource_error([exc], f"The runner, starting {what},")
            if limited is not None:  # not the interpreter's fault: a system limit
                raise limited from None
            raise RunnerError("worker_unstartable", f"Could not start {what} with "
                              f"{self.python} ({exc.strerror or exc}).",
                              python=self.python) from None
        if announce is not None:
            announce(child)
        self.run_child(child)
        return child

    def run_child(self, child: Child) -> int:
        """Relay and sample a spawned ``child`` until it ends; returns its exit status."""
        self.children.append(child)
        child.relay()
        child.sample()
        return child.wait()

    # -- outcome -------------------------------------------------------------------------------
    def outcome(self, worker: Child) -> dict:
        """Judge how a child (the worker, or the export process) ended
        (``runner.job.worker_process.judge_end``): return the backend's ``info`` dict, or raise the
        ``RunnerError`` that says why there is no GLB."""
        return judge_end(worker, self.cancel)

    # -- finish --------------------------------------------------------------------------------
    def finish(self, error: RunnerError | None, info: dict | None = None) -> Outcome:
        """The job's last event (``result`` or ``error``), written to the trace (then closed)
        but not published: the caller prints it (single run) or summarises it (batch). A job
        the guard never admitted (``guard_timeout`` before any process started) leaves no
        trace: the file is removed and ``trace`` is null, as for a job refused before it."""
        seconds = time.time() - self.started
        # the guard never admitted it: no process ran, so nothing is left to explain later
        unstarted = error is not None and error.kind == "guard_timeout" and not self.children
        trace_path = str(self.trace.path) if self.trace.path and not unstarted else None
        peak = self.tracker.peak
        closing = self.tracker.closing() if self.children else None
        if closing is not None:  # the last stage's figure with every sample (the summary's)
            self.publish(make("memory", **closing))
        if error is None:
            summary = summarize_trace(self.trace.path) if self.trace.is_open else None
            final = make("result", output=str(self.output), trace=trace_path,
                         seconds=round(seconds, 3), summary=summary, peak=peak,
                         backend=self.job.backend, info=info or {})
            if self.trace.error:
                final["trace_error"] = self.trace.error
        else:
            final = make("error", **error.fields(), trace=trace_path, seconds=round(seconds, 3))
        if self.warnings:
            final["warnings"] = list(self.warnings)
        final.update(self.tag)
        self.trace(final)
        self.trace.close()
        if unstarted and self.trace.path is not None:
            discard(self.trace.path)
        if error is not None and error.kind in self.job.input.refused_kinds:
            trace_path = final["trace"] = self.leave_nothing()
        return Outcome(ok=error is None, final=final,
                       exit_code=0 if error is None else error.exit_code,
                       output=str(self.output) if error is None else None, trace=trace_path,
                       seconds=seconds, peak=peak, error=error, notes=list(self.notes),
                       warnings=list(self.warnings))

    def leave_nothing(self) -> str | None:
        """A job refused for its input (``input.refused_kinds``) leaves nothing: the default
        trace (no ``--trace`` given) is removed, and :meth:`run` removes the folders the job
        made. A trace the user asked for is kept, complete, ending with the error. Returns the
        trace's path when it is kept, else None."""
        self.refused = True
        if self.trace.path is None:
            return None
        if self.job.trace is None:
            discard(self.trace.path)
            return None
        return str(self.trace.path)

    def close(self) -> None:
        """Remove an uncommitted partial GLB and release the guard (idempotent)."""
        if self.partial is not None:
            discard(self.partial)
            self.partial = None
        if self.job_dir is not None:  # the hand-over file and the export's temporary files
            discard_dir(self.job_dir)
            self.job_dir = None
        if self.guard is not None:
            tree = self.guard.tree
            if tree is not None and tree.poll() is None:  # only when a step failed unexpectedly
                self.guard.stop("the job ended while its process still ran")
            if self._on_cancel in self.cancel.listeners:
                self.cancel.listeners.remove(self._on_cancel)
            self.guard.close()
        release_all(self.claims)
        self.claims = []
