"""load_module() allocates a checkpoint's weights once: the high-water mark grows ≤ 1.2× its bytes.

Each measurement runs in a fresh subprocess that reads its own baseline VmHWM (Linux
/proc/self/status, the kernel's peak resident set) after importing torch, loads a 268 MB
safetensors checkpoint written by the test, touches every weight and reads VmHWM again. The
checkpoint is written by a separate subprocess so the loading process never held it. The
naive path (build normally, then load_state_dict from load_file) is measured as the control:
it must show the second copy, which proves the measurement can see one.
"""
from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux-only")

WRITE = r"""
import json, torch
from torch import nn
from safetensors.torch import save_file
torch.manual_seed(7)
model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)])
save_file(model.state_dict(), "model.safetensors")
print(json.dumps({"checksum": [float(p.detach().sum()) for p in model.parameters()]}))
"""

LOAD = r"""
import json, os
import torch
from torch import nn
from safetensors.torch import load_file
from stageload import load_module

def hwm():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

def build():
    return nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)])

mode = "{mode}"
base = hwm()
if mode == "meta":
    model = load_module(build, "model.safetensors")
elif mode == "fallback":
    model = load_module(build, "model.safetensors", meta=False)
else:
    model = build()
    model.load_state_dict(load_file("model.safetensors"))
with torch.no_grad():
    checksum = [float(p.detach().sum()) for p in model.parameters()]  # float32: no temporary copy
print(json.dumps({"growth": hwm() - base, "bytes": os.path.getsize("model.safetensors"),
                  "checksum": checksum, "meta_left": any(p.is_meta for p in model.parameters())}))
"""



@pytest.fixture(scope="module")
def written(run_json, tmp_path_factory):
    """A 268 MB checkpoint in a fresh folder, and the float32 sum of each of its tensors."""
    folder = tmp_path_factory.mktemp("checkpoint")
    return folder, run_json(WRITE, cwd=folder)["checksum"]


def test_load_module_peak_is_one_copy(run_json, written):
    folder, checksum = written
    result = run_json(LOAD.replace("{mode}", "meta"), cwd=folder)
    assert result["bytes"] >= 200 * 10**6
    assert not result["meta_left"]
    assert result["checksum"] == checksum  # same data, same reduction: exact
    assert result["growth"] <= 1.2 * result["bytes"], (
        f"high-water mark grew {result['growth'] / result['bytes']:.2f}x the checkpoint")


@pytest.mark.slow
def test_fallback_on_a_built_module_and_naive_control(run_json, written):
    folder, checksum = written
    fallback = run_json(LOAD.replace("{mode}", "fallback"), cwd=folder)
    naive = run_json(LOAD.replace("{mode}", "naive"), cwd=folder)
    size = fallback["bytes"]
    assert fallback["checksum"] == checksum  # same data, same reduction: exact
    # built normally (one copy) + at most one reopened mapping (64 MiB or the largest tensor)
    assert fallback["growth"] <= 1.35 * size, fallback["growth"] / size
    # control: the usual way holds a second full copy at its peak
    assert naive["growth"] >= 1.6 * size, naive["growth"] / size
