"""The add-on's job state as a state machine (``state.JobState``, ``status.NEXT``), and a
batch's outcome apart from its last image's (``batch.BatchRun``). Pure Python: no bpy."""
from __future__ import annotations

from pathlib import Path

import pytest

from blender_addon.runner_client.batch_state import BatchRun
from blender_addon.runner_client.state import (
    CANCELLED,
    DONE,
    FAILED,
    IDLE,
    IMPORTING,
    RUNNING,
    STARTING,
    WAITING,
    JobState,
)
from blender_addon.runner_client.status import NEXT, Status


def test_jobstate_has_no_setattr_and_its_status_is_not_assigned():
    assert "__setattr__" not in vars(JobState)
    assert JobState.__setattr__ is object.__setattr__
    st = JobState()
    with pytest.raises(AttributeError):
        st.status = RUNNING  # only transition() moves it
    assert st.status is Status.IDLE and st.history == []


def test_the_history_comes_from_transitions_and_keeps_every_status():
    st = JobState()
    st.begin("a.png", now=0.0)
    for ev in ({"event": "hello", "stages": ["matte", "shape"]},
               {"event": "guard", "state": "waiting", "reason": "r", "readings": {}},
               {"event": "guard", "state": "started", "reason": "r", "readings": {}},
               {"event": "stage", "stage": "matte", "index": 0, "count": 2},
               {"event": "stage", "stage": "shape", "index": 1, "count": 2},
               {"event": "result", "output": "/o/a.glb"}):
        st.apply({"v": 1, "t": 1.0, **ev})
    st.mark_done(now=2.0)
    # a status is recorded once however many events keep it (two stages: one RUNNING)
    assert st.history == [STARTING, WAITING, RUNNING, IMPORTING, DONE]
    assert all(isinstance(s, Status) for s in st.history)
    assert st.history == ["starting", "waiting", "running", "importing", "done"]


def test_a_move_the_table_does_not_allow_is_refused_and_noted():
    st = JobState()
    st.begin("a.png")
    st.mark_cancelled(now=1.0)
    assert not st.transition(RUNNING)
    assert st.status == CANCELLED and st.history == [STARTING, CANCELLED]
    assert st.warnings == ["status running cannot follow cancelled; kept cancelled"]
    assert st.transition(CANCELLED) and st.history == [STARTING, CANCELLED]  # no move
    assert RUNNING not in NEXT[DONE] and DONE not in NEXT[WAITING]
    assert set(NEXT) == set(Status)


def test_begin_starts_a_new_run_from_every_default():
    st = JobState()
    st.begin("a.png", now=0.0)
    st.apply({"v": 1, "event": "memory", "t": 1.0, "footprint": 5, "peak": 7})
    st.apply({"v": 1, "event": "error", "t": 2.0, "kind": "x", "message": "m", "hint": "h",
              "exit_code": 1})
    st.apply({"v": 1, "event": "memory", "t": 2.1, "footprint": "bad"})
    assert st.status == FAILED and st.warnings and st.peak == 7
    st.begin("b.png", now=5.0)
    fresh = JobState()
    for name in ("footprint", "peak", "error", "warnings", "stages", "loaded", "result"):
        assert getattr(st, name) == getattr(fresh, name), name
    assert (st.image, st.started, st.status, st.history) == ("b.png", 5.0, STARTING,
                                                             [STARTING])
    assert JobState().status == IDLE


def _batch_of_15(last_error: dict) -> tuple[BatchRun, JobState]:
    """A batch of 15 whose images 7 … 15 were done and 1 … 6 failed, the last image failing."""
    batch, st = BatchRun(Path("/in"), 15), JobState()
    order = ["failed"] * 5 + ["done"] * 9 + ["failed"]
    for index, status in enumerate(order, 1):
        st.begin(f"/in/{index}.png", now=float(index))
        st.apply({"v": 1, "event": "hello", "t": index + 0.1, "stages": ["matte"]})
        if status == "failed":
            st.apply({"v": 1, "event": "error", "t": index + 0.5, **last_error})
        else:
            st.apply({"v": 1, "event": "result", "t": index + 0.5, "output": f"/o/{index}.glb"})
            st.mark_done(now=index + 0.6)
        batch.record(Path(f"/in/{index}.png"), status, "detail", 15)
    batch.ended = True
    return batch, st


def test_a_batch_with_failures_says_what_happened_with_the_last_error():
    """9 of 15 done and 6 failed, the last image among the failures: the panel's headline is
    the batch's outcome, not "Failed", and the last error is still there to read."""
    error = {"kind": "not_an_image", "message": "15.png is not an image Pillow can read.",
             "hint": "Choose a PNG, JPEG or WebP file.", "exit_code": 10}
    batch, st = _batch_of_15(error)
    assert st.view().headline == "Failed"  # the last image's own
    view = batch.view(st.view())
    assert view.headline == "Done with failures: 9 of 15 done, 6 failed"
    assert view.error_text == error["message"] and view.hint_text == error["hint"]
    assert batch.summary().startswith("Batch: 9 of 15 done, 6 failed: 1.png (detail)")


def test_a_batchs_headline_for_each_outcome():
    def batch(*statuses, **flags) -> BatchRun:
        run = BatchRun(Path("/in"), len(statuses) or 3, ended=True, **flags)
        for i, status in enumerate(statuses):
            run.record(Path(f"/in/{i}.png"), status)
        return run

    running = BatchRun(Path("/in"), 3)
    running.record(Path("/in/0.png"), "failed")
    view = JobState().view()
    assert running.view(view) is view  # not ended: the image now running speaks
    assert batch("done", "done").headline() == "Done: 2 of 2 done"
    assert batch("done", "skipped").headline() == "Done: 1 of 2 done, 1 skipped"
    assert batch("failed", "failed").headline() == "Failed: 2 of 2 failed"
    assert batch("done", cancelled=True).headline() == "Cancelled: 1 of 1 done"
    assert batch(error="no cluster").headline() == "Batch did not run"
