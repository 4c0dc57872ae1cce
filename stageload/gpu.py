"""``gpu`` events: the accelerator allocator's own figures at each stage edge and sub-step.

A footprint sampled from outside (``stageload.meter``) says how much memory a process holds;
on a Mac it includes Metal's buffers but not which of them the allocator still uses. PyTorch
tells that from inside: on MPS ``torch.mps.current_allocated_memory()`` (bytes the tensors
hold) and ``torch.mps.driver_allocated_memory()`` (bytes Metal gave the allocator, its cache
included); on CUDA ``torch.cuda.memory_allocated`` and ``max_memory_allocated`` (PyTorch's
"MPS backend" and "CUDA semantics" docs). :func:`with_gpu_events` puts one ``gpu`` event after
every ``stage`` event (top-level or a sub-step with ``parent``) and every ``ready``, so a trace
shows where each stage's accelerator memory goes; ``python -m stageload summary`` reports the
largest per stage (``gpu_peak``). Fields as docs/ARCHITECTURE.md fixes them: ``device``, and
``current`` + ``driver`` (MPS) or ``allocated`` + ``peak`` (CUDA), bytes. On the CPU nothing is
emitted.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .events import EventSink, make_event

#: The events a ``gpu`` event follows.
AFTER = ("stage", "ready")


def allocator_figures(device) -> Optional[dict]:
    """``{"device", "current", "driver"}`` (MPS) or ``{"device", "allocated", "peak"}`` (CUDA),
    bytes, for ``device`` (a ``torch.device`` or its name); None for the CPU or another kind."""
    device = torch.device(device)
    if device.type == "mps":
        return {"device": "mps", "current": int(torch.mps.current_allocated_memory()),
                "driver": int(torch.mps.driver_allocated_memory())}
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {"device": f"cuda:{index}", "allocated": int(torch.cuda.memory_allocated(index)),
                "peak": int(torch.cuda.max_memory_allocated(index))}
    return None


def with_gpu_events(sink: Optional[EventSink], device,
                    figures: Callable[[torch.device], Optional[dict]] = allocator_figures
                    ) -> Optional[EventSink]:
    """``sink`` that, after passing on a ``stage`` or ``ready`` event, sends a ``gpu`` event
    with ``figures(device)`` (:func:`allocator_figures`) and the event's ``stage`` (and
    ``parent``, for a sub-step). ``sink`` itself when ``device`` is the CPU or ``sink`` is None
    (nothing to read, nowhere to send)."""
    device = torch.device(device)
    if sink is None or device.type not in ("mps", "cuda"):
        return sink

    def send(event: dict) -> None:
        sink(event)
        if event.get("event") in AFTER:
            found = figures(device)
            if found is not None:
                sink(make_event("gpu", stage=event.get("stage"), parent=event.get("parent"),
                                **found))
    return send
