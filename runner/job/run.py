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

import dataclasses
import os
import shlex
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
    leftover_asset,
    missing_folders,
    new_file_mode,
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
from stageload.pixal3d.plan import STAGES  # torch-free: the one stage list
from stageload.summary import summarize

RUNNER_VERSION = __version__
"""The ``runner`` field of ``hello`` and of a batch's manifest (``runner.__version__``)."""


def export_need(config) -> int | None:
    """Bytes the export process is predicted to need for the guard's admission: the
    ``export`` stage's peak in the ``--need-from`` trace (``stageload.summary``) when one was
    given and has that stage, else ``--need`` (None: no prediction)."""
    if config.need_source:
        try:
            with open(config.need_source, encoding="utf-8") as f:
                stages = summarize(f.read().splitlines())["stages"]
            peak = next((st["peak"] for st in stages if st["stage"] == "export"), None)
            if peak:
                return int(peak)
        except Exception as exc:  # the whole-run figure still applies
            log(f"--need-from: no export peak in {config.need_source} ({exc}); using the "
                "whole run's")
    return config.need


def asset_kept(err: RunnerError, asset: str, output: Path) -> RunnerError:
    """``err`` (the export's failure) saying that the decoded ``asset`` was kept and the
    command that exports it again to ``output`` (``details.asset``: its path)."""
    again = f"python -m runner export {shlex.quote(asset)} -o {shlex.quote(str(output))}"
    return RunnerError(err.kind, f"{err.message} The decoded asset was kept at {asset}; "
                       f"re-export it with `{again}`.", err.hint, **{**err.details,
                                                                     "asset": asset})


class JobRun:
    """One job's run. ``emit`` gets each protocol object for stdout (with ``v``); the trace
    gets them too, plus the samples. ``preamble`` (e.g. ``hello``) is written first into the
    trace. ``tag`` fields are added to every published event (batch: ``item``). ``python`` is
    the worker's interpreter (default: this one). ``guard_config`` is a
    ``stageload.guard.GuardConfig``."""

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
                if handover:  # the model process has exited: export on its own
                    info = self.export_handover(info, handover)
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
        """The input's backend (``input.backend``), then the input, output and trace (no trace
        before they pass: nothing of an earlier run is touched); opens the trace and publishes
        the input's facts (``input`` for an image, ``asset`` for an asset)."""
        source = self.job.input
        self.backend = source.backend(self.job)
        try:
            event, self.notes = self._check_files()
        except RunnerError:
            raise
        except Exception as exc:  # a bug in validation: this job fails, the process goes on
            traceback.print_exc(file=sys.stderr)
            raise RunnerError("internal", f"Unexpected {type(exc).__name__} while checking "
                              f"the input: {exc}") from None
        self.check_kept_asset()
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
        self.open_trace(trace_path, replace)
        return checked

    def open_trace(self, trace_path: Path, replace: bool) -> None:
        """Check (``check_trace``) and open the job's trace at ``trace_path``, after the output
        was checked and both were claimed. ``replace``: an earlier runner trace there may be
        replaced (``--overwrite``, a batch re-run). Without it, the runner's own leftover of a
        failed or cancelled run of this output (``failed_runs_trace``: its ``hello`` names this
        output and a runner no longer running, it does not end in ``result``, no GLB) is
        replaced, one stderr line saying so, so the same command works again after a failure
        (docs/runner.md); the asset that run kept, if any, is noted (``leftover_asset``: the
        same command may replace it). Raises ``RunnerError`` (``check_trace``'s kinds)."""
        self.leftover_asset = leftover_asset(trace_path, self.output)
        if not replace and failed_runs_trace(trace_path, self.output):
            log(f"replacing {trace_path}: the trace of an earlier run of {self.output.name} "
                "that produced no GLB")
            replace = True
        self.trace.open(check_trace(trace_path, replace), replace)

    def kept_asset_path(self) -> Path:
        """Where ``--keep-asset`` keeps the hand-over asset: ``NAME.asset.npz`` beside the GLB."""
        return self.output.with_name(self.output.stem + ".asset.npz")

    leftover_asset: str | None = None
    """The asset a failed run of this output kept, as its leftover trace says (``open_trace``)."""

    def may_replace_asset(self) -> bool:
        """True when ``NAME.asset.npz`` may be replaced: ``--overwrite``, or it is the asset a
        failed run of this output kept (its leftover trace names it), so the same command works
        again after a failure, as for the trace."""
        return self.job.overwrite or self.leftover_asset == str(self.kept_asset_path())

    def check_kept_asset(self) -> None:
        """With ``--keep-asset``, refuse (``output_exists``) an existing ``NAME.asset.npz``
        unless it may be replaced (``may_replace_asset``): before anything runs, as for the
        GLB."""
        if self.job.options.get("keep_asset") and not self.may_replace_asset() \
                and self.kept_asset_path().exists():
            raise RunnerError("output_exists", f"{self.kept_asset_path()} exists (--keep-asset "
                              "would replace it).", "Choose another output name, or pass "
                              "--overwrite to replace it.")

    def keep_asset(self, handover: str) -> str | None:
        """Move the hand-over asset out of the job folder to :meth:`kept_asset_path` (after the
        GLB was committed, or after the export failed), with the mode of any new file (the
        GLB's, ``new_file_mode``: the job folder's file is private). A file that appeared there
        meanwhile is kept, with a warning; the asset is then discarded with the job folder, as
        is one that cannot be moved (a warning says why). Returns the kept path or None."""
        target = self.kept_asset_path()
        if target.exists() and not self.may_replace_asset():
            self.publish(make("warning", message=f"{target} appeared during the run; it was "
                              "kept and the asset was not", source="runner"))
            return None
        try:
            os.chmod(handover, new_file_mode())
            os.replace(handover, target)
        except OSError as exc:
            self.publish(make("warning", message=f"The asset could not be kept at {target} "
                              f"({exc.strerror or exc}); it was discarded", source="runner"))
            return None
        return str(target)

    def export_handover(self, info: dict, handover: str) -> dict:
        """The export process on the decoded asset ``handover`` (the model process has exited:
        the file is complete), then the commit; returns ``info`` with the export's. With
        ``--keep-asset`` the asset is kept beside the GLB (``info["asset"]``) — also when the
        export fails or is cancelled, since it is the expensive part to make again: the error
        then says where it is and how to export it again (``details.asset``). Raises
        ``RunnerError``."""
        keep = bool(self.job.options.get("keep_asset"))
        try:
            info = self.commit_output({**info, **self.outcome(self.spawn_export(handover))})
        except RunnerError as err:
            kept = self.keep_asset(handover) if keep else None
            if kept is None:
                raise
            raise asset_kept(err, kept, self.output) from None
        if keep:
            info["asset"] = self.keep_asset(handover)
        return info

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
        self._wait_for_admission("")

    def _wait_for_admission(self, what: str) -> None:
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
        ``Child``. A worker in ``model`` mode (the backend exports in a process of its own,
        ``Backend.splits_export``) or ``export`` mode (an asset's export process) writes its
        partial GLB in a private job folder next to the output; in ``model`` mode it writes
        the decoded asset to the hand-over file in that folder."""
        source = self.job.input
        mode = source.worker_mode(self.backend, self.job)
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
        work = source.worker_job(self.backend, self.job, mode, self.partial, handover)
        return self.launch(name, work, what, stdin=source.handover_pixels())

    def spawn_export(self, handover: str) -> Child:
        """The export process, after the model process has exited: the guard re-checks
        admission (``export_need``), then ``runner.worker.run`` in ``export`` mode continues from
        the ``handover`` file into the partial GLB, relayed and sampled like the worker (one
        ``export`` stage, carrying this process's pid). Returns the finished ``Child``."""
        if self.cancel:
            raise cancel_error(self.cancel, "before the export process started")
        self.guard.config = dataclasses.replace(self.guard_config,
                                                need=export_need(self.guard_config))
        self._wait_for_admission(" the export")
        job = self.job.input.worker_job(self.backend, self.job, "export", self.partial,
                                        handover)
        # the supervisor enters the stage (announce_export): the process must not enter it again
        job = dataclasses.replace(job, options={**job.options, "stage_announced": True})
        return self.launch("export", job, "the export process", announce=self.announce_export)

    def announce_export(self, child: Child) -> None:
        """Enter the ``export`` stage as the export process starts, before it is sampled:
        ``stage`` (with its ``pid``), ``ready`` (the model process has exited: nothing left to
        release) and the sub-step ``handover`` (its interpreter's start, imports and the
        hand-over's load, until its own first sub-step). So the new process's first seconds
        count in ``export``, never in ``decode``."""
        start, pid = time.perf_counter(), child.proc.pid
        for ev in (make("stage", stage="export", index=STAGES.index("export"), count=len(STAGES),
                        pid=pid),
                   make("ready", stage="export", seconds=time.perf_counter() - start,
                        released_bytes=0),
                   make("stage", stage="handover", parent="export", pid=pid)):
            closing = self.tracker.on_event(ev)  # the live memory events' stage, as relayed
            if closing is not None:
                self.publish(make("memory", **closing))
            self.publish(ev)

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
