"""The port's export (``--export-engine port``) in a process of its own (``--export-process
own``, the default) through the real runner on the stand-in port: a different pid from the
model stages, the model process gone before export's ``ready``, sub-steps under export, the job
folder never left behind (success, refusal, SIGKILL of the supervisor — then cleaned by the next
run)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from stageload.pixal3d import plan_for
from stageload.pixal3d.export.steps import SUBSTEPS


def _run(args, env, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "runner", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


@pytest.fixture
def env(standin_weights):
    return {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
            "PIXAL3D_STANDIN_EXPORT_SCALE": "0"}


def _job_dirs(folder):
    return [p.name for p in folder.iterdir() if ".job-" in p.name]


def _trace(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


@pytest.mark.slow
def test_export_runs_after_the_model_process_in_a_process_of_its_own(
        standin_dir, env, rgb_image, tmp_path, repo_root):
    out = tmp_path / "own.glb"
    proc = _run([rgb_image, "-o", out, "--backend", "pixal3d", "--pixal3d-dir", standin_dir,
                 "--texture-size", "512", "--export-engine", "port"], env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = _trace(out.with_suffix(".trace.jsonl"))
    stages = [e for e in trace if e.get("event") == "stage" and e.get("parent") is None]
    assert [e["stage"] for e in stages] == list(plan_for("1024_cascade"))
    pids = {e["stage"]: e["pid"] for e in stages}
    assert len({pids[s] for s in pids if s != "export"}) == 1 and pids["export"] != pids["decode"]
    model_exit = next(e for e in trace if e.get("event") == "worker_exit")
    export_ready = next(e for e in trace if e.get("event") == "ready" and e["stage"] == "export")
    assert model_exit["pid"] == pids["decode"] and model_exit["code"] == 0
    assert model_exit["t"] < export_ready["t"]
    assert (not psutil.pid_exists(pids["decode"])
            or psutil.Process(pids["decode"]).status() == "zombie")
    subs = [e for e in trace if e.get("event") == "stage" and e.get("parent") == "export"]
    assert [e["stage"] for e in subs] == ["handover", *SUBSTEPS]
    assert all(e["t"] >= export_ready["t"] for e in subs)
    # the export process's start (imports, the asset load) is in export's
    # window — its handover sub-step — and none of its samples falls in decode's
    export_stage = next(e for e in stages if e["stage"] == "export")
    samples = [e for e in trace if e.get("event") == "sample" and e.get("pid") == pids["export"]]
    assert samples and all(e["t"] >= export_stage["t"] for e in samples)
    assert trace.index(export_stage) < trace.index(samples[0])
    assert subs[0]["stage"] == "handover" and subs[0]["pid"] == pids["export"]
    admissions = [e for e in trace if e.get("event") == "guard" and e.get("state") == "started"]
    assert len(admissions) == 2  # the guard admitted the export process too
    text = subprocess.run([sys.executable, "-m", "stageload", "summary", "--json",
                           str(out.with_suffix(".trace.jsonl"))],
                          capture_output=True, text=True, cwd=repo_root, timeout=60).stdout
    export_row = next(st for st in json.loads(text)["stages"] if st["stage"] == "export")
    rows = [sub["stage"] for sub in export_row["substeps"]]  # the lean stages have their own
    assert rows == ["handover", *SUBSTEPS]
    assert out.is_file() and _job_dirs(tmp_path) == []

    inproc = tmp_path / "inproc.glb"
    proc = _run([rgb_image, "-o", inproc, "--backend", "pixal3d", "--pixal3d-dir", standin_dir,
                 "--texture-size", "512", "--export-process", "in-process",
                 "--export-engine", "port"], env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = _trace(inproc.with_suffix(".trace.jsonl"))
    pids = {e["stage"]: e["pid"] for e in trace
            if e.get("event") == "stage" and e.get("parent") is None}
    assert pids["export"] == pids["decode"]
    assert [e["stage"] for e in trace if e.get("parent") == "export"] == list(SUBSTEPS)


@pytest.mark.slow
def test_dense_grid_sample_is_refused_before_export_with_the_figure(
        standin_dir, env, rgb_image, tmp_path, repo_root):
    out = tmp_path / "dense.glb"
    proc = _run([rgb_image, "-o", out, "--backend", "pixal3d", "--pixal3d-dir", standin_dir,
                 "--texture-size", "512", "--export-engine", "port"],
                {**env, "PIXAL3D_STANDIN_NO_FLEX_GEMM": "1"}, repo_root)
    last = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 45 and last["kind"] == "export_refused", proc.stderr[-2000:]
    assert "25,769,803,776 bytes" in last["message"] and "--allow-dense-grid-sample" in last["hint"]
    assert not out.exists() and _job_dirs(tmp_path) == []
    trace = _trace(out.with_suffix(".trace.jsonl"))
    assert not [e for e in trace if e.get("parent") == "export"
                and e["stage"] not in ("handover", "prepare")]


def _read_events(stream, events):
    for line in stream:
        try:
            events.append(json.loads(line))
        except ValueError:
            pass


def _start_until_export_remeshes(standin_dir, env, rgb_image, out, repo_root):
    """The runner on the stand-in, returned once the export process reports ``remesh``:
    (supervisor Popen, its events so far (a list a thread keeps filling), the reader thread)."""
    sup = subprocess.Popen([sys.executable, "-m", "runner", str(rgb_image), "-o", str(out),
                            "--backend", "pixal3d", "--pixal3d-dir", str(standin_dir),
                            "--texture-size", "512", "--export-engine", "port"],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, cwd=repo_root,
                           env={**env, "PIXAL3D_STANDIN_EXPORT_SCALE": "0.002"})
    events: list[dict] = []
    reader = threading.Thread(target=_read_events, args=(sup.stdout, events), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not any(e.get("parent") == "export" and e.get("stage") == "remesh" for e in events):
        assert sup.poll() is None and time.monotonic() < deadline, events[-3:]
        time.sleep(0.05)
    return sup, events, reader


@pytest.mark.slow
def test_sigkill_of_the_supervisor_during_export_leaves_no_process_and_the_next_run_cleans(
        standin_dir, env, rgb_image, tmp_path, repo_root):
    out = tmp_path / "killed.glb"
    sup, _events, _reader = _start_until_export_remeshes(standin_dir, env, rgb_image, out,
                                                         repo_root)
    family = psutil.Process(sup.pid).children(recursive=True)
    assert family and _job_dirs(tmp_path)  # the export process and its hand-over folder
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait(timeout=30)
    gone, alive = psutil.wait_procs(family, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    assert not out.exists()
    # the next run in that folder (any backend) removes what the killed supervisor left
    nxt = _run([rgb_image, "-o", tmp_path / "next.glb"], env, repo_root)
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert _job_dirs(tmp_path) == [] and "left by a runner that was killed" in nxt.stderr


@pytest.mark.slow
def test_cancel_during_export_stops_the_export_process_and_removes_the_job_folder(
        standin_dir, env, rgb_image, tmp_path, repo_root):
    out = tmp_path / "cancelled.glb"
    sup, events, reader = _start_until_export_remeshes(standin_dir, env, rgb_image, out, repo_root)
    family = psutil.Process(sup.pid).children(recursive=True)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=60) == 130
    reader.join(timeout=10)
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "cancelled"
    gone, alive = psutil.wait_procs(family, timeout=15)
    assert not alive and not out.exists() and _job_dirs(tmp_path) == []


def test_export_admission_uses_the_export_peak_of_the_need_from_trace(tmp_path):
    from runner.backends.pixal3d.handover import export_need
    from stageload.guard import GuardConfig

    trace = tmp_path / "earlier.jsonl"
    rows = [{"event": "stage", "t": 0.0, "stage": "decode", "index": 0, "count": 2},
            {"event": "ready", "t": 0.1, "stage": "decode", "seconds": 0.1, "released_bytes": 0},
            {"event": "sample", "t": 0.5, "footprint": 9_000_000_000},
            {"event": "stage", "t": 1.0, "stage": "export", "index": 1, "count": 2},
            {"event": "ready", "t": 1.1, "stage": "export", "seconds": 0.1, "released_bytes": 0},
            {"event": "sample", "t": 1.5, "footprint": 3_000_000_000}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert export_need(GuardConfig(need=9_000_000_000, need_source=str(trace))) == 3_000_000_000
    assert export_need(GuardConfig(need=5)) == 5
    assert export_need(GuardConfig()) is None
