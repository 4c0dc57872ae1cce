"""CUDA and MPS branches, with torch's device functions replaced by recorders.

MOCKED: this machine has no GPU and is not a Mac, so the real CUDA/MPS calls cannot run here.
These tests only check that the documented torch functions are called at the right moments
(save before a load, restore after it, empty the caches after a release); they do not show that
memory on a real device is freed.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from stageload import StagedModels, empty_allocator_cache, preserved_rng


@pytest.fixture
def fake_devices(monkeypatch):
    calls = []
    cuda_state = [torch.tensor([1], dtype=torch.uint8), torch.tensor([2], dtype=torch.uint8)]
    mps_state = torch.tensor([3], dtype=torch.uint8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all",
                        lambda: calls.append("cuda get") or cuda_state)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda s: calls.append(("cuda set", s)))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda empty"))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: calls.append("mps get") or mps_state)
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda s: calls.append(("mps set", s)))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("mps empty"))
    return calls, cuda_state, mps_state


def test_every_device_generator_is_saved_and_restored(fake_devices):
    calls, cuda_state, mps_state = fake_devices
    with preserved_rng():
        calls.append("body")
    assert calls == ["cuda get", "mps get", "body",
                     ("cuda set", cuda_state), ("mps set", mps_state)]


def test_release_through_enter_empties_both_caches_once(fake_devices):
    calls, *_ = fake_devices
    models = StagedModels({"a": lambda: nn.Linear(2, 2)}, {"one": ["a"], "two": []})
    models.enter("one")
    models["a"]
    calls.clear()
    models.enter("two")
    assert calls.count("cuda empty") == 1 and calls.count("mps empty") == 1
    assert empty_allocator_cache()[:2] == ["cuda", "mps"]
