"""release(): weights to meta, a clear error on use, tied weights, bytes, cache emptying."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from stageload import ReleasedModuleError, StageloadError, empty_allocator_cache, module_bytes, release
from stageload.release import is_released, released_by


class Decoder(nn.Module):
    """Has a method besides forward that uses submodules, like Pixal3D's decoder.upsample()."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        return self.head(self.body(x)) * self.scale

    def upsample(self, x):
        return self.body(x).repeat(1, 2)


def test_everything_moves_to_meta_and_bytes_are_counted():
    model = Decoder()
    size = module_bytes(model)
    assert size == (8 * 8 + 8) * 4 * 2 + 8 * 4
    events = []
    assert release(model, name="decoder", stage="texture", events=events.append) == size
    assert all(t.is_meta for t in model.parameters()) and all(t.is_meta for t in model.buffers())
    assert module_bytes(model) == 0 and is_released(model)
    assert released_by(model) == ("decoder", "texture")
    assert model.body.weight.shape == (8, 8) and model.body.weight.requires_grad
    (event,) = events
    assert event["event"] == "release" and event["model"] == "decoder" and event["stage"] == "texture"
    assert event["bytes"] == size and event["seconds"] >= 0
    assert release(model) == 0  # again: nothing left to free


@pytest.mark.parametrize("call", [
    lambda m: m(torch.zeros(1, 8)),
    lambda m: m.forward(torch.zeros(1, 8)),
    lambda m: m.upsample(torch.zeros(1, 8)),
    lambda m: m.head(torch.zeros(1, 8)),
    lambda m: m.to("cpu"),
    lambda m: m.double(),
], ids=["call", "forward", "other-method", "submodule", "to", "double"])
def test_using_a_released_module_names_model_and_stage(call):
    model = Decoder()
    release(model, name="shape_slat_decoder", stage="texture")
    with pytest.raises(ReleasedModuleError) as info:
        call(model)
    message = str(info.value)
    assert "'shape_slat_decoder'" in message and "'texture'" in message
    assert "meta" not in message.lower().replace("metadata", "")
    assert isinstance(info.value, StageloadError)
    assert info.value.model == "shape_slat_decoder" and info.value.stage == "texture"


def test_tied_weights_stay_tied_and_count_once():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    assert module_bytes(model) == 10 * 4 * 4
    assert release(model) == 10 * 4 * 4
    assert model[1].weight is model[0].weight and model[0].weight.is_meta


def test_shared_submodule_is_released_with_either_owner():
    backbone = nn.Linear(4, 4)
    a, b = nn.Sequential(backbone), nn.Sequential(backbone)
    release(a, name="a")
    assert b[0].weight.is_meta  # documented: a shared submodule goes with the model
    with pytest.raises(ReleasedModuleError):
        b(torch.zeros(1, 4))


def test_not_a_module():
    with pytest.raises(TypeError, match="nn.Module"):
        release({"weight": torch.zeros(1)})


def test_empty_allocator_cache_reports_what_it_did():
    done = empty_allocator_cache()
    assert isinstance(done, list)
    assert "cuda" not in done or torch.cuda.is_available()
    import sys
    if sys.platform.startswith("linux"):
        assert "malloc_trim" in done
