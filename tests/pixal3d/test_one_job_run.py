"""Every input kind through one job run: a Pixal3D run on the stand-in port and ``python -m
runner export`` of the asset it kept both run ``runner.job.run.JobRun.run`` (with an
``ImageInput`` and an ``AssetInput``), and each process of either job parses the job's options
once, where they enter it (``JobOptions.parse``: the command line, or the worker job's JSON),
and checks the export levers against the engine only where the engine is to run them: the
supervisor (the backend's precheck, or ``runner export``'s input) and the export process
(``export_asset``, the engine's entry) — the model process, which never exports, not at all.
Counted in the real processes by the runner's test hook (tests/runner/worker_hook), which
wraps ``JobRun.run``, ``JobOptions.parse`` and ``ExportLevers.check`` and writes one line per
call."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "tests" / "runner" / "worker_hook"

COUNT = r'''
import os
def _note(what):
    with open(os.environ["ONE_RUN_COUNTS"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {what}\n")
from bounded_export import engine as _engine
_check = _engine.ExportLevers.check
def _counted_check(self):
    _note("levers")
    return _check(self)
_engine.ExportLevers.check = _counted_check
from meshfacts.job_options import JobOptions as _Options
_parse = _Options.parse.__func__
def _counted_parse(cls, *args, **kwargs):
    _note("parse")
    return _parse(cls, *args, **kwargs)
_Options.parse = classmethod(_counted_parse)
'''
SUPERVISOR = COUNT + r'''
from runner.job import run as _jobrun
_run = _jobrun.JobRun.run
def _noted_run(self):
    _note("jobrun " + type(self.job.input).__name__)
    return _run(self)
_jobrun.JobRun.run = _noted_run
'''


def _run(args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "runner", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO)


def _notes(path: Path) -> dict[int, Counter]:
    """pid → what it noted, counted."""
    seen: dict[int, Counter] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        pid, what = line.split(" ", 1)
        seen.setdefault(int(pid), Counter())[what] += 1
    return seen


def _pids(trace: Path) -> dict[str, int]:
    """The supervisor's pid (``hello``) and each top-level stage's process pid."""
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    pids = {"supervisor": events[0]["pid"]}
    pids.update({e["stage"]: e["pid"] for e in events
                 if e.get("event") == "stage" and e.get("parent") is None})
    return pids


@pytest.mark.slow
def test_a_pixal3d_run_and_runner_export_share_one_job_run_and_check_levers_once(
        standin_weights, standin_dir, rgb_image, tmp_path):
    counts = tmp_path / "counts.txt"
    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
           "PIXAL3D_STANDIN_EXPORT_SCALE": "0", "ONE_RUN_COUNTS": str(counts),
           "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), str(REPO)]),
           "RUNNER_TEST_WORKER_HOOK": COUNT, "RUNNER_TEST_SUPERVISOR_HOOK": SUPERVISOR}
    run = _run([rgb_image, "-o", tmp_path / "char.glb", "--backend", "pixal3d", "--pixal3d-dir",
                standin_dir, "--texture-size", "512", "--export-budget", "2G", "--keep-asset"],
               env)
    assert run.returncode == 0, run.stderr[-3000:]
    asset = tmp_path / "char.asset.npz"
    again = _run(["export", asset, "-o", tmp_path / "again.glb", "--texture-size", "1024",
                  "--export-budget", "1G"], env)
    assert again.returncode == 0, again.stderr[-3000:]

    seen = _notes(counts)
    run_pids = _pids(tmp_path / "char.trace.jsonl")
    export_pids = _pids(tmp_path / "again.trace.jsonl")
    assert seen[run_pids["supervisor"]]["jobrun ImageInput"] == 1
    assert seen[export_pids["supervisor"]]["jobrun AssetInput"] == 1
    processes = {"run's supervisor": run_pids["supervisor"], "model": run_pids["decode"],
                 "run's export": run_pids["export"],
                 "export's supervisor": export_pids["supervisor"],
                 "export's export": export_pids["export"]}
    assert len(set(processes.values())) == len(processes)  # five processes, each its own
    assert {name: seen[pid]["parse"] for name, pid in processes.items()} == {
        name: 1 for name in processes}
    assert {name: seen[pid]["levers"] for name, pid in processes.items()} == {
        name: 0 if name == "model" else 1 for name in processes}
    # no other process parsed or checked them (the decimation's children take arrays)
    assert all(count["levers"] == count["parse"] == 0 for pid, count in seen.items()
               if pid not in processes.values())
