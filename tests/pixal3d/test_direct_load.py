"""The adapter's direct loader (``stageload.pixal3d.build.direct``) against the port's own
``pixal3d.models.from_pretrained`` on the stand-in port: the same module bit for bit, no draw
from the CPU generator, weights allocated once (process high-water mark, in a subprocess), and
the fallback to the port's loader for a model whose computed buffer would stay on meta."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from torch import nn

from stageload.pixal3d.build.direct import (
    METHOD_META,
    METHOD_PORT,
    load_port_model,
    meta_tensors,
    parameters_on_meta,
)
from stageload.pixal3d.port.open import open_port

PIPELINE_MODELS = ("sparse_structure_flow_model", "sparse_structure_decoder",
                   "shape_slat_flow_model_512", "shape_slat_flow_model_1024", "shape_slat_decoder",
                   "tex_slat_flow_model_1024", "tex_slat_decoder")


def _never():
    raise AssertionError("the direct path fell back to the port's loader")


@pytest.fixture(scope="module")
def port(standin_dir, standin_weights):
    return open_port(standin_dir)


def _ckpt(standin_weights, name):
    return f"{standin_weights.model_path}/ckpts/{name}"


@pytest.mark.parametrize("name", PIPELINE_MODELS)
def test_direct_load_gives_the_ports_module_bit_for_bit(port, standin_weights, name):
    path = _ckpt(standin_weights, name)
    direct, note = load_port_model(port.models, path, "cpu", _never)
    reference = port.models.from_pretrained(path)
    assert note.method == METHOD_META and note.fallback is None
    assert note.checkpoint.endswith(f"{name}.safetensors")
    assert type(direct) is type(reference)
    assert meta_tensors(direct) == []
    a, b = direct.state_dict(), reference.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert a[key].view(torch.uint8).equal(b[key].view(torch.uint8)), key  # bit for bit
    assert direct.training == reference.training
    # plain tensors computed in __init__; the same module tree, so the same number of modules
    for sub_a, sub_b in zip(direct.modules(), reference.modules(), strict=True):
        for attr, value in vars(sub_b).items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(getattr(sub_a, attr), value), attr


def test_standin_has_the_real_models_computed_tensors(port, standin_weights):
    """The stand-in keeps what makes meta building tricky in the real port: each sparse
    self-attention's RoPE frequency table as a plain tensor attribute (in no checkpoint) and
    the dense structure flow's computed persistent buffer (``rope_phases``, complex64)."""
    flow, _ = load_port_model(port.models, _ckpt(standin_weights, "shape_slat_flow_model_1024"),
                              "cpu", _never)
    rope = flow.blocks[0].self_attn.rope
    assert isinstance(rope.freqs, torch.Tensor) and not rope.freqs.is_meta
    assert not any(name.endswith("freqs") for name in flow.state_dict())
    ss, _ = load_port_model(port.models, _ckpt(standin_weights, "sparse_structure_flow_model"),
                            "cpu", _never)
    phases = ss.state_dict()["rope_phases"]
    assert phases.dtype == torch.complex64 and torch.allclose(phases.abs(), torch.ones(()))


def test_direct_load_draws_only_the_constructors_own_draws_but_the_ports_loader_draws_more(
        port, standin_weights):
    """Building with parameters on meta runs no weight initialiser, but the real DiT blocks
    draw their shared-modulation offset (``torch.randn(6C)``) before it is registered as a
    parameter (TRELLIS.2's ``ModulatedSparseTransformerCrossBlock``), so the direct loader moves
    the CPU generator by exactly those draws — why the RNG-off control of test_staged_run
    differs from the first sampler on; the port's own loader (every initialiser) draws more."""
    from stageload.pixal3d.build.direct import checkpoint_files

    path = _ckpt(standin_weights, "tex_slat_flow_model_1024")
    with open(checkpoint_files(path)[0]) as f:
        args = json.load(f)["args"]
    torch.manual_seed(3)
    for _ in range(args["num_blocks"]):
        torch.randn(6 * args["model_channels"])
    expected = torch.get_rng_state()
    torch.manual_seed(3)
    load_port_model(port.models, path, "cpu", _never)
    assert torch.equal(torch.get_rng_state(), expected)
    torch.manual_seed(3)
    port.models.from_pretrained(path)
    assert not torch.equal(torch.get_rng_state(), expected)


class _TableModel(nn.Module):
    """A module with a non-persistent buffer computed from its parameters' device: under
    parameters_on_meta it is computed on meta and is in no checkpoint."""

    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.register_buffer("table", torch.linspace(0, 1, width, device=self.fc.weight.device),
                             persistent=False)


class _Extra(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.extra = nn.Parameter(torch.ones(width))


def _write(tmp_path, cls, name):
    torch.manual_seed(0)
    model = cls()
    state = {k: v for k, v in model.state_dict().items() if not (cls is _Extra and k == "extra")}
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / f"{name}.safetensors"))
    (tmp_path / f"{name}.json").write_text(json.dumps({"name": cls.__name__, "args": {"width": 8}}))
    return str(tmp_path / name), model


@pytest.mark.parametrize("cls,missing", [(_TableModel, "table")])
def test_a_tensor_left_on_meta_falls_back_to_the_ports_loader(tmp_path, cls, missing):
    namespace = types.SimpleNamespace(**{cls.__name__: cls})
    path, original = _write(tmp_path, cls, "m")
    calls = []

    def port_loader():
        calls.append(1)
        from safetensors.torch import load_file
        model = cls()
        model.load_state_dict(load_file(f"{path}.safetensors"), strict=False)
        return model

    module, note = load_port_model(namespace, path, "cpu", port_loader)
    assert calls == [1]
    assert note.method == METHOD_PORT and missing in note.fallback
    assert meta_tensors(module) == []
    assert torch.equal(module.fc.weight, original.fc.weight)


def test_a_constructor_that_fails_with_meta_parameters_falls_back(tmp_path):
    class Picky(nn.Module):
        def __init__(self, width=8):
            super().__init__()
            self.fc = nn.Linear(width, width)
            self.scale = float(self.fc.weight.detach().abs().max())  # needs real values

    path, _ = _write(tmp_path, Picky, "p")
    module, note = load_port_model(types.SimpleNamespace(Picky=Picky), path, "cpu", lambda: Picky())
    assert note.method == METHOD_PORT and "Picky" in note.fallback


def test_parameters_on_meta_restores_registration_on_error():
    original = nn.Module.register_parameter
    with pytest.raises(RuntimeError):
        with parameters_on_meta():
            assert nn.Linear(2, 2).weight.is_meta
            raise RuntimeError("boom")
    assert nn.Module.register_parameter is original
    assert not nn.Linear(2, 2).weight.is_meta


def test_a_missing_checkpoint_is_a_file_error(port, tmp_path):
    with pytest.raises(FileNotFoundError):
        load_port_model(port.models, str(tmp_path / "nothing"), "cpu", _never)


_PROBE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import torch
    import pixal3d.models as M
    from stageload.pixal3d.build.direct import load_port_model, parameters_on_meta
    # warm up: build a tiny one the same way first, so the baseline includes what torch imports
    # or sets up once per process (the first meta tensor imports torch's meta kernels, ~70 MB)
    import flow_configs
    with (parameters_on_meta() if sys.argv[3] == "direct" else torch.device("cpu")):
        M.ElasticSLatFlowModel(**flow_configs.small_args("shape_slat_flow_model_1024"))

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    base = hwm()
    if sys.argv[3] == "direct":
        model, note = load_port_model(M, sys.argv[2], "cpu", lambda: None)
        method = note.method
    else:
        model, method = M.from_pretrained(sys.argv[2]), "port"
    with torch.no_grad():  # use every weight once (on the CPU, mapped pages count when touched)
        total = sum(float(t.sum()) for t in model.state_dict().values())
    after = hwm()
    print(json.dumps({"base": base, "grew": after - base, "method": method,
                      "bytes": sum(t.numel() * t.element_size()
                                   for t in model.state_dict().values())}))
""")


@pytest.mark.slow
def test_direct_load_allocates_the_weights_once(standin_dir, tmp_path):
    """A 200 MB stand-in flow model (the real DiT sized to 200 MB by sized_args): the process
    high-water mark grows by at most 1.2x its checkpoint bytes with the adapter's loader; the
    port's own from_pretrained (random init, then a state dict, then a copy) grows by more (the
    control). Each in a fresh process."""
    if str(standin_dir) not in sys.path:
        sys.path.insert(0, str(standin_dir))
    import flow_configs  # the stand-in port's (put on sys.path just above)
    size = flow_configs.write_flow(tmp_path, "tex_slat_flow_model_1024", 200 * 10 ** 6)
    assert size >= 199 * 10 ** 6
    for suffix in ("json", "safetensors"):
        (tmp_path / f"tex_slat_flow_model_1024.{suffix}").rename(tmp_path / f"big.{suffix}")
    out = {}
    for mode in ("direct", "port"):
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(standin_dir),
                               str(tmp_path / "big"), mode],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out[mode]["bytes"] == size
    print(json.dumps(out))
    assert out["direct"]["method"] == METHOD_META
    assert out["direct"]["grew"] <= 1.2 * size, out
    assert out["port"]["grew"] > 1.5 * size, out  # the second copy the direct path avoids
