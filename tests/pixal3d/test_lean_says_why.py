"""Every lean part acts or says why not, in a whole staged run on the stand-in (CPU):

- the flow attention under a back end with nothing to slice (``flash_attn``, the port's choice
  when the mtlflashattn shim imports) sends a ``working_memory`` event saying so — set in
  process, and from ``SPARSE_ATTN_BACKEND`` as a user sets it, in a runner run's trace;
- decoders whose layers lean does not know (their class names absent) send a ``warning`` each;
- Metal's limit, which cannot be set without MPS, says why in its ``working_memory`` event;
- the port's device switches (``PIXAL3D_PROJ_GRID_DEVICE=cpu``, ``PIXAL3D_NAF_DEVICE=cpu``)
  with lean give the port's result within the stated bound, with a ``warning``, no traceback.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from stageload.pixal3d.lean import decoders as lean_decoders
from stageload.pixal3d.lean import models as lean_model
from tests.pixal3d.runs import new_run

SEED, TEXTURE, STEPS = 3, 512, 1
LEAN_BOUND = 1e-4  # docs/pixal3d.md, "Working memory" (tests/pixal3d/test_working_memory.py)


def _run(standin_dir, image, tmp_path, name, **kwargs):
    events: list[dict] = []
    run = new_run(standin_dir, events=events.append, prefetch=False, seed=SEED,
                  texture_size=TEXTURE, **kwargs)
    try:
        run.generate(image, tmp_path / f"{name}.glb", steps=STEPS)
    finally:
        run.close()
    return run, events


@pytest.fixture()
def flash_attn():
    config = importlib.import_module("pixal3d.modules.sparse.config")
    before = config.ATTN
    config.set_attn_backend("flash_attn")
    yield
    config.set_attn_backend(before)


def test_each_part_says_why_it_does_nothing(standin_dir, standin_weights, rgb_image, tmp_path,
                                            flash_attn, monkeypatch):
    monkeypatch.setattr(lean_decoders, "BASE_CLASS", "NoSuchDecoder")
    _, events = _run(standin_dir, rgb_image, tmp_path, "why")
    notes = {(e["target"], e["tool"]): e for e in events if e["event"] == "working_memory"}
    attention = notes[(lean_model.ATTENTION_TARGET, "slice_attention")]
    assert attention["note"].startswith("flash_attn: nothing to slice")
    assert attention["bytes_saved"] == 0
    limit = notes[("mps.allocator", "mps_limit")]
    if not torch.backends.mps.is_available():
        assert "not set: MPS is not available" in limit["note"]
    decoders = [e for e in events if e["event"] == "warning" and e.get("fallback") ==
                "port_decoder"]
    assert sorted(e["cause"].split(":")[0] for e in decoders) == ["shape_slat_decoder",
                                                                  "tex_slat_decoder"]
    assert all("is not a NoSuchDecoder" in e["cause"] for e in decoders)


def test_the_ports_device_switches_with_lean_give_the_ports_result(
        standin_dir, standin_weights, rgb_image, tmp_path, monkeypatch):
    monkeypatch.setenv("PIXAL3D_PROJ_GRID_DEVICE", "cpu")
    monkeypatch.setenv("PIXAL3D_NAF_DEVICE", "cpu")
    port, _ = _run(standin_dir, rgb_image, tmp_path, "port", working_memory="port")
    lean, events = _run(standin_dir, rgb_image, tmp_path, "lean")
    for key, b in port.last_latents.items():
        a = lean.last_latents[key]
        for x, y in ((a, b),) if isinstance(b, torch.Tensor) else ((a.feats, b.feats),
                                                                   (a.coords, b.coords)):
            assert x.shape == y.shape, key
            scale = float(y.abs().max()) or 1.0
            assert float((x.float() - y.float()).abs().max()) / scale <= LEAN_BOUND, key
    whole = [e for e in events if e["event"] == "warning" and e.get("fallback") ==
             "banded_upsampler"]
    assert whole and all("whole output" in e["message"] for e in whole)


@pytest.mark.slow
def test_flash_attn_from_the_environment_is_in_the_runs_trace(standin_dir, standin_weights,
                                                              rgb_image, tmp_path, repo_root):
    """``SPARSE_ATTN_BACKEND=flash_attn`` (the port's back end when the mtlflashattn shim
    imports), set as a user sets it: the run's trace says the flow attention has nothing to
    slice — the part named, not a silent pass-through."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
           "SPARSE_ATTN_BACKEND": "flash_attn"}
    proc = subprocess.run([sys.executable, "-m", "runner", str(rgb_image), "-o",
                           str(tmp_path / "flash.glb"), "--backend", "pixal3d", "--pixal3d-dir",
                           str(standin_dir), "--texture-size", "512", "--seed", "3"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = json.loads(proc.stdout.splitlines()[-1])
    trace = [json.loads(line) for line in open(final["trace"], encoding="utf-8")]
    notes = [e for e in trace if e.get("event") == "working_memory"
             and e.get("target") == lean_model.ATTENTION_TARGET]
    assert notes and all(e["note"].startswith("flash_attn: nothing to slice") for e in notes)
    assert all(e["bytes_saved"] == 0 for e in notes)
