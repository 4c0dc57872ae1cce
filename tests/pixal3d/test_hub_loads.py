"""The three models the port builds through other libraries — the camera estimator (MoGe-2),
the DINOv3 backbone and the background remover (``transformers``) — load in a staged run with
their weights allocated once: no initialiser runs (the CPU generator is not drawn from), every
parameter is the checkpoint's own tensor (its storage lies in the process's mapping of that
file), the values are what the library's own loader gives; a MoGe checkpoint lacking a name
falls back to MoGe's own loader with a warning; and, in a child process, MoGe's load takes
about 1x its bytes where MoGe's own takes about 2x (VmHWM, Linux)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stageload.pixal3d.build.hub_loads import load_camera_estimator
from tests.pixal3d.runs import new_run

REPO = Path(__file__).resolve().parents[2]


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """Address ranges of this process mapped from ``path`` (``/proc/self/maps``)."""
    target, out = str(path.resolve()), []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() == target:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append((start, end))
    return out


def _from_file(module: torch.nn.Module, path: Path) -> list[str]:
    """Names of ``module``'s parameters whose storage is NOT in a mapping of ``path``."""
    ranges = _mapped_ranges(path)
    return [name for name, p in module.named_parameters()
            if not any(a <= p.data_ptr() < b for a, b in ranges)]


def _snapshot(repo_id: str) -> Path:
    import standin_hf
    return standin_hf.repo_dir(repo_id)


@pytest.fixture()
def staged(standin_dir, standin_weights):
    events: list[dict] = []
    run = new_run(standin_dir, events=events.append, preserve_rng=False,
                  working_memory="port", prefetch=False)
    yield run, events
    run.close()


def test_hub_models_are_assigned_from_their_files_without_a_random_init(staged):
    run, events = staged
    files = {"camera_estimator": _snapshot("Ruicheng/moge-2-vitl") / "model.pt",
             "image_cond_backbone": _snapshot("camenduru/dinov3-vitl16-pretrain-lvd1689m")
             / "model.safetensors",
             "rembg_model": _snapshot("ZhengPeng7/BiRefNet") / "model.safetensors"}
    for name, path in files.items():
        torch.manual_seed(1)
        before = torch.random.get_rng_state()
        model = run.models[name]
        # no initialiser ran: the generator the pipeline draws its noise from is untouched
        assert torch.equal(torch.random.get_rng_state(), before), name
        assert _from_file(model, path) == [], name  # each weight is the file's own tensor
    moge_load = [e for e in events if e["event"] == "load" and e["model"] == "camera_estimator"]
    assert moge_load[0]["method"] == "meta_assign" and "fallback" not in moge_load[0]
    # the values are MoGe's own loader's
    from moge.model.v2 import MoGeModel
    own = MoGeModel.from_pretrained("Ruicheng/moge-2-vitl")
    mine = run.models["camera_estimator"]
    assert own.state_dict().keys() == mine.state_dict().keys()
    for key, value in own.state_dict().items():
        assert torch.equal(value, mine.state_dict()[key]), key


def test_a_moge_checkpoint_missing_a_name_falls_back_to_moges_own_loader(staged, tmp_path):
    """MoGe loads with ``strict=False``: a name the file lacks keeps its random initialisation
    there, which the assigned path cannot give (it would stay on meta). So that load goes to
    MoGe's own ``from_pretrained``, and the note says why."""
    from moge.model.v2 import MoGeModel
    checkpoint = torch.load(_snapshot("Ruicheng/moge-2-vitl") / "model.pt", weights_only=True)
    del checkpoint["model"]["head.bias"]
    path = tmp_path / "model.pt"
    torch.save(checkpoint, path)
    model, note = load_camera_estimator(
        lambda device: MoGeModel.from_pretrained(str(path)).to(device), "cpu")
    assert note.method == "port_from_pretrained" and "head.bias" in note.fallback
    assert not any(t.is_meta for t in model.state_dict().values())
    assert torch.equal(model.fc.weight, checkpoint["model"]["fc.weight"])


CHILD = """
import gc, json, sys, torch
sys.path.insert(0, sys.argv[1])
from moge.model.v2 import MoGeModel
from stageload.pixal3d.build.direct import prepare_meta_runtime
from stageload.pixal3d.build.hub_loads import load_camera_estimator

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))

def grown(load, path):
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the high-water mark to the current footprint
    base = rss("VmRSS")
    model = load(path)
    float(sum(p.sum() for p in model.parameters()))  # every weight read in
    return rss("VmHWM") - base

def assigned(path):
    return load_camera_estimator(lambda d: MoGeModel.from_pretrained(path).to(d), "cpu")[0]

torch.ones(4) @ torch.ones(4)  # the runtime's first-use costs, outside the measured windows
prepare_meta_runtime()  # as the adapter does in setup (a one-time import, not weights)
fixed = grown(assigned, sys.argv[2])  # the same steps for a model of a few bytes
print(json.dumps({"fixed": fixed, "assigned": grown(assigned, sys.argv[3]),
                  "own": grown(MoGeModel.from_pretrained, sys.argv[3])}))
"""


def _moge_file(path: Path, numel: int) -> int:
    """Write a stand-in MoGe-2 ``model.pt`` with a ballast of ``numel`` floats; its bytes."""
    from moge.model.v2 import MoGeModel
    state = MoGeModel(hidden_size=8, ballast_numel=numel).state_dict()
    torch.save({"model_config": {"hidden_size": 8, "ballast_numel": numel}, "model": state},
               path)
    return sum(t.numel() * t.element_size() for t in state.values())


def test_moges_load_peaks_at_its_bytes_where_moges_own_peaks_at_twice(tmp_path, standin_dir):
    """In one child process, the kernel's high-water mark reset before each load
    (``/proc/self/clear_refs`` 5): the assigned load of 64 MiB of weights grows it by at most
    1.05x their bytes over the same steps' fixed cost (measured on a model of a few bytes: the
    checkpoint reader, page tables); MoGe's own by about 2x (the whole checkpoint, then the
    randomly initialised model it is copied into)."""
    sys.path.insert(0, str(standin_dir))
    try:
        tiny = tmp_path / "tiny.pt"
        _moge_file(tiny, 1)
        big = tmp_path / "model.pt"
        weights = _moge_file(big, 16 * 2 ** 20)
    finally:
        sys.path.remove(str(standin_dir))
    done = subprocess.run([sys.executable, "-c", CHILD, str(standin_dir), str(tiny), str(big)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    grown = json.loads(done.stdout.splitlines()[-1])
    assert grown["fixed"] < 16 * 2 ** 20, grown  # a fixed cost, not a copy of anything big
    ratio = {k: (grown[k] - grown["fixed"]) / weights for k in ("assigned", "own")}
    assert ratio["assigned"] <= 1.05, (ratio, grown)
    assert ratio["own"] >= 1.8, (ratio, grown)  # the measurement sees a second copy
