"""release() frees real memory even while another object still references the module.

Measured with psutil's RSS in a fresh subprocess: a 268 MB model (four 4096×4096 float32
linear layers) is loaded through StagedModels, a reference is stored on another object, and
entering a stage that does not list the model must bring RSS down by ≥ 80 % of the model's
bytes; the same for a model whose weights came from ``load_module`` (file-backed tensors). The
control in the same process shows the measurement can fail: dropping the mapping's
reference alone (no release) while the other object still holds the module frees nothing.
"""
from __future__ import annotations

CODE = r"""
import gc, json
import psutil, torch
from torch import nn
from stageload import StagedModels, ReleasedModuleError, module_bytes

proc = psutil.Process()
def build():
    return nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)])

class Pipeline:            # "another object" that keeps a reference to the model
    pass

holder = Pipeline()
models = StagedModels({"big": build, "small": lambda: nn.Linear(8, 8)},
                      {"heavy": ["big"], "light": ["small"]})
models.enter("heavy")
holder.model = models["big"]
with torch.no_grad():
    holder.model(torch.randn(2, 4096))
size = module_bytes(holder.model)
gc.collect()
before = proc.memory_info().rss
released = models.enter("light")
gc.collect()
after = proc.memory_info().rss
try:
    holder.model(torch.randn(2, 4096))
    error = None
except ReleasedModuleError as exc:
    error = str(exc)

# Control: the same model, but only the dict's reference is dropped (no release).
plain = {"big": build()}
holder.other = plain["big"]
gc.collect()
control_before = proc.memory_info().rss
del plain["big"]
gc.collect()
control_after = proc.memory_info().rss
# The same with weights from load_module (safetensors tensors backed by the file's mapping).
from safetensors.torch import save_file
from stageload import load_module
save_file(build().state_dict(), "big.safetensors")
gc.collect()
mapped = StagedModels({"big": lambda: load_module(build, "big.safetensors"),
                       "small": lambda: nn.Linear(8, 8)},
                      {"heavy": ["big"], "light": ["small"]})
mapped.enter("heavy")
holder.mapped = mapped["big"]
with torch.no_grad():
    holder.mapped(torch.randn(2, 4096))
gc.collect()
mapped_before = proc.memory_info().rss
mapped.enter("light")
gc.collect()
mapped_drop = mapped_before - proc.memory_info().rss

print(json.dumps({"size": size, "released": released, "drop": before - after, "error": error,
                  "mapped_drop": mapped_drop,
                  "control_drop": control_before - control_after}))
"""


def test_release_frees_rss_while_a_reference_is_held(run_json, tmp_path):
    result = run_json(CODE, cwd=tmp_path)
    size = result["size"]
    assert size >= 200 * 10**6, result
    assert result["released"] == size
    assert result["drop"] >= 0.8 * size, f"RSS fell by {result['drop']} B, model is {size} B"
    assert "'big'" in result["error"] and "'light'" in result["error"]
    assert result["mapped_drop"] >= 0.8 * size, \
        f"load_module weights: RSS fell by {result['mapped_drop']} B"
    # the control: without release, the other object's reference keeps the memory
    assert result["control_drop"] < 0.2 * size, result
