"""``python -m runner IMAGE -o OUT.glb --backend pixal3d --pixal3d-dir <stand-in>``: a GLB and
the full event stream; ``runner check --backend pixal3d`` validates a port without weights."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import trimesh

from stageload.pixal3d import plan_for


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.mark.slow
def test_runner_pixal3d_backend_writes_a_glb_with_the_full_event_stream(standin_dir,
                                                                        standin_weights, rgb_image,
                                                                        tmp_path, repo_root):
    out = tmp_path / "character.glb"
    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "runner", str(rgb_image), "-o", str(out),
                           "--backend", "pixal3d", "--pixal3d-dir", str(standin_dir),
                           "--texture-size", "512", "--seed", "3"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the hand-over to the export process is the adapter's temporary: the port's line naming
    # it (a path deleted moments later) is not shown
    assert "[Checkpoint] Saved mesh to" not in proc.stderr
    events = _events(proc.stdout)
    assert all(e["v"] == 1 for e in events)
    assert events[0]["event"] == "hello" and events[-1]["event"] == "result"
    plan = plan_for("1024_cascade")
    assert events[0]["stages"] == list(plan)
    assert [e["stage"] for e in events if e["event"] == "stage" and "parent" not in e] == list(plan)
    assert [e["stage"] for e in events if e["event"] == "ready"] == list(plan)
    loads = [e for e in events if e["event"] in ("load", "reload")]
    assert {e["model"] for e in loads} == {n for names in plan.values() for n in names}
    assert all(e["model"] in plan[e["stage"]] and e["bytes"] > 0 for e in loads)
    releases = [e for e in events if e["event"] == "release"]
    assert {e["model"] for e in releases} == {e["model"] for e in loads}
    assert any(e["event"] == "memory" for e in events)
    scene = trimesh.load(out, force="scene")
    (geom,) = scene.geometry.values()
    assert len(geom.faces) > 100 and geom.visual.material.baseColorTexture is not None
    trace = [json.loads(line) for line in open(events[-1]["trace"])]
    assert [e["stage"] for e in trace
            if e.get("event") == "stage" and "parent" not in e] == list(plan)


def test_runner_check_validates_a_port_folder(standin_dir, tmp_path, repo_root):
    cmd = [sys.executable, "-m", "runner", "check", "--backend", "pixal3d", "--pixal3d-dir"]
    good = subprocess.run(cmd + [str(standin_dir)], capture_output=True, text=True, timeout=300,
                          cwd=repo_root)
    assert good.returncode == 0, good.stderr[-2000:]
    report = json.loads(good.stdout)["backends"]["pixal3d"]
    assert report["ok"] and report["version"]["pixal3d"] == "0.0-standin"
    broken = tmp_path / "port"
    shutil.copytree(standin_dir, broken, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "pixal3d" / "models" / "__init__.py").write_text("")  # no from_pretrained
    bad = subprocess.run(cmd + [str(broken)], capture_output=True, text=True, timeout=300,
                         cwd=repo_root)
    assert bad.returncode != 0
    report = json.loads(bad.stdout)["backends"]["pixal3d"]
    assert not report["ok"] and "pixal3d.models.from_pretrained" in report["reason"]
