"""``runner.job.run.JobRun`` and ``runner.job.child.Child`` as a second process of a job would use
them (an export process after the worker): each child is a real subprocess started by the
job's guard, its events relayed or kept, its tree sampled, one after the other."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from runner import backends
from runner.job.cancel import Cancel
from runner.job.child import Child
from runner.job.inputs import ImageInput
from runner.job.records import Job
from runner.job.run import JobRun
from stageload.guard import GuardConfig

# A child that writes one relayed event and one private event (the worker's own worker_done,
# as the event schema declares it) to its events pipe.
_CHILD = ("import json, os, sys\n"
          "pipe = os.fdopen(int(sys.argv[1]), 'w')\n"
          "for ev in ({'event': 'progress', 'stage': sys.argv[2], 'fraction': 1.0},\n"
          "           {'event': 'worker_done', 'output': 'a.glb',\n"
          "            'info': {'pid': os.getpid()}}):\n"
          "    pipe.write(json.dumps({**ev, 't': 1.0}) + '\\n')\n"
          "pipe.close()\n")


def test_a_job_runs_two_children_in_turn_under_its_guard(tmp_path):
    published: list[dict] = []
    run = JobRun(Job(input=ImageInput(tmp_path / "a.png", backends.get("builtin")),
                     output=tmp_path / "a.glb"),
                 published.append, Cancel(), GuardConfig(), tag={"item": 7})
    try:
        run.admit()
        pids = []
        for name in ("worker", "export"):
            child = Child(run.supervision(), name)
            child.spawn(lambda fd, name=name: [sys.executable, "-c", _CHILD, str(fd), name])
            assert run.run_child(child) == 0
            assert child.stopped is None
            assert child.events["worker_done"]["info"]["pid"] == child.proc.pid
            pids.append(child.proc.pid)
    finally:
        run.close()
    progress = [e for e in published if e["event"] == "progress"]
    assert [e["stage"] for e in progress] == ["worker", "export"]
    assert all(e["v"] == 1 and e["item"] == 7 for e in published)
    assert not [e for e in published if e["event"] == "worker_done"]  # private: traced only
    started = [e for e in published if e["event"] == "guard" and e["state"] == "started"]
    assert [e["readings"]["pid"] for e in started] == pids
    traced = [e["event"] for e in run.trace.pending]  # the trace was never opened: buffered
    assert traced.count("worker_done") == 1 and traced.count("export_worker_done") == 1


def test_a_worker_interpreter_that_cannot_start_is_worker_unstartable(tmp_path, shared_images):
    """An interpreter that cannot be started at all (here: a path that does not exist) is its
    own kind naming it — not ``no_torch``, for a job whose backend (built-in) needs no torch —
    and the job leaves no GLB and a trace that ends with the error."""
    missing = str(tmp_path / "no such" / "python3")
    out = tmp_path / "a.glb"
    published: list[dict] = []
    run = JobRun(Job(input=ImageInput(shared_images[0], backends.get("builtin")), output=out),
                 published.append,
                 Cancel(), GuardConfig(), python=missing)
    outcome = run.run()
    assert outcome.error is not None and outcome.error.kind == "worker_unstartable"
    assert outcome.exit_code == 39 and outcome.final["details"] == {"python": missing}
    assert missing in outcome.final["message"] and "the worker" in outcome.final["message"]
    assert "torch" not in outcome.final["message"] + outcome.final["hint"]
    assert not out.exists()
    assert [e["event"] for e in published][:1] == ["input"]
    last = json.loads(Path(outcome.trace).read_text(encoding="utf-8").splitlines()[-1])
    assert last["event"] == "error" and last["kind"] == "worker_unstartable"
