"""The direct loader with a checkpoint stored in another dtype than the module holds: each tensor
is converted as it is read, to the same values the port's own loader gives (its
``load_state_dict`` copies into the built module's dtype)."""
from __future__ import annotations

import json
import sys

import torch
from safetensors.torch import save_file

from stageload.pixal3d.build.direct import METHOD_META, load_port_model


def _never():
    raise AssertionError("the direct path fell back to the port's loader")


def test_an_fp32_checkpoint_for_an_fp16_torso_loads_as_the_ports_loader_gives(
        standin_dir, tmp_path):
    if str(standin_dir) not in sys.path:
        sys.path.insert(0, str(standin_dir))
    import pixal3d.models as M  # the stand-in port's (put on sys.path just above)
    args = dict(out_channels=1, latent_channels=8, num_res_blocks=1, channels=[16, 8],
                num_res_blocks_middle=1, use_fp16=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        built = M.SparseStructureDecoder(**args)
    state = {k: v.float().contiguous() for k, v in built.state_dict().items()}
    assert any(v.dtype == torch.float16 for v in built.state_dict().values())
    save_file(state, str(tmp_path / "dec.safetensors"))
    (tmp_path / "dec.json").write_text(json.dumps({"name": "SparseStructureDecoder",
                                                   "args": args}))
    direct, note = load_port_model(M, str(tmp_path / "dec"), "cpu", _never)
    reference = M.from_pretrained(str(tmp_path / "dec"))
    assert note.method == METHOD_META
    a, b = direct.state_dict(), reference.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert a[key].view(torch.uint8).equal(b[key].view(torch.uint8)), key
        assert torch.equal(a[key], state[key].to(b[key].dtype)), key
    assert direct.blocks[0].conv1.weight.dtype == torch.float16


_PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import pixal3d.models as M
from stageload.meter import footprint, high_water_mark, reset_high_water_mark
from stageload.pixal3d.build.direct import load_port_model, prepare_meta_runtime
prepare_meta_runtime()
reset_high_water_mark(os.getpid())
base = footprint(os.getpid(), tree=False)
model, note = load_port_model(M, sys.argv[2], "cpu", lambda: None)
print(json.dumps({"grew": high_water_mark(os.getpid()) - base, "method": note.method,
                  "bytes": sum(t.numel() * t.element_size()
                               for t in model.state_dict().values())}))
"""


def test_an_fp32_checkpoint_for_an_fp16_torso_is_read_without_a_second_copy(
        standin_dir, tmp_path):
    """A structure decoder of 36 MB in fp16 from a 72 MB fp32 file: the loading process grows
    by the module's bytes and one tensor, not the file's bytes plus the converted ones
    (which would be 3x the module's). In a fresh process, from the kernel's VmHWM."""
    import os

    import pytest
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux's resettable VmHWM")
    if str(standin_dir) not in sys.path:
        sys.path.insert(0, str(standin_dir))
    import subprocess

    import pixal3d.models as M
    args = dict(out_channels=1, latent_channels=8, num_res_blocks=2, channels=[256, 64],
                num_res_blocks_middle=2, use_fp16=True)
    with torch.random.fork_rng(devices=[]):
        built = M.SparseStructureDecoder(**args)
    save_file({k: v.float().contiguous() for k, v in built.state_dict().items()},
              str(tmp_path / "dec.safetensors"))
    (tmp_path / "dec.json").write_text(json.dumps({"name": "SparseStructureDecoder",
                                                   "args": args}))
    del built
    # glibc's dynamic mmap threshold would keep freed fp32 tensors in the heap (a high-water
    # mark that varies run to run); a fixed threshold returns each to the kernel when freed
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(standin_dir), str(tmp_path / "dec")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["method"] == METHOD_META
    assert out["bytes"] >= 30 * 10 ** 6
    assert out["grew"] <= 1.35 * out["bytes"], out
