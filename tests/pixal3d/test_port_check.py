"""The port check: a good folder passes; a folder lacking one checked name stops the run before
anything is loaded, with a message naming it; a missing folder says so."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import safetensors.torch

from stageload.pixal3d import PortError, check_port, open_port
from stageload.pixal3d.errors import PortMissing, PortVersionError
from tests.pixal3d.runs import new_run


def _copy_without(standin_dir, tmp_path, relpath, old, new):
    dst = tmp_path / "port"
    shutil.copytree(standin_dir, dst, ignore=shutil.ignore_patterns("__pycache__"))
    path = dst / relpath
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return dst


def test_standin_port_passes_the_check(standin_dir):
    report = check_port(standin_dir)
    assert report["ok"], report
    assert report["version"]["pixal3d"] == "0.0-standin"
    assert report["root"] == str(standin_dir)


@pytest.mark.parametrize("relpath, old, new, name", [
    ("generate_mps.py", "def build_image_cond_model(", "def build_image_cond_model_renamed(",
     "generate_mps.build_image_cond_model"),
    ("pixal3d/pipelines/pixal3d_image_to_3d.py", "grid_resolution_override: int = None) -> dict:",
     "grid_res_override: int = None) -> dict:", "Pixal3DImageTo3DPipeline.get_proj_cond_shape("),
    ("pixal3d/pipelines/pixal3d_image_to_3d.py", "    def decode_latent(",
     "    def decode_latents(", "Pixal3DImageTo3DPipeline.decode_latent"),
])
def test_missing_name_stops_before_anything_is_loaded(standin_dir, standin_weights, tmp_path,
                                                      monkeypatch, relpath, old, new, name):
    broken = _copy_without(standin_dir, tmp_path, relpath, old, new)
    reads = []
    real = safetensors.torch.load_file
    monkeypatch.setattr(safetensors.torch, "load_file",
                        lambda *a, **k: reads.append(a) or real(*a, **k))
    events = []
    with pytest.raises(PortError) as err:
        new_run(broken, events=events.append)
    assert isinstance(err.value, PortVersionError)
    assert name in str(err.value)
    assert events == [] and reads == []
    report = check_port(broken)
    assert not report["ok"] and any(name in m for m in report["missing"])
    open_port(standin_dir)  # the good port imports again afterwards (modules of the copy purged)


def test_missing_folder_and_not_a_port(tmp_path):
    with pytest.raises(PortError) as err:
        open_port(tmp_path / "nowhere")
    assert isinstance(err.value, PortMissing) and "does not exist" in str(err.value)
    with pytest.raises(PortError) as err:
        open_port(tmp_path)
    assert "generate_mps.py" in str(err.value)


def test_env_var_locates_the_port(standin_dir, monkeypatch):
    monkeypatch.setenv("PIXAL3D_DIR", str(standin_dir))
    assert check_port(None)["root"] == str(standin_dir)


def test_check_command_reports_json_without_loading(standin_dir, tmp_path):
    broken = _copy_without(standin_dir, tmp_path, "generate_mps.py", "def init_pipeline(",
                           "def init_pipe(")
    cmd = [sys.executable, "-m", "stageload.pixal3d", "check", "--pixal3d-dir"]
    good = subprocess.run(cmd + [str(standin_dir)], capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["ok"] is True
    bad = subprocess.run(cmd + [str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 3  # drift: distinct from 1 (no port)
    report = json.loads(bad.stdout)
    assert report["error"] == "PortVersionError"
    assert "generate_mps.init_pipeline" in report["reason"]
