"""``runner.job.records.WorkerJob``: the worker's job as a typed record — what the supervisor makes
round-trips through JSON unchanged, anything else is refused naming the field, and a real
worker given a job it cannot read answers with one ``internal`` error event, not a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner.job.records import WorkerJob

BASE = {"backend": "builtin", "image": "/in/a.png", "output": "/out/.a.partial.glb"}


@pytest.mark.parametrize("fields", [
    {},
    {"seed": 7, "texture_size": 1024, "height_m": 1.7, "options": {"key": "auto"}},
    {"mode": "model", "handover": "/out/job/asset.npz"},
    {"mode": "export", "handover": "/out/job/asset.npz", "height_m": 2},
    {"probed": {"path": "/in/a.png", "format": "PNG", "mode": "RGBA", "width": 64,
                "height": 48, "notes": []}},
])
def test_a_worker_job_round_trips_through_json(fields):
    job = WorkerJob(**BASE, **fields)
    again = WorkerJob.from_json(job.to_json())
    assert again == job
    assert json.loads(job.to_json())["mode"] == fields.get("mode", "whole")


def test_an_export_process_of_the_bounded_engine_needs_no_backend_or_image():
    job = WorkerJob(backend=None, image=None, output="/out/job/a.glb", mode="export",
                    handover="/in/a.asset.npz", options={"stages": ["export"]})
    assert WorkerJob.from_json(job.to_json()) == job


def test_backend_kwargs_cast_and_leave_out_defaults():
    job = WorkerJob(**BASE, seed=3, height_m=2, options={"key": "auto"})
    kwargs = job.backend_kwargs()
    assert kwargs == {"key": "auto", "seed": 3, "height_m": 2.0}
    assert isinstance(kwargs["height_m"], float)


@pytest.mark.parametrize("fields, named", [
    ({"backend": ""}, "backend"),
    ({"image": None}, "image"),
    ({"seed": True}, "seed"),
    ({"texture_size": "512"}, "texture_size"),
    ({"height_m": "tall"}, "height_m"),
    ({"options": ["key"]}, "options"),
    ({"mode": "stage"}, "mode"),
    ({"mode": "export"}, "handover"),
    ({"mode": "model"}, "handover"),
    ({"handover": "/out/job/asset.npz"}, "handover"),
    ({"mode": "export", "handover": ""}, "handover"),
    ({"probed": {"width": 64}}, "probed"),
    ({"mode": "export", "handover": "/x.npz", "probed": {"width": 1, "height": 1}}, "probed"),
    ({"backend": None}, "backend"),
    ({"backend": None, "mode": "export", "handover": "/x.npz",
      "options": {"export_engine": "port"}}, "bounded engine"),
])
def test_a_bad_field_is_refused_by_name(fields, named):
    with pytest.raises(ValueError, match=named):
        WorkerJob(**{**BASE, **fields})


@pytest.mark.parametrize("text, named", [
    ("not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**BASE, "stage": "export"}), "unknown field"),
    (json.dumps({"backend": "builtin"}), "missing field"),
])
def test_text_that_is_not_a_worker_job_is_refused(text, named):
    with pytest.raises(ValueError, match=named):
        WorkerJob.from_json(text)


def test_a_worker_given_an_unreadable_job_sends_one_internal_error(rt):
    read_fd, write_fd = os.pipe()
    job = json.dumps({**BASE, "stage": "export", "handover": "/x.npz"})  # the old dict form
    proc = subprocess.Popen([sys.executable, "-m", "runner.worker.run", "--events-fd",
                             str(write_fd), "--job", job], pass_fds=(write_fd,),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rt.env(),
                            start_new_session=True)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        events = [json.loads(line) for line in pipe]
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and out == b"" and b"Traceback" not in err
    assert [e["event"] for e in events] == ["error"]
    assert events[0]["kind"] == "internal" and "stage" in events[0]["message"]
