"""The supervisor's side of a Pixal3D job that exports in a process of its own (``HandOver``):
the model process writes the decoded asset to the hand-over file in the job folder and exits
(all its memory back); the guard admits the export once more; the export process (the job's
export step, ``runner.job.export_step``) turns the hand-over into the GLB. With
``--keep-asset`` the asset is kept beside the GLB as ``NAME.asset.npz`` — also when the export
fails or is cancelled, since it is the expensive part to make again.

``runner.job.run.JobRun`` is handed the object (``Backend.hand_over``) and calls
:meth:`HandOver.check` before the trace opens and :meth:`HandOver.finish` once the model
process has handed over; it lends its steps (admission, launch, outcome, commit, publish).
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import time
from pathlib import Path

from meshfacts.errors import RunnerError
from meshfacts.events import make
from runner.job.cancel import cancel_error
from runner.job.outputs import leftover_asset, new_file_mode
from runner.job.records import WorkerJob
from runner.job.trace import log
from stageload.summary import summarize


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


class HandOver:
    """One job's export in a process of its own with ``step`` (an ``ExportStep``), keeping the
    asset when ``keep`` (``--keep-asset``)."""

    def __init__(self, step, keep: bool):
        self.step = step
        self.keep = bool(keep)
        self.leftover: str | None = None
        """The asset a failed run of this output kept, as its leftover trace says
        (:meth:`check`)."""

    @staticmethod
    def kept_path(output: Path) -> Path:
        """Where ``--keep-asset`` keeps the hand-over asset: ``NAME.asset.npz`` beside the
        GLB."""
        return output.with_name(output.stem + ".asset.npz")

    def may_replace(self, run) -> bool:
        """True when ``NAME.asset.npz`` may be replaced: ``--overwrite``, or it is the asset a
        failed run of this output kept (its leftover trace names it), so the same command works
        again after a failure, as for the trace."""
        return run.job.overwrite or self.leftover == str(self.kept_path(run.output))

    def check(self, run, trace_path: Path) -> None:
        """Before the trace at ``trace_path`` opens (it may replace a failed run's): note the
        asset that run kept, then, with ``--keep-asset``, refuse (``output_exists``) an
        existing ``NAME.asset.npz`` unless it may be replaced — before anything runs, as for
        the GLB."""
        self.leftover = leftover_asset(trace_path, run.output)
        target = self.kept_path(run.output)
        if self.keep and not self.may_replace(run) and target.exists():
            raise RunnerError("output_exists", f"{target} exists (--keep-asset would replace "
                              "it).", "Choose another output name, or pass --overwrite to "
                              "replace it.")

    def keep_asset(self, run, handover: str) -> str | None:
        """Move the hand-over asset out of the job folder to :meth:`kept_path` (after the GLB
        was committed, or after the export failed), with the mode of any new file (the GLB's,
        ``new_file_mode``: the job folder's file is private). A file that appeared there
        meanwhile is kept, with a warning; the asset is then discarded with the job folder, as
        is one that cannot be moved (a warning says why). Returns the kept path or None."""
        target = self.kept_path(run.output)
        if target.exists() and not self.may_replace(run):
            run.publish(make("warning", message=f"{target} appeared during the run; it was "
                             "kept and the asset was not", source="runner"))
            return None
        try:
            os.chmod(handover, new_file_mode())
            os.replace(handover, target)
        except OSError as exc:
            run.publish(make("warning", message=f"The asset could not be kept at {target} "
                             f"({exc.strerror or exc}); it was discarded", source="runner"))
            return None
        return str(target)

    def finish(self, run, info: dict, handover: str) -> dict:
        """The export process on the decoded asset ``handover`` (the model process has exited:
        the file is complete), then the commit; returns ``info`` with the export's. With
        ``--keep-asset`` the asset is kept beside the GLB (``info["asset"]``) — also when the
        export fails or is cancelled: the error then says where it is and how to export it
        again (``details.asset``). Raises ``RunnerError``."""
        try:
            info = run.commit_output({**info, **run.outcome(self.spawn(run, handover))})
        except RunnerError as err:
            kept = self.keep_asset(run, handover) if self.keep else None
            if kept is None:
                raise
            raise asset_kept(err, kept, run.output) from None
        if self.keep:
            info["asset"] = self.keep_asset(run, handover)
        return info

    def spawn(self, run, handover: str):
        """The export process, after the model process has exited: the guard re-checks
        admission (``export_need``), then ``runner.worker.run`` in ``export`` mode runs the
        export step from the ``handover`` file into the partial GLB, relayed and sampled like
        the worker (one ``export`` stage, which the supervisor enters: :meth:`announce`).
        Returns the finished ``runner.job.child.Child``."""
        if run.cancel:
            raise cancel_error(run.cancel, "before the export process started")
        run.guard.config = dataclasses.replace(run.guard_config,
                                               need=export_need(run.guard_config))
        run.wait_for_admission(" the export")
        job = WorkerJob(image=None, output=str(run.partial), options=run.job.options,
                        mode="export", handover=handover, export=self.step.name)
        return run.launch("export", job, "the export process",
                          announce=lambda child: self.announce(run, child))

    @staticmethod
    def announce(run, child) -> None:
        """Enter the ``export`` stage of the job's plan as the export process starts, before
        it is sampled: ``stage`` (with its ``pid``), ``ready`` (the model process has exited:
        nothing left to release) and the sub-step ``handover`` (its interpreter's start,
        imports and the hand-over's load, until its own first sub-step). So the new process's
        first seconds count in ``export``, never in ``decode``."""
        start, pid = time.perf_counter(), child.proc.pid
        for ev in (make("stage", stage="export", index=run.stages.index("export"),
                        count=len(run.stages), pid=pid),
                   make("ready", stage="export", seconds=time.perf_counter() - start,
                        released_bytes=0),
                   make("stage", stage="handover", parent="export", pid=pid)):
            closing = run.tracker.on_event(ev)  # the live memory events' stage, as relayed
            if closing is not None:
                run.publish(make("memory", **closing))
            run.publish(ev)
