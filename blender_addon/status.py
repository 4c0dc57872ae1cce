"""The statuses a job and a stage row go through (``state.JobState``, ``view.make_view``).
Pure Python."""
from __future__ import annotations

# Job statuses, in the order a run goes through them.
IDLE, STARTING, WAITING, RUNNING, IMPORTING, DONE, FAILED, CANCELLED = (
    "idle", "starting", "waiting", "running", "importing", "done", "failed", "cancelled")
FINISHED = (DONE, FAILED, CANCELLED)

PENDING, ACTIVE, COMPLETE = "pending", "running", "done"  # stage row statuses; the row a job
# stopped in takes the job's end instead: FAILED or CANCELLED
