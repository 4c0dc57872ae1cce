"""The supervisor: one job (image → GLB) run in a worker process under the guard.

This process never imports torch (a test checks ``sys.modules``): it validates the input and
output, asks the guard for admission, starts ``python -m runner.worker`` (same interpreter) in
its own session and process group through ``stageload.guard.Guard``, samples the worker's process
tree from outside with ``stageload.meter.Sampler`` (10 Hz), relays the worker's events, turns
samples into ``memory`` events (at most 4 per second), writes every event and sample to the JSONL
trace, and commits or discards the partial GLB. ``runner/PROTOCOL.md`` defines the events.

The steps live in ``runner.jobrun.JobRun``; a child process (the worker) in ``runner.child``;
the memory events in ``runner.memory``; the trace in ``runner.jobtrace``.
"""
from __future__ import annotations

from typing import Callable

from . import __version__
from .cancel import Cancel
from .job import Job, Outcome
from .jobrun import JobRun
from .jobtrace import log

RUNNER_VERSION = __version__
"""The ``runner`` field of ``hello`` (``runner.__version__``)."""

__all__ = ["RUNNER_VERSION", "Job", "Outcome", "log", "run_job"]


def run_job(job: Job, emit: Callable[[dict], None], cancel: Cancel, guard_config, *,
            preamble: list[dict] = (), python: str | None = None,
            tag: dict | None = None) -> Outcome:
    """Run one job to its end. ``emit`` gets each protocol object for stdout (already with
    ``v``); the trace gets them too, plus the samples. ``preamble`` (e.g. ``hello``) is written
    first into the trace. ``tag`` fields are added to every relayed event (batch: ``item``).
    ``python`` is the worker's interpreter (default: this one). ``guard_config`` is a
    ``stageload.guard.GuardConfig``. Never raises for a job failure: returns an ``Outcome``
    whose ``final`` event the caller prints (single run) or summarises (batch)."""
    return JobRun(job, emit, cancel, guard_config, preamble=preamble, python=python,
                  tag=tag).run()
