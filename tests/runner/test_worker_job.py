"""``runner.job.records.WorkerJob``: the worker's job as a typed record — what the supervisor makes
round-trips through JSON unchanged, anything else is refused naming the field, and a real
worker given a job it cannot read answers with one ``internal`` error event, not a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from meshfacts.job_options import JobOptions
from runner.job.records import WorkerJob

BASE = {"image": "/in/a.png", "output": "/out/.a.partial.glb"}
PIXAL3D = JobOptions.parse("pixal3d", {"keep_resident": "1G", "texture_size": "512"})
EXPORT = JobOptions.parse(None, {"export_budget": "2G"})


@pytest.mark.parametrize("fields", [
    {},
    {"options": JobOptions.parse("builtin", {"seed": "7", "texture_size": "1024",
                                             "height_m": "1.7"})},
    {"options": PIXAL3D, "mode": "model", "handover": "/out/job/asset.npz",
     "export": "bounded"},
    {"options": PIXAL3D, "mode": "export", "image": None, "handover": "/out/job/asset.npz",
     "export": "port"},
    {"probed": {"path": "/in/a.png", "format": "PNG", "mode": "RGBA", "width": 64,
                "height": 48, "notes": []}},
])
def test_a_worker_job_round_trips_through_json(fields):
    job = WorkerJob(**{**BASE, **fields})
    again = WorkerJob.from_json(job.to_json())
    assert again == job and isinstance(again.options, JobOptions)
    assert json.loads(job.to_json())["mode"] == fields.get("mode", "whole")


def test_an_export_process_of_the_bounded_engine_needs_no_backend_or_image():
    job = WorkerJob(image=None, output="/out/job/a.glb", mode="export", options=EXPORT,
                    handover="/in/a.asset.npz", export="bounded", stages=["export"])
    assert WorkerJob.from_json(job.to_json()) == job and job.backend is None


def test_the_options_are_typed_and_checked_again_where_they_enter():
    """The options travel as the job's parsed ``JobOptions`` (each default filled in once, a
    size in bytes); a value the supervisor would refuse is refused again on entry, named."""
    job = WorkerJob(**BASE, options=PIXAL3D, mode="model", handover="/j/a.npz",
                    export="bounded")
    sent = json.loads(job.to_json())
    assert sent["options"]["keep_resident"] == 1 << 30 and sent["options"]["seed"] == 42
    assert sent["options"]["working_memory"] == "lean"
    sent["options"]["texture_size"] = 1000  # not one of the port's sides
    with pytest.raises(ValueError, match="--texture-size 1000"):
        WorkerJob.from_json(json.dumps(sent))


@pytest.mark.parametrize("fields, named", [
    ({"output": ""}, "output"),
    ({"image": None}, "image"),
    ({"options": {"seed": 3}}, "options"),
    ({"mode": "stage"}, "mode"),
    ({"mode": "export"}, "handover"),
    ({"mode": "model"}, "handover"),
    ({"handover": "/out/job/asset.npz"}, "handover"),
    ({"mode": "export", "handover": ""}, "handover"),
    ({"mode": "model", "handover": "/x.npz"}, "export"),
    ({"export": "bounded"}, "export"),
    ({"stages": ["export"]}, "stages"),
    ({"probed": {"width": 64}}, "probed"),
    ({"mode": "export", "handover": "/x.npz", "export": "bounded",
      "probed": {"width": 1, "height": 1}}, "probed"),
    ({"options": EXPORT}, "backend"),
])
def test_a_bad_field_is_refused_by_name(fields, named):
    with pytest.raises(ValueError, match=named):
        WorkerJob(**{**BASE, **fields})


@pytest.mark.parametrize("text, named", [
    ("not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**BASE, "stage": "export"}), "unknown field"),
    (json.dumps({"image": "/in/a.png"}), "missing field"),
    (json.dumps({**BASE, "options": {"backend": "builtin"}}), "missing field"),
])
def test_text_that_is_not_a_worker_job_is_refused(text, named):
    with pytest.raises(ValueError, match=named):
        WorkerJob.from_json(text)


def test_a_worker_given_an_unreadable_job_sends_one_internal_error(rt):
    read_fd, write_fd = os.pipe()
    job = json.dumps({**BASE, "stage": "export", "handover": "/x.npz"})  # an older form
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
