"""A checkpoint that lacks a parameter its model has, or holds a tensor of
another shape or kind, is ``bad_weights`` naming the file and the tensor — through the direct
loader, the port's own loader and the runner — never a fallback that keeps the parameter's
random initialisation. A fallback that remains (the technique's own limits) is a ``warning``."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from stageload.pixal3d.build.direct import (
    METHOD_PORT,
    check_checkpoint,
    load_checked,
    load_port_model,
    with_bare_fallback,
)
from stageload.pixal3d.errors import BadWeights


class _Small(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.gain = nn.Parameter(torch.ones(width))
        self.register_buffer("count", torch.zeros(1, dtype=torch.int64))


def _write(tmp_path, state_edit):
    torch.manual_seed(0)
    state = {k: v.contiguous() for k, v in _Small().state_dict().items()}
    state_edit(state)
    save_file(state, str(tmp_path / "m.safetensors"))
    (tmp_path / "m.json").write_text(json.dumps({"name": "_Small", "args": {"width": 8}}))
    return str(tmp_path / "m")


def _never():
    raise AssertionError("fell back to the port's loader")


@pytest.mark.parametrize("edit,named", [
    (lambda s: s.pop("gain"), "gain"),
    (lambda s: s.update(gain=torch.ones(9)), "gain"),
    (lambda s: s.update({"fc.weight": torch.ones(8, 8, dtype=torch.int32)}), "fc.weight"),
    (lambda s: s.update(count=torch.zeros(1)), "count"),
])
def test_a_checkpoint_that_does_not_fit_is_bad_weights_naming_file_and_tensor(tmp_path, edit,
                                                                              named):
    path = _write(tmp_path, edit)
    with pytest.raises(BadWeights) as info:
        load_port_model(types.SimpleNamespace(_Small=_Small), path, "cpu", _never)
    assert info.value.file == f"{path}.safetensors" and named in info.value.missing
    assert f"{path}.safetensors" in info.value.message and named in info.value.message
    assert info.value.details == {"file": f"{path}.safetensors",
                                  "tensors": list(info.value.missing)}


def test_a_missing_buffer_is_not_bad_weights(tmp_path):
    """The port keeps what __init__ computed for a buffer the file lacks: same model."""
    path = _write(tmp_path, lambda s: s.pop("count"))
    module, note = load_port_model(types.SimpleNamespace(_Small=_Small), path, "cpu", _never)
    assert note.fallback is None and int(module.count) == 0


def test_the_ports_own_loader_is_checked_too(tmp_path):
    """--no-direct-load and eager mode: the port's strict=False load is checked afterwards."""
    path = _write(tmp_path, lambda s: s.pop("gain"))

    def port_from_pretrained(p):
        model = _Small()
        model.load_state_dict(load_file(f"{p}.safetensors"), strict=False)  # the port's way
        return model

    with pytest.raises(BadWeights, match="gain"):
        load_checked(port_from_pretrained, path)
    check_checkpoint(port_from_pretrained(_write(tmp_path, lambda s: None)), f"{path}.safetensors")


def test_bad_weights_are_never_retried_under_the_bare_name(tmp_path):
    path = _write(tmp_path, lambda s: s.pop("gain"))
    tried = []

    def load(p):
        tried.append(p)
        return load_port_model(types.SimpleNamespace(_Small=_Small), p, "cpu", _never)

    with pytest.raises(BadWeights):
        with_bare_fallback(load, path, "m")
    assert tried == [path]


def test_a_bare_name_fallback_is_reported(tmp_path):
    reasons = []
    result = with_bare_fallback(lambda p: p if p == "bare" else open(p), str(tmp_path / "gone"),
                                "bare", reasons.append)
    assert result == "bare" and len(reasons) == 1 and "bare" in reasons[0]


def _runner(args, env, repo_root, timeout=300):
    return subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=repo_root)


@pytest.fixture
def damaged_weights(tmp_path, standin_weights):
    """A copy of the stand-in weights with ``t_embedder.mlp.0.weight`` removed from one model."""
    root = tmp_path / "weights"
    shutil.copytree(standin_weights.root, root)
    ckpts = root / standin_weights.model_dir.relative_to(standin_weights.root) / "ckpts"
    ckpt = ckpts / "sparse_structure_flow_model.safetensors"
    state = load_file(str(ckpt))
    del state["t_embedder.mlp.0.weight"]
    save_file(state, str(ckpt))
    return {"HF_HOME": str(root / "hf"), "TORCH_HOME": str(root / "torch")}, ckpt


@pytest.mark.parametrize("load", ["staged", "eager"])
def test_runner_refuses_a_missing_weight_with_bad_weights(standin_dir, damaged_weights, rgb_image,
                                                          tmp_path, repo_root, load):
    env_weights, ckpt = damaged_weights
    env = {**os.environ, **env_weights, "PIXAL3D_DEVICE": "cpu"}
    out = tmp_path / "c.glb"
    proc = _runner([str(rgb_image), "-o", str(out), "--backend", "pixal3d",
                    "--pixal3d-dir", str(standin_dir), "--texture-size", "512", "--load", load],
                   env, repo_root)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 35, proc.stderr[-3000:]
    error = events[-1]
    assert error["event"] == "error" and error["kind"] == "bad_weights"
    assert "t_embedder.mlp.0.weight" in error["message"] and ckpt.name in error["message"]
    assert error["details"]["tensors"] == ["t_embedder.mlp.0.weight"]
    assert not out.exists()
    assert "runner: bad_weights:" in proc.stderr


class _Table(nn.Module):
    """A non-persistent buffer computed from the parameters' device: on meta under the direct
    loader, so the port's own loader builds it (the same tensors)."""

    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.register_buffer("table", torch.linspace(0, 1, width, device=self.fc.weight.device),
                             persistent=False)


def test_the_adapters_remaining_fallback_is_a_warning_event(tmp_path):
    """The adapter's loader of one pipeline model (the real ``StagedBuild.model_loader`` on a
    bare run): the direct path's fallback to the port's loader is a ``warning`` event."""
    from stageload.events import make_event
    from stageload.pixal3d.build.staged import StagedBuild

    torch.manual_seed(0)
    save_file({k: v.contiguous() for k, v in _Table().state_dict().items()},
              str(tmp_path / "t.safetensors"))
    (tmp_path / "t.json").write_text(json.dumps({"name": "_Table", "args": {"width": 8}}))
    events = []
    run = types.SimpleNamespace(
        port=types.SimpleNamespace(models=types.SimpleNamespace(_Table=_Table)),
        device=torch.device("cpu"), model_path=str(tmp_path), direct_to_device=True,
        load_notes={}, emit=lambda kind, **fields: events.append(make_event(kind, **fields)))

    def from_pretrained(p):
        model = _Table()
        model.load_state_dict(load_file(f"{p}.safetensors"), strict=False)
        return model

    module = StagedBuild(run).model_loader("table_model", from_pretrained, str(tmp_path / "t"))()
    assert run.load_notes["table_model"].method == METHOD_PORT
    (warning,) = [e for e in events if e["event"] == "warning"]
    assert warning["fallback"] == "model_load" and warning["model"] == "table_model"
    assert "table" in warning["cause"] and warning["message"] and warning["source"]
    assert torch.equal(module.table, torch.linspace(0, 1, 8))
