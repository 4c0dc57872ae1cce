"""The supervisor's light backend check (``Backend.precheck``): a Pixal3D folder that is
missing or is not a port fails right after ``hello`` — before the image probe, the guard's
admission, the worker and the trace — with the port check's kind (``pixal3d_missing``, exit 32),
and without importing torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "goblin.png"


def fake_port(root: Path) -> Path:
    """The files and folders ``locate_port`` looks for (nothing importable behind them)."""
    (root / "pixal3d" / "pipelines").mkdir(parents=True)
    (root / "pixal3d" / "models").mkdir()
    (root / "pixal3d" / "__init__.py").write_text("")
    (root / "generate_mps.py").write_text("")
    return root


@pytest.mark.parametrize("case", ["nonexistent", "empty folder", "a file", "no folder",
                                  "bad $PIXAL3D_DIR"])
def test_bad_pixal3d_folder_fails_right_after_hello_with_no_trace(rt, tmp_path, case):
    out = tmp_path / "x.glb"
    env = {k: v for k, v in os.environ.items() if k != "PIXAL3D_DIR"}
    args = [EXAMPLE, "-o", out, "--backend", "pixal3d", "--wait-free", "1%"]
    words = {"nonexistent": "does not exist", "empty folder": "is not a Pixal3D-mac checkout",
             "a file": "is a file, not a folder", "no folder": "No Pixal3D-mac folder given",
             "bad $PIXAL3D_DIR": "$PIXAL3D_DIR"}[case]
    if case == "nonexistent":
        args += ["--pixal3d-dir", tmp_path / "nonexistent"]
    elif case == "empty folder":
        (tmp_path / "empty").mkdir()
        args += ["--pixal3d-dir", tmp_path / "empty"]
    elif case == "a file":
        (tmp_path / "file").write_text("not a folder")
        args += ["--pixal3d-dir", tmp_path / "file"]
    elif case == "bad $PIXAL3D_DIR":
        env["PIXAL3D_DIR"] = str(tmp_path / "gone")
    env["PYTHONPATH"] = str(rt.REPO) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    proc = subprocess.run([rt.PY, "-m", "runner", *map(str, args)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    seconds = time.monotonic() - t0
    events = rt.parse(proc.stdout)
    # hello, then the error: no input probe, no guard admission, no worker stages.
    assert [e["event"] for e in events] == ["hello", "error"], (events, proc.stderr[-2000:])
    err = events[-1]
    assert err["kind"] == "pixal3d_missing" and proc.returncode == 32, err
    assert words in err["message"], err["message"]
    assert err["hint"]
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"nonexistent": [], "empty folder": ["empty"], "a file": ["file"], "no folder": [],
         "bad $PIXAL3D_DIR": []}[case]), "no GLB, no trace, nothing else written"
    assert seconds < 20, seconds  # interpreter start only; the guard sampled ~2–3 s before


def test_precheck_reads_only_the_file_system(tmp_path):
    """A port folder whose sources have what the adapter relies on, with its weights in the
    cache, passes (the static check: ast, no import; the weights: file system and safetensors
    headers); a bad one raises RunnerError; torch is never imported by the supervisor's side (a
    fresh interpreter, so no earlier import hides it)."""
    import shutil

    from standin import PORT_DIR, make_weights
    weights = make_weights(tmp_path / "weights", scale=1e-4)
    good = tmp_path / "port"
    shutil.copytree(PORT_DIR, good, ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "import json, sys\n"
        "from runner import backends\n"
        "from meshfacts.errors import RunnerError\n"
        "from meshfacts.job_options import JobOptions\n"
        "b = backends.get('pixal3d')\n"
        "def job(folder): return JobOptions.parse('pixal3d', {'pixal3d_dir': folder})\n"
        "out = {'good': b.run_precheck(job(sys.argv[1]))}\n"
        "try:\n"
        "    b.run_precheck(job(sys.argv[2]))\n"
        "except RunnerError as e:\n"
        "    out['bad'] = [e.kind, e.exit_code, e.details]\n"
        "backends.get('builtin').run_precheck(JobOptions.parse('builtin', {}))\n"
        "out['torch'] = 'torch' in sys.modules\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]), **weights.env)
    env.pop("PIXAL3D_DIR", None)
    proc = subprocess.run([sys.executable, "-c", code, str(good), str(tmp_path / "half")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["good"] is None
    assert out["bad"][:2] == ["pixal3d_missing", 32]
    assert out["torch"] is False
    # A folder that lacks part of the layout names what is missing.
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "generate_mps.py").write_text("")
    proc = subprocess.run([sys.executable, "-c", code, str(good), str(tmp_path / "half")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert json.loads(proc.stdout)["bad"][2]["missing"] == [
        "pixal3d/__init__.py", "pixal3d/pipelines", "pixal3d/models"]
    # A port whose sources drifted: pixal3d_version, every drifted item named.
    drifted = fake_port(tmp_path / "drifted")
    shutil.copy(good / "generate_mps.py", drifted / "generate_mps.py")
    (drifted / "pixal3d" / "pipelines" / "pixal3d_image_to_3d.py").write_text(
        (good / "pixal3d" / "pipelines" / "pixal3d_image_to_3d.py").read_text().replace(
            "def decode_latent(", "def decode_latents("))
    proc = subprocess.run([sys.executable, "-c", code, str(good), str(drifted)],
                          capture_output=True, text=True, timeout=60, env=env)
    out = json.loads(proc.stdout)
    assert out["bad"][:2] == ["pixal3d_version", 33] and out["torch"] is False
    assert out["bad"][2]["missing"] == [
        "Pixal3DImageTo3DPipeline.decode_latent (missing; renamed to decode_latents?)"]
