"""Weights that are all NaN: the sampler outputs are not finite, which the
run says at once (a ``warning`` event naming the sampler and how many values) and the empty
mesh that follows is blamed on — not on the macOS GPU watchdog. Real stand-in weights, every
floating tensor overwritten with NaN, a real staged run on the CPU."""
from __future__ import annotations

import shutil

import pytest
import safetensors.torch
import torch

from stageload.pixal3d.errors import EmptyMeshError
from tests.pixal3d.runs import new_run


def _all_nan(folder):
    for path in folder.rglob("*.safetensors"):
        state = safetensors.torch.load_file(str(path))
        state = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
                 for k, v in state.items()}
        safetensors.torch.save_file(state, str(path))


def test_nan_weights_say_the_sampler_output_is_not_finite(standin_dir, standin_weights, repo_root,
                                                          tmp_path, monkeypatch):
    home = tmp_path / "hf"
    shutil.copytree(standin_weights.env["HF_HOME"], home)
    torch_home = tmp_path / "torch"
    shutil.copytree(standin_weights.env["TORCH_HOME"], torch_home)
    _all_nan(home)
    _all_nan(torch_home)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    events = []
    run = new_run(standin_dir, events=events.append, seed=3, texture_size=512)
    image = repo_root / "tests" / "data" / "images" / "character_1.png"  # alpha: no matting
    with pytest.raises(EmptyMeshError) as err:
        run.generate(image, tmp_path / "out.glb", fov=0.6, steps=1)
    run.close()
    assert "sampler output was not finite" in err.value.message, err.value.message
    assert "NaN or infinite" in err.value.message
    assert "not the GPU watchdog" in err.value.hint and "display-heavy" not in err.value.hint
    warnings = [e for e in events if e["event"] == "warning"]
    assert warnings and "sampler's output is not finite" in warnings[0]["message"], warnings
    assert not (tmp_path / "out.glb").exists()
