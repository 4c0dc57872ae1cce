"""``python -m stageload.pixal3d run`` as a real subprocess: stdout carries only JSON event lines
(the port's own prints go to stderr), and ``--trace`` holds memory samples the summary can use."""
import json
import os
import subprocess
import sys

import pytest

from stageload.summary import summarize
from stageload.trace import read_trace


@pytest.mark.parametrize("load", ["staged", "eager"])
def test_stdout_is_only_json_and_the_trace_has_samples(load, standin_dir, standin_weights,
                                                       rgb_image, tmp_path, repo_root):
    out, trace = tmp_path / "out.glb", tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "stageload.pixal3d", "run", str(rgb_image), "-o", str(out),
         "--pixal3d-dir", str(standin_dir), "--device", "cpu", "--fov", "0.6", "--steps", "2",
         "--load", load, "--trace", str(trace)],
        capture_output=True, text=True, cwd=repo_root, timeout=180,
        env={**os.environ, **standin_weights.env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    events = [json.loads(line) for line in lines]  # every stdout line is JSON
    assert events[-1]["event"] == "result"
    assert {"stage", "ready", "load"} <= {e["event"] for e in events}
    # the port's own prints went to stderr, not lost
    assert "[Export] Textured GLB saved" in proc.stderr
    assert out.stat().st_size > 0

    summary = summarize(read_trace(trace))
    assert summary["samples"] >= 5
    stages = {s["stage"]: s for s in summary["stages"]}
    assert {"structure", "export"} <= set(stages)
    assert stages["structure"]["peak"] and stages["structure"]["peak"] > 50_000_000  # torch alone
    assert summary["peak"]["bytes"] >= stages["structure"]["peak"]

    chart = tmp_path / "chart.png"
    plot = subprocess.run([sys.executable, "-m", "stageload", "plot", str(trace), "-o", str(chart)],
                          capture_output=True, text=True, cwd=repo_root, timeout=120)
    assert plot.returncode == 0, plot.stderr
    assert chart.stat().st_size > 10_000
