"""The worker process from the supervisor's side: its command line (``worker_argv``,
``probe_argv``) and how its end is judged (``judge_end``: the backend's ``info``, or the
``RunnerError`` that says why there is no GLB). ``runner.job.run.JobRun`` starts the worker and
the export process with these; ``runner.commands.check`` starts the probe.
"""
from __future__ import annotations

import json
import signal

from meshfacts.errors import KINDS, RunnerError
from meshfacts.proclimits import CRASH_SIGNALS
from runner.job.cancel import Cancel, cancel_error
from runner.job.records import WorkerJob


def worker_argv(python: str, events_fd: int, job: WorkerJob) -> list[str]:
    """Command line of the worker (``python -m runner.worker.run``): ``--events-fd`` and the job
    (a ``runner.job.records.WorkerJob``) as JSON."""
    return [python, "-m", "runner.worker.run", "--events-fd", str(events_fd),
            "--job", job.to_json()]


def probe_argv(python: str, events_fd: int, options: dict) -> list[str]:
    """Command line of the worker's probe (``runner.commands.check``): ``--probe`` and the backend
    options (``dest`` → value) as JSON."""
    return [python, "-m", "runner.worker.run", "--events-fd", str(events_fd), "--probe",
            "--backend-options", json.dumps(options)]


def _signal_error(signum: int) -> RunnerError:
    """The error for a worker ended by signal ``signum``: ``worker_crashed`` for a crash signal
    (``CRASH_SIGNALS``), else ``worker_killed`` (killed from outside, often out of memory)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if signum in CRASH_SIGNALS:
        return RunnerError("worker_crashed", f"The worker crashed ({name}: a fault inside the "
                           "backend or a native library it uses).",
                           "See the log on stderr; try another image or backend, and run "
                           "`python -m runner check`.")
    return RunnerError("worker_killed", f"The worker was killed by {name}.")


def judge_end(worker, cancel: Cancel) -> dict:
    """Judge how a child (``runner.job.child.Child``: the worker, or the export process) ended:
    return the backend's ``info`` dict (its ``worker_done`` event), or raise the
    ``RunnerError`` that says why there is no GLB (``stalled``, ``guard_stopped``, the job's
    cancel, the worker's ``error`` event, ``worker_crashed`` / ``worker_killed``)."""
    events, code = worker.events, worker.code
    if worker.stalled is not None:
        raise RunnerError("stalled", f"The {worker.name} was stopped: {worker.stalled}.")
    if worker.stopped is not None:
        raise RunnerError("guard_stopped", f"The guard stopped the job: {worker.stopped}.")
    if cancel:
        raise cancel_error(cancel, "while the worker ran; no GLB was written (anything partial "
                                   "is removed)")
    if "error" in events:
        ev = events["error"]
        kind = ev.get("kind") if ev.get("kind") in KINDS else "backend_failed"
        raise RunnerError(kind, ev.get("message") or "The worker failed.", ev.get("hint"),
                          **(ev.get("details") or {}))
    if code == 0 and "worker_done" in events:
        return events["worker_done"].get("info") or {}
    if code is not None and code < 0:
        raise _signal_error(-code)
    raise RunnerError("worker_crashed", f"The worker exited with status {code} without "
                      "a result.")
