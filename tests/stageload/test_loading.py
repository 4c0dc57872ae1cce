"""load_module / load_checkpoint: correct weights, no random-init draws, clear errors."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from stageload import CheckpointError, NotAModuleError, load_checkpoint, load_module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 5)
        self.norm = nn.BatchNorm1d(5)  # buffers: running_mean, running_var, num_batches_tracked

    def forward(self, x):
        return self.norm(self.a(x))


class WithComputedBuffer(Net):
    def __init__(self):
        super().__init__()
        self.register_buffer("freqs", torch.arange(5.0), persistent=False)  # not in checkpoints


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        net.norm.running_mean.uniform_()
    path = tmp_path / "net.safetensors"
    save_file(net.state_dict(), str(path))
    return net, path


def same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k].to(sa[k].dtype)) for k in sa)


def test_load_module_gives_the_checkpoint_and_draws_nothing(saved):
    net, path = saved
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    loaded = load_module(Net, path)
    assert torch.equal(torch.rand(3), expected)  # built on meta: init drew nothing
    assert same_state(net, loaded) and not any(t.is_meta for t in loaded.state_dict().values())
    x = torch.randn(4, 6)
    net.eval(), loaded.eval()
    assert torch.equal(net(x), loaded(x))


def test_dtype_conversion(saved):
    net, path = saved
    loaded = load_module(Net, path, dtype=torch.float16)
    assert loaded.a.weight.dtype == torch.float16
    assert loaded.norm.num_batches_tracked.dtype == torch.int64  # integers untouched
    assert same_state(loaded, net.half())


def test_fallback_on_a_normally_built_module(saved):
    net, path = saved
    assert same_state(net, load_module(Net, path, meta=False))
    built = Net()
    assert load_checkpoint(built, path) is built and same_state(net, built)


def test_non_persistent_buffer_is_reported_with_the_fix(saved):
    _, path = saved
    with pytest.raises(CheckpointError, match=r"freqs.*meta=False"):
        load_module(WithComputedBuffer, path)
    loaded = load_module(WithComputedBuffer, path, meta=False)
    assert torch.equal(loaded.freqs, torch.arange(5.0))


def test_mismatches_and_missing_files(saved, tmp_path):
    _, path = saved
    with pytest.raises(CheckpointError, match="does not exist"):
        load_module(Net, tmp_path / "absent.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_module(Net, junk)
    with pytest.raises(CheckpointError, match="cannot read"):
        load_checkpoint(Net(), junk)
    with pytest.raises(CheckpointError, match="does not fit"):
        load_module(lambda: nn.Linear(6, 5), path)
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(nn.Linear(6, 5), path)
    wrong = tmp_path / "wrong.safetensors"
    save_file({"a.weight": torch.zeros(2, 2)}, str(wrong))
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(Net(), wrong, strict=False)
    with pytest.raises(NotAModuleError):
        load_module(lambda: "model", path)


def test_read_state_fresh_cpu_memory_gives_equal_aligned_tensors(tmp_path):
    """fresh_cpu_memory: every dtype and shape round-trips, each tensor in its own 64-byte
    aligned allocation (not the file's mapping); a truncated file is a CheckpointError."""
    from safetensors.torch import save_file

    from stageload.errors import CheckpointError
    from stageload.loading import read_state
    state = {"w": torch.randn(3, 5), "h": torch.randn(7).to(torch.bfloat16), "i": torch.arange(4),
             "empty": torch.zeros(0, 3), "mask": torch.tensor([True, False])}
    path = tmp_path / "x.safetensors"
    save_file(state, str(path))
    fresh, mapped = read_state(path, fresh_cpu_memory=True), read_state(path)
    for name, tensor in state.items():
        assert fresh[name].dtype == tensor.dtype and torch.equal(fresh[name], tensor), name
        assert fresh[name].numel() == 0 or fresh[name].data_ptr() % 64 == 0, name
    assert any(t.numel() and t.data_ptr() % 64 for t in mapped.values())  # the mapping's offsets
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(CheckpointError):
        read_state(path, fresh_cpu_memory=True)


@pytest.mark.parametrize("fresh", [True, False])
def test_read_state_cast_gives_each_named_tensor_in_its_dtype(tmp_path, fresh):
    """cast: named floating tensors come in the given dtype (equal to converting afterwards),
    from the fresh read and from the mapping alike; other tensors as stored."""
    from safetensors.torch import save_file

    from stageload.loading import read_state
    state = {"w": torch.randn(3, 5), "b": torch.randn(5), "i": torch.arange(4)}
    path = tmp_path / "x.safetensors"
    save_file(state, str(path))
    out = read_state(path, fresh_cpu_memory=fresh,
                     cast={"w": torch.float16, "i": torch.float32})
    assert out["w"].dtype == torch.float16 and torch.equal(out["w"], state["w"].half())
    assert out["b"].dtype == torch.float32 and torch.equal(out["b"], state["b"])
    assert out["i"].dtype == torch.int64
