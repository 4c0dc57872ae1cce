"""on_call (per-instance hooks) and share (identical calls → one instance)."""
from __future__ import annotations

import copy
import pickle
import types

import pytest
import torch
from torch import nn

from stageload import HookError, ShareError, on_call, share


class Pipe:
    def __init__(self):
        self.log = []

    def run(self, x):
        self.log.append("run")
        return self.step(x) + self.step(x + 1)

    def step(self, x, scale=1):
        self.log.append(f"step{x}")
        return x * scale


def test_before_after_arguments_and_result():
    pipe, seen = Pipe(), []
    handle = on_call(pipe, "step", before=lambda *a, **k: seen.append(("before", a, k)),
                     after=lambda r, *a, **k: seen.append(("after", r, a, k)))
    assert pipe.step(3, scale=2) == 6
    assert seen == [("before", (3,), {"scale": 2}), ("after", 6, (3,), {"scale": 2})]
    assert handle.calls == 1 and "step" in vars(pipe)


def test_only_this_instance_and_remove_restores_class_lookup():
    pipe, other, seen = Pipe(), Pipe(), []
    handle = on_call(pipe, "step", before=lambda *a, **k: seen.append(a))
    other.step(1)
    assert seen == []
    handle.remove()
    assert "step" not in vars(pipe) and pipe.step.__func__ is Pipe.step
    pipe.step(1)
    assert seen == []
    handle.remove()  # twice is fine


def test_hooked_method_calling_hooked_methods_nests():
    pipe, order = Pipe(), []
    outer = on_call(pipe, "run", before=lambda x: order.append("enter run"),
                    after=lambda r, x: order.append(f"run -> {r}"))
    inner = on_call(pipe, "step", before=lambda x, **k: order.append(f"enter step {x}"))
    assert pipe.run(1) == 3
    assert order == ["enter run", "enter step 1", "enter step 2", "run -> 3"]
    assert pipe.log == ["run", "step1", "step2"]
    outer.remove(), inner.remove()


def test_stacked_hooks_removed_out_of_order():
    pipe, seen = Pipe(), []
    first = on_call(pipe, "step", before=lambda *a, **k: seen.append("first"))
    second = on_call(pipe, "step", before=lambda *a, **k: seen.append("second"))
    pipe.step(0)
    assert seen == ["second", "first"]
    first.remove()  # under another hook: becomes a pass-through
    seen.clear()
    pipe.step(0)
    assert seen == ["second"]
    second.remove()
    assert "step" not in vars(pipe)


def test_exception_skips_after_and_propagates():
    pipe, seen = Pipe(), []
    on_call(pipe, "step", after=lambda *a, **k: seen.append("after"))
    with pytest.raises(TypeError):
        pipe.step(1, bogus=True)
    assert seen == []


def test_hook_on_an_nn_module_instance():
    model, seen = nn.Linear(2, 2), []
    handle = on_call(model, "forward", before=lambda x: seen.append(tuple(x.shape)))
    model(torch.zeros(3, 2))
    assert seen == [(3, 2)]
    handle.remove()
    assert "forward" not in vars(model)


def test_hook_errors():
    with pytest.raises(HookError, match="no attribute 'nope'"):
        on_call(Pipe(), "nope")
    with pytest.raises(HookError, match="not a method"):
        on_call(Pipe(), "log")
    with pytest.raises(HookError, match="class"):
        on_call(Pipe, "run")

    class Slotted:
        __slots__ = ()

        def run(self):
            return 1

    with pytest.raises(HookError, match="__slots__"):
        on_call(Slotted(), "run")


# ---------------------------------------------------------------------------------------- share
class Backbone(nn.Module):
    built = 0

    def __init__(self, name, dim=4, options=None):
        super().__init__()
        Backbone.built += 1
        self.proj = nn.Linear(dim, dim)

    @classmethod
    def from_pretrained(cls, name, dim=4):
        return cls(name, dim)


# -- copies and pickles of a hooked object ------------------------------------
class Encoder:
    """A pipeline object holding weights, with a method a stage boundary is hooked on."""

    def __init__(self):
        torch.manual_seed(0)
        self.net = nn.Linear(4, 4)

    def encode(self, x):
        with torch.no_grad():
            return self.net(x)


def _zero(obj):
    with torch.no_grad():
        obj.net.weight.zero_()
        obj.net.bias.zero_()


@pytest.mark.parametrize("make_copy", [copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))],
                         ids=["deepcopy", "pickle"])
def test_a_copy_of_a_hooked_object_runs_its_own_method_unhooked(make_copy):
    original = Encoder()
    seen = []
    handle = on_call(original, "encode", before=lambda x: seen.append("before"))
    duplicate = make_copy(original)
    _zero(duplicate)
    x = torch.ones(1, 4)
    assert not torch.equal(duplicate.encode(x), original.encode(x))
    assert torch.equal(duplicate.encode(x), torch.zeros(1, 4))  # the copy's own (zeroed) weights
    assert seen == ["before"]  # only the original's call ran the hook: it was not carried over
    assert handle.calls == 1 and handle.active
    handle.remove()
    assert "encode" not in vars(original)


def test_a_copy_keeps_an_instance_attribute_that_was_there_before_stacked_hooks():
    pipe = Pipe()
    pipe.step = lambda x, scale=1: -x  # the object's own per-instance override
    first = on_call(pipe, "step", before=lambda *a, **k: None)
    second = on_call(pipe, "run", after=lambda *a, **k: None)
    on_call(pipe, "step", after=lambda *a, **k: None)  # stacked on the first
    duplicate = copy.deepcopy(pipe)
    assert duplicate.step(3) == -3  # the override, not a hook and not the class method
    assert duplicate.run(1) == -3 and duplicate.log == ["run"]
    assert first.calls == 0 and second.calls == 0


def test_a_hooked_nn_module_deep_copies_with_its_own_weights():
    model = nn.Linear(4, 4)
    handle = on_call(model, "forward", before=lambda x: None)
    duplicate = copy.deepcopy(model)
    with torch.no_grad():
        duplicate.weight.zero_()
        duplicate.bias.zero_()
        assert torch.equal(duplicate(torch.ones(1, 4)), torch.zeros(1, 4))
        model(torch.ones(1, 4))
    assert handle.calls == 1


def test_four_extractors_share_one_backbone():
    factories = types.SimpleNamespace(Backbone=Backbone)  # a module-like owner
    Backbone.built = 0
    with share(factories, "Backbone") as shared:
        extractors = [factories.Backbone("dinov3", dim=4) for _ in range(4)]
        different = factories.Backbone("dinov3", dim=8)
    assert all(e is extractors[0] for e in extractors) and different is not extractors[0]
    assert Backbone.built == 2 and shared.calls == 5 and shared.hits == 3
    assert factories.Backbone is Backbone  # restored
    assert factories.Backbone("dinov3") is not extractors[0]


def test_share_a_classmethod_and_restore_it():
    raw = vars(Backbone)["from_pretrained"]
    with share(Backbone, "from_pretrained"):
        a = Backbone.from_pretrained("x")
        b = Backbone.from_pretrained("x")
    assert a is b and vars(Backbone)["from_pretrained"] is raw
    assert Backbone.from_pretrained("x") is not a


def test_unhashable_arguments_compare_by_identity():
    calls = []

    def make(config):
        calls.append(config)
        return object()

    owner = types.SimpleNamespace(make=make)
    config = {"dim": 4}
    with share(owner, "make"):
        same = owner.make(config) is owner.make(config)
        equal_copy = owner.make(dict(config))
        hashable = owner.make(1) is owner.make(1)
        typed = owner.make(1) is owner.make(1.0)
    assert same and hashable and not typed and len(calls) == 4
    assert equal_copy is not None


def test_share_an_inherited_attribute_then_fall_back_to_it():
    class Child(Backbone):
        pass

    with share(Child, "from_pretrained"):
        assert Child.from_pretrained("x") is Child.from_pretrained("x")
    assert "from_pretrained" not in vars(Child)


def test_share_restores_on_error_and_does_not_cache_failures():
    attempts = []

    def flaky(x):
        attempts.append(x)
        if len(attempts) == 1:
            raise OSError("first try fails")
        return object()

    owner = types.SimpleNamespace(make=flaky)
    with pytest.raises(RuntimeError):
        with share(owner, "make"):
            with pytest.raises(OSError):
                owner.make(1)
            assert owner.make(1) is owner.make(1)
            raise RuntimeError("leave the block")
    assert owner.make is flaky and len(attempts) == 2


def test_share_errors():
    with pytest.raises(ShareError, match="no attribute"):
        with share(types.SimpleNamespace(), "missing"):
            pass
    with pytest.raises(ShareError, match="not a constructor"):
        with share(types.SimpleNamespace(x=3), "x"):
            pass
