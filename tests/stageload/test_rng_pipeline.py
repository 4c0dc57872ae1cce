"""Staged loading leaves a seeded pipeline's results bit-identical (SPEC 2.1 acceptance).

The dummy pipeline does what Pixal3D does: models are built with random initialisation on
construction (on torch's CPU generator, and here also Python's ``random`` and NumPy's global
generator), then get their weights from a safetensors checkpoint; ``run()`` seeds once and
draws each stage's noise from the CPU generator. Eager: every model built before the run.
Staged: StagedModels builds each model inside the run, at its stage's first access, with the
stages marked by ``on_call`` hooks on the pipeline object (its own ``run()`` unchanged).
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from stageload import StagedModels, on_call
from stageload.loading import load_checkpoint

DIM = 32


class Block(nn.Module):
    """A small model whose constructor, like Pixal3D's, draws from the random generators."""

    def __init__(self, dim: int = DIM):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.jitter = random.random() + float(np.random.rand())  # init-time draws elsewhere too

    def forward(self, x):
        return self.net(x)


NAMES = ["structure_flow", "structure_decoder", "shape_flow", "texture_flow", "decoder"]


class Pipeline:
    """Seeds once, then each stage draws noise from the CPU generator and runs its models."""

    def __init__(self, models):
        self.models = models

    def sample_structure(self):
        noise = torch.randn(4, DIM)
        return self.models["structure_decoder"](self.models["structure_flow"](noise))

    def sample_shape(self, cond):
        noise = torch.randn(4, DIM) + float(np.random.rand())
        return self.models["shape_flow"](noise + cond)

    def sample_texture(self, cond):
        noise = torch.randn(4, DIM) * random.random()
        return self.models["texture_flow"](noise + cond)

    def decode(self, shape, texture):
        return self.models["decoder"](shape + texture)

    def run(self, seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        with torch.no_grad():
            structure = self.sample_structure()
            shape = self.sample_shape(structure)
            texture = self.sample_texture(shape)
            return self.decode(shape, texture)


PLAN = {
    "structure": ["structure_flow", "structure_decoder"],
    "shape": ["shape_flow"],
    "texture": ["texture_flow"],
    "decode": ["decoder"],
}
BOUNDARIES = {"sample_structure": "structure", "sample_shape": "shape", "sample_texture": "texture",
              "decode": "decode"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    folder = tmp_path_factory.mktemp("weights")
    torch.manual_seed(1234)
    for name in NAMES:
        save_file(Block().state_dict(), str(folder / f"{name}.safetensors"))
    return folder


def loader(folder, name):
    def build():
        return load_checkpoint(Block(), folder / f"{name}.safetensors")  # random init, then weights
    return build


def eager_run(folder, seed):
    models = {name: loader(folder, name)() for name in NAMES}
    return Pipeline(models).run(seed)


def staged_run(folder, seeds, preserve_rng=True, events=None):
    models = StagedModels({name: loader(folder, name) for name in NAMES}, PLAN, events=events,
                          preserve_rng=preserve_rng)
    pipe = Pipeline(models)
    hooks = [on_call(pipe, method, before=lambda *a, _s=stage, **k: models.enter(_s))
             for method, stage in BOUNDARIES.items()]
    results = [pipe.run(seed) for seed in seeds]  # one plan, re-entered for each input
    for hook in hooks:
        hook.remove()
    models.close()
    return results


def test_staged_equals_eager_bit_for_bit(checkpoints):
    eager = [eager_run(checkpoints, seed) for seed in (0, 5)]
    events = []
    staged = staged_run(checkpoints, (0, 5), events=events.append)
    for a, b in zip(eager, staged, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(eager[0], eager[1])  # the two inputs really differ
    loads = [e for e in events if e["event"] in ("load", "reload")]
    assert [e["event"] for e in loads] == ["load"] * 5 + ["reload"] * 5  # second input reloads
    assert all(e["stage"] == PLAN_STAGE[e["model"]] and not e["outside_stage"] for e in loads)


PLAN_STAGE = {name: stage for stage, names in PLAN.items() for name in names}


def test_without_rng_restore_results_differ(checkpoints):
    eager = eager_run(checkpoints, 0)
    (staged,) = staged_run(checkpoints, (0,), preserve_rng=False)
    assert not torch.equal(eager, staged), "the control must show that restore matters"


def test_rng_helpers_restore_all_generators():
    from stageload import preserved_rng, restore_rng_state, save_rng_state

    state = save_rng_state()
    first = (torch.rand(3), random.random(), np.random.rand())
    restore_rng_state(state)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]
    with preserved_rng():
        Block()
    after = (torch.rand(3), random.random(), np.random.rand())
    with preserved_rng(enabled=False):
        pass
    restore_rng_state(state)
    torch.rand(3), random.random(), np.random.rand()
    expected = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]


def test_rng_restored_when_loader_fails():
    from stageload import LoaderError

    def bad():
        Block()  # draws, then fails
        raise OSError("checkpoint unreadable")

    models = StagedModels({"bad": bad}, {"s": ["bad"]})
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    with pytest.raises(LoaderError):
        models["bad"]
    assert torch.equal(torch.rand(2), expected)
