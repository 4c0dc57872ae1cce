"""The statuses a job and a stage row go through (``state.JobState``, ``view.make_view``).
Pure Python."""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A job's status, in the order a run goes through them. A ``str``: it compares equal to
    its value (``Status.DONE == "done"``), so recorded histories and tests read as text."""
    IDLE = "idle"
    STARTING = "starting"
    WAITING = "waiting"  # for the guard to admit the job (memory)
    RUNNING = "running"
    IMPORTING = "importing"  # the GLB is written; it is being imported into the scene
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


IDLE, STARTING, WAITING, RUNNING, IMPORTING, DONE, FAILED, CANCELLED = Status
FINISHED = (DONE, FAILED, CANCELLED)

#: status → the statuses a job may move to from it (``JobState.transition``; a new run starts
#: over at ``STARTING`` through ``JobState.begin`` whatever the status). Besides the run's own
#: order: a ``result`` read after an ``error`` (or a second one) imports again, a failure
#: found by the add-on (an import, its own timer) may follow anything, the guard's events
#: may arrive while an earlier result is being imported, a state fed without ``begin``
#: (the headless batch's, which only holds the batch's own error) starts from ``IDLE``, and a
#: batch image an earlier run finished, already in the scene, is done from ``STARTING``
#: (``JobState.mark_skipped``: nothing runs or imports).
NEXT: dict[Status, frozenset[Status]] = {
    IDLE: frozenset({STARTING, WAITING, RUNNING, IMPORTING, FAILED, CANCELLED}),
    STARTING: frozenset({WAITING, RUNNING, IMPORTING, DONE, FAILED, CANCELLED}),
    WAITING: frozenset({RUNNING, IMPORTING, FAILED, CANCELLED}),
    RUNNING: frozenset({WAITING, IMPORTING, FAILED, CANCELLED}),
    IMPORTING: frozenset({WAITING, RUNNING, DONE, FAILED, CANCELLED}),
    DONE: frozenset({IMPORTING, FAILED}),
    FAILED: frozenset({IMPORTING}),
    CANCELLED: frozenset({FAILED}),
}

PENDING, ACTIVE, COMPLETE = "pending", "running", "done"  # stage row statuses; the row a job
# stopped in takes the job's end instead: FAILED or CANCELLED
