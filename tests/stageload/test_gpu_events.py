"""``stageload.gpu``: a ``gpu`` event after every ``stage`` (sub-steps too) and ``ready`` on an
accelerator, none on the CPU. The allocator's own MPS/CUDA figures cannot be read here (no Mac,
no GPU): the wrapper is exercised with a figures function standing in for
``torch.mps.current_allocated_memory``/``driver_allocated_memory``, which says so."""
from __future__ import annotations

import torch

from stageload.events import make_event
from stageload.gpu import allocator_figures, with_gpu_events


def test_on_the_cpu_nothing_is_added():
    got: list[dict] = []
    sink = got.append  # one bound method object (each attribute access makes a new one)
    assert with_gpu_events(sink, "cpu") is sink
    assert with_gpu_events(None, "mps") is None
    assert allocator_figures("cpu") is None and allocator_figures(torch.device("meta")) is None


def test_each_stage_edge_and_substep_is_followed_by_the_allocators_figures():
    """Stands in for MPS: ``figures`` returns what torch.mps would (bytes)."""
    calls = []

    def figures(device):
        calls.append(device)
        return {"device": "mps", "current": 1000 * len(calls), "driver": 4096 * len(calls)}

    got: list[dict] = []
    send = with_gpu_events(got.append, "mps", figures=figures)
    send(make_event("stage", stage="texture", index=6, count=9))
    send(make_event("ready", stage="texture", seconds=0.1, released_bytes=0))
    send(make_event("stage", stage="sampling", index=1, count=3, parent="texture"))
    send(make_event("load", model="m", stage="texture", bytes=1, seconds=0.1,
                    outside_stage=False))
    kinds = [e["event"] for e in got]
    assert kinds == ["stage", "gpu", "ready", "gpu", "stage", "gpu", "load"]
    gpus = [e for e in got if e["event"] == "gpu"]
    assert [g["current"] for g in gpus] == [1000, 2000, 3000]
    assert [(g["stage"], g["parent"]) for g in gpus] == [("texture", None), ("texture", None),
                                                         ("sampling", "texture")]
    assert all(d == torch.device("mps") for d in calls)
