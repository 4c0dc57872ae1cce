"""The input image is decoded once per job: the supervisor's probe decodes and checks it, and
the worker takes the decoded pixels from its stdin with what the probe learnt instead of
opening the file again. Counted in the real processes by the test hook, which wraps the one
decoding function (``runner.images.reading._verify_and_load``); the GLB is the one a worker that
decodes the file itself makes (the same bytes)."""
from __future__ import annotations

import json
import subprocess
from collections import Counter

from .conftest import PY, REPO, env

COUNT = r'''
import os
from runner.images import reading as _inputs
_decode = _inputs._verify_and_load
def _counted(path):
    with open(os.environ["DECODE_COUNTS"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    return _decode(path)
_inputs._verify_and_load = _counted
'''


def _run(args, environment):
    return subprocess.run([PY, "-m", "runner", *map(str, args)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180, env=environment,
                          cwd=REPO)


def test_the_image_is_decoded_once_per_job(tmp_path, shared_images):
    counts = tmp_path / "decodes.txt"
    environment = {**env(worker_hook=COUNT, supervisor_hook=COUNT),
                   "DECODE_COUNTS": str(counts)}
    out = tmp_path / "a.glb"
    proc = _run([shared_images[0], "-o", out, "--texture-size", "512"], environment)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    supervisor = events[0]["pid"]
    worker = next(e["pid"] for e in events if e["event"] == "stage")
    decoded = Counter(int(line) for line in counts.read_text().splitlines())
    assert decoded == {supervisor: 1}, (decoded, supervisor, worker)

    # the control: a worker that decodes the file itself (its job without the probe's facts)
    # makes the same GLB
    again = tmp_path / "b.glb"
    code = ("import sys, runner.worker.run as w, runner.job.records as j\n"
            "real = j.WorkerJob.from_json\n"
            "def plain(text):\n"
            "    import dataclasses\n"
            "    return dataclasses.replace(real(text), probed=None)\n"
            "j.WorkerJob.from_json = plain\n")
    environment = {**env(worker_hook=COUNT + code, supervisor_hook=COUNT),
                   "DECODE_COUNTS": str(counts)}
    counts.unlink()
    proc = _run([shared_images[0], "-o", again, "--texture-size", "512"], environment)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(counts.read_text().splitlines()) == 2  # the control decodes twice
    assert again.read_bytes() == out.read_bytes()
