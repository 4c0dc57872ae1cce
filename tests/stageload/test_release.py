"""release(): weights to meta, a clear error on use, tied weights, bytes, cache emptying."""
from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

from stageload import (
    ReleasedModuleError,
    StageloadError,
    empty_allocator_cache,
    module_bytes,
    release,
)
from stageload.releasing import is_released, released_by


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
    assert event["event"] == "release" and event["model"] == "decoder"
    assert event["stage"] == "texture"
    assert event["bytes"] == size and event["seconds"] >= 0
    assert "reason" not in event  # a stage-boundary release says no reason
    assert release(model) == 0  # again: nothing left to free
    other, said = Decoder(), []
    release(other, name="decoder", stage="shape_512", events=said.append, reason="done with it")
    assert said[0]["reason"] == "done with it"


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


# -- a kept submodule, moving/casting/saving a released model ----------------
REFUSED_CALLS = {
    "call": lambda m: m(torch.zeros(1, 8)),
    "to-cpu": lambda m: m.to("cpu"),
    "to-dtype": lambda m: m.to(torch.float16),
    "cpu": lambda m: m.cpu(),
    "cuda": lambda m: m.cuda(),
    "half": lambda m: m.half(),
    "float": lambda m: m.float(),
    "double": lambda m: m.double(),
    "bfloat16": lambda m: m.bfloat16(),
    "type": lambda m: m.type(torch.float64),
    "to_empty": lambda m: m.to_empty(device="cpu"),
    "share_memory": lambda m: m.share_memory(),
    "state_dict": lambda m: m.state_dict(),
    "load_state_dict": lambda m: m.load_state_dict({}, strict=False),
    "torch.save": lambda m: torch.save(m, io.BytesIO()),
    "torch.save-in-new-parent": lambda m: torch.save(nn.Sequential(m), io.BytesIO()),
    "pickle": lambda m: pickle.dumps(m),
    "deepcopy": lambda m: copy.deepcopy(m),
}


@pytest.mark.parametrize("which", ["model", "kept-submodule"])
@pytest.mark.parametrize("call", list(REFUSED_CALLS.values()), ids=list(REFUSED_CALLS))
def test_a_released_model_and_a_kept_submodule_refuse_moves_casts_and_saving(call, which):
    model = nn.Sequential(nn.Linear(8, 8), Decoder())
    sub = model[1]  # kept elsewhere, as a pipeline attribute would be
    release(model, name="texture_decoder", stage="export")
    target = model if which == "model" else sub
    with pytest.raises(ReleasedModuleError) as info:
        call(target)
    assert info.value.model == "texture_decoder" and info.value.stage == "export"
    assert "'texture_decoder'" in str(info.value) and "'export'" in str(info.value)
    assert all(t.is_meta for t in model.parameters())  # nothing was revived or replaced


def test_a_model_holding_a_released_module_cannot_be_saved():
    shared = nn.Linear(8, 8)
    owner, other = nn.Sequential(shared), nn.Sequential(nn.Linear(8, 8), shared)
    release(owner, name="backbone", stage="decode")
    with pytest.raises(ReleasedModuleError, match="'backbone'"):
        torch.save(other, io.BytesIO())
    kept = nn.Sequential(nn.Linear(8, 8))
    buffer = io.BytesIO()
    torch.save(kept, buffer)  # an unreleased model still saves and loads
    buffer.seek(0)
    assert isinstance(torch.load(buffer, weights_only=False), nn.Sequential)


def test_the_refused_methods_are_all_real_module_methods():
    # REFUSED names nn.Module's methods; one renamed or dropped by a torch upgrade shows here
    from stageload.releasing import REFUSED
    missing = [m for m in REFUSED if m != "forward" and not hasattr(nn.Module, m)]
    assert missing == []
    moving = {"to", "cpu", "cuda", "half", "float", "double", "bfloat16", "type", "to_empty"}
    assert moving <= set(REFUSED)
