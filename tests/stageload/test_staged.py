"""StagedModels: lazy mapping, stages, events, pin, close, re-entry, and bad input."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from stageload import (
    LoaderError,
    NotAModuleError,
    PlanError,
    ReleasedModuleError,
    StagedModels,
    StageloadError,
    UnknownModelError,
    UnknownStageError,
)
from stageload.releasing import is_released, module_bytes

FIELDS = {
    "stage": {"stage", "index", "count"},
    "ready": {"stage", "seconds", "released_bytes"},
    "load": {"model", "stage", "bytes", "seconds", "outside_stage"},
    "reload": {"model", "stage", "bytes", "seconds", "outside_stage"},
    "release": {"model", "stage", "bytes", "seconds"},
}


class Counting:
    """Loaders that count their builds: a load is a call."""

    def __init__(self):
        self.builds = {}

    def __call__(self, name, size):
        def build():
            self.builds[name] = self.builds.get(name, 0) + 1
            return nn.Linear(size, size)
        return build


@pytest.fixture
def setup():
    count = Counting()
    events = []
    models = StagedModels({"a": count("a", 8), "b": count("b", 16), "c": count("c", 4)},
                          {"one": ["a"], "two": ["a", "b"], "three": ["c"]}, events=events.append)
    return models, count, events


def test_in_len_iter_keys_never_load(setup):
    models, count, events = setup
    assert "a" in models and "zzz" not in models and 3 not in models
    assert len(models) == 3
    assert list(models) == ["a", "b", "c"] and list(models.keys()) == ["a", "b", "c"]
    assert models.values() == [] and models.items() == [] and models.loaded() == []
    assert count.builds == {} and events == []


def test_values_and_items_only_loaded(setup):
    models, count, _ = setup
    b = models["b"]
    assert models.values() == [b] and models.items() == [("b", b)]
    assert count.builds == {"b": 1}
    assert models["b"] is b and count.builds == {"b": 1}  # loaded once


def test_enter_releases_what_the_stage_does_not_list(setup):
    models, count, events = setup
    models.enter("two")
    a, b = models["a"], models["b"]
    size_b = module_bytes(b)
    events.clear()
    released = models.enter("one")
    assert released == size_b and is_released(b) and not is_released(a)
    assert models.loaded() == ["a"]
    assert [e["event"] for e in events] == ["stage", "release", "ready"]
    stage, release, ready = events
    assert stage["stage"] == "one" and stage["index"] == 0 and stage["count"] == 3
    assert release["model"] == "b" and release["stage"] == "one" and release["bytes"] == size_b
    assert ready["released_bytes"] == size_b and ready["seconds"] >= 0
    assert stage["t"] <= release["t"] <= ready["t"]
    for event in events:
        assert FIELDS[event["event"]] <= set(event)


def test_event_fields_are_the_contract(setup):
    models, _, events = setup
    import json

    models.enter("one")
    models["a"]
    models.enter("three")
    models["a"]
    models.close()
    kinds = {e["event"] for e in events}
    assert kinds == {"stage", "ready", "load", "reload", "release"}
    for event in events:
        assert FIELDS[event["event"]] <= set(event), event
        assert isinstance(event["t"], float)
        json.dumps(event)  # JSON-serialisable
    load = next(e for e in events if e["event"] == "load")
    assert load["bytes"] == (8 * 8 + 8) * 4 and isinstance(load["seconds"], float)


def test_outside_stage_access_loads_and_is_recorded(setup):
    models, _, events = setup
    models.enter("one")
    models["c"]
    assert models.outside_stage == [("c", "one")]
    load = [e for e in events if e["event"] == "load"][-1]
    assert load["model"] == "c" and load["outside_stage"] is True and load["stage"] == "one"
    models["a"]
    assert [e for e in events if e["event"] == "load"][-1]["outside_stage"] is False


def test_before_the_first_stage_nothing_is_outside(setup):
    models, _, events = setup
    models["c"]
    assert models.outside_stage == [] and events[-1]["stage"] is None


def test_reload_after_release(setup):
    models, count, events = setup
    models.enter("one")
    first = models["a"]
    models.enter("three")
    second = models["a"]  # outside stage "three": reloaded
    assert second is not first and count.builds["a"] == 2
    reload = [e for e in events if e["event"] == "reload"]
    assert len(reload) == 1 and reload[0]["model"] == "a" and reload[0]["outside_stage"] is True


def test_pin_keeps_a_model_across_stages(setup):
    models, _, _ = setup
    models.pin("a")
    models.enter("one")
    a = models["a"]
    models.enter("three")
    assert not is_released(a) and models.pinned == frozenset({"a"})
    models.unpin("a")
    models.enter("three")
    assert is_released(a)
    with pytest.raises(UnknownModelError):
        models.pin("nope")


def test_pinned_at_construction(setup):
    models = StagedModels({"x": lambda: nn.Linear(2, 2)}, {"s": []}, pinned=["x"])
    x = models["x"]
    size = module_bytes(x)
    assert models.enter("s") == 0 and not is_released(x)
    assert models.close() == size
    assert is_released(x) and models.stage is None


def test_close_releases_all_and_plan_is_reusable(setup):
    models, count, events = setup
    models.enter("two")
    a, b = models["a"], models["b"]
    total = module_bytes(a) + module_bytes(b)
    assert models.close() == total
    assert is_released(a) and is_released(b) and models.loaded() == [] and models.stage is None
    models.enter("one")  # re-armed: the next input starts at the first stage
    assert models["a"] is not a and count.builds["a"] == 2
    assert [e["index"] for e in events if e["event"] == "stage"] == [1, 0]


def test_context_manager_closes():
    with StagedModels({"x": lambda: nn.Linear(2, 2)}, {"s": ["x"]}) as models:
        x = models["x"]
    assert is_released(x)


def test_setitem_and_delitem(setup):
    models, _, events = setup
    user = nn.Linear(3, 3)
    models["mine"] = user
    assert "mine" in models and models["mine"] is user and "mine" in models.loaded()
    models.enter("one")  # not listed: released
    assert is_released(user)
    with pytest.raises(ReleasedModuleError, match="mine"):
        models["mine"]  # no loader to load it again
    models["mine"] = nn.Linear(3, 3)  # assigned again
    del models["mine"]
    assert "mine" not in models
    with pytest.raises(UnknownModelError):
        models["mine"]
    with pytest.raises(NotAModuleError):
        models["x"] = "not a module"
    with pytest.raises(UnknownModelError):
        del models["never"]
    a = models["a"]
    del models["a"]
    assert is_released(a) and "a" not in models and len(models) == 2


def test_declared_name_without_loader_is_assigned_later():
    models = StagedModels({"made_by_pipeline": None, "x": lambda: nn.Linear(2, 2)},
                          {"s": ["made_by_pipeline"]})
    assert "made_by_pipeline" not in models and len(models) == 1
    with pytest.raises(UnknownModelError, match="assign it"):
        models["made_by_pipeline"]
    module = nn.Linear(2, 2)
    models["made_by_pipeline"] = module
    models.enter("s")
    assert models["made_by_pipeline"] is module


def test_clear_forgets_without_loading(setup):
    models, count, _ = setup
    a = models["a"]
    models.clear()
    assert len(models) == 0 and is_released(a) and count.builds == {"a": 1}


def test_preload_loads_the_stage_after_ready(setup):
    models, _, events = setup
    models.enter("two", preload=True)
    assert models.loaded() == ["a", "b"]
    assert [e["event"] for e in events] == ["stage", "ready", "load", "load"]


def test_progress_event(setup):
    models, _, events = setup
    models.enter("one")
    models.progress(1.5)
    assert events[-1] == {**events[-1], "event": "progress", "stage": "one", "fraction": 1.0}


# ------------------------------------------------------------------ bad input, state unchanged
def test_stage_naming_an_unknown_model():
    with pytest.raises(UnknownModelError, match="'ghost'") as info:
        StagedModels({"a": lambda: nn.Linear(1, 1)}, {"s": ["a", "ghost"]})
    assert isinstance(info.value, StageloadError) and isinstance(info.value, KeyError)
    assert "known models: 'a'" in str(info.value)
    with pytest.raises(UnknownModelError, match="pinned"):
        StagedModels({"a": lambda: nn.Linear(1, 1)}, {"s": ["a"]}, pinned=["b"])


def test_malformed_plans():
    with pytest.raises(PlanError, match="built module"):
        StagedModels({"a": nn.Linear(1, 1)}, {})
    with pytest.raises(PlanError, match="not a zero-argument"):
        StagedModels({"a": 42}, {})
    with pytest.raises(PlanError, match="twice"):
        StagedModels({"a": None}, [("s", ["a"]), ("s", [])])


def test_loader_that_raises_leaves_state_unchanged(setup):
    models, _, events = setup
    models.enter("two")
    a = models["a"]

    def broken():
        raise FileNotFoundError("weights.safetensors")

    models._loaders["b"] = broken  # a loader that fails (e.g. a missing checkpoint)
    before = (models.loaded(), list(models.outside_stage), len(events))
    with pytest.raises(LoaderError, match="'b'.*FileNotFoundError.*weights.safetensors") as info:
        models["b"]
    assert isinstance(info.value.__cause__, FileNotFoundError) and info.value.model == "b"
    assert (models.loaded(), list(models.outside_stage), len(events)) == before
    assert models["a"] is a and not is_released(a)


def test_loader_returning_a_non_module():
    models = StagedModels({"a": lambda: {"weight": torch.zeros(2)}}, {"s": ["a"]})
    models.enter("s")
    with pytest.raises(NotAModuleError, match="'a'.*dict"):
        models["a"]
    assert models.loaded() == [] and "a" in models


def test_loader_returning_a_released_module():
    from stageload import release

    dead = nn.Linear(2, 2)
    release(dead)
    models = StagedModels({"a": lambda: dead}, {"s": ["a"]})
    with pytest.raises(LoaderError, match="released"):
        models["a"]
    assert models.loaded() == []


def test_entering_an_unknown_stage(setup):
    models, _, events = setup
    models.enter("one")
    a = models["a"]
    before = len(events)
    with pytest.raises(UnknownStageError, match="'four'.*'one', 'two', 'three'"):
        models.enter("four")
    assert models.stage == "one" and models.loaded() == ["a"] and len(events) == before
    assert not is_released(a)


def test_unknown_name_is_a_key_error(setup):
    models, _, _ = setup
    with pytest.raises(KeyError):
        models["nope"]
    assert models.get("nope") is None


def test_model_released_by_the_caller_is_reloaded(setup):
    from stageload import release

    models, count, events = setup
    models.enter("one")
    a = models["a"]
    release(a, name="a")
    again = models["a"]
    assert again is not a and not is_released(again) and count.builds["a"] == 2
    assert events[-1]["event"] == "reload"


def test_release_one_model_now_and_reload_it(setup):
    models, count, events = setup
    models.enter("two")
    b = models["b"]
    size = module_bytes(b)
    assert models.release("b") == size
    assert is_released(b) and models.loaded() == []
    assert events[-1]["event"] == "release" and events[-1]["model"] == "b"
    assert events[-1]["stage"] == "two"
    assert models.release("b") == 0
    assert models["b"] is not b and events[-1]["event"] == "reload"
    with pytest.raises(UnknownModelError):
        models.release("nope")
