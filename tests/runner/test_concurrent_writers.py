"""Concurrent writers: two runs on one output with ``--overwrite`` never
leave a trace that describes another job than the GLB (each output is claimed for the whole
job: the second runner is refused at once), and two batches writing into one folder keep
each other's manifest records (updates are merged under a lock). The two runs are looped a
few times: each supervisor is held inside the race's window (``_HELD_AFTER_CHECK``), so without
the claim every trial fails (the first trial failed in each of 4 runs with ``claim_all`` a
no-op); the other trials cover the order of the two starts changing."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

TRIALS = 3

# Each supervisor is held 0.3 s right after it has checked the trace path, as a process
# descheduled under load is (the window the trials hit by chance, made certain).
_HELD_AFTER_CHECK = """
import time
import runner.job.outputs as outputs
_check_trace = outputs.check_trace
def _held(*args, **kwargs):
    path = _check_trace(*args, **kwargs)
    time.sleep(0.3)
    return path
outputs.check_trace = _held
"""


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_runs_on_one_output_never_mix_their_files(rt, character, tmp_path):
    out, trace = tmp_path / "c.glb", tmp_path / "c.trace.jsonl"
    assert rt.run([character, "-o", out]).returncode == 0  # an earlier run's files are there
    for trial in range(TRIALS):
        runs = {size: rt.Live([character, "-o", out, "--overwrite", "--texture-size", size],
                              stdin=subprocess.DEVNULL, supervisor_hook=_HELD_AFTER_CHECK)
                for size in ("512", "1024")}
        try:
            done = {size: live.finish(timeout=180) for size, live in runs.items()}
        finally:
            for live in runs.values():
                live.kill()
        winners = {runs[s].proc.pid for s, fin in done.items() if fin.returncode == 0}
        for size, fin in done.items():
            assert fin.returncode in (0, 20), (trial, size, fin.stderr[-1500:])
            if fin.returncode == 20:
                assert fin.last()["kind"] == "output_exists"
                assert "being written by another runner" in fin.last()["message"]
        assert winners, (trial, [fin.stderr[-800:] for fin in done.values()])
        if len(winners) == 2:  # both wrote: only one after the other, never at once
            spans = sorted((fin.first("hello")["t"], fin.last()["t"]) for fin in done.values())
            assert spans[0][1] <= spans[1][0], f"trial {trial}: both jobs wrote at once"
        lines = _lines(trace)
        assert lines[0]["event"] == "hello" and lines[0]["pid"] in winners, trial
        assert lines[-1]["event"] == "result", (trial, lines[-1])
        assert lines[-1]["info"]["glb_bytes"] == out.stat().st_size, \
            f"trial {trial}: the trace describes another job than the GLB"
        assert not list(tmp_path.glob(".*")), list(tmp_path.glob(".*"))  # no claim, no partial


@pytest.mark.slow
def test_two_batches_into_one_folder_keep_each_others_records(rt, character, tmp_path):
    out = tmp_path / "out"
    folders = {}
    for batch in ("a", "b"):
        folders[batch] = tmp_path / f"in-{batch}"
        folders[batch].mkdir()
        for k in (1, 2):
            shutil.copy(character, folders[batch] / f"{batch}{k}.png")
    runs = [rt.Live(["batch", folder, "-o", out], stdin=subprocess.DEVNULL)
            for folder in folders.values()]
    try:
        finished = [live.finish(timeout=300) for live in runs]
    finally:
        for live in runs:
            live.kill()
    assert [fin.returncode for fin in finished] == [0, 0], [f.stderr[-1500:] for f in finished]
    entries = json.loads((out / "manifest.json").read_text())["images"]
    assert {name: e["status"] for name, e in entries.items()} == {
        "a1.png": "done", "a2.png": "done", "b1.png": "done", "b2.png": "done"}
    again = rt.run(["batch", folders["a"], "-o", out])
    assert again.returncode == 0 and again.last()["skipped"] == 2, again.stderr[-1500:]
