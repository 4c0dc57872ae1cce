"""Time and peak memory of one piece of work, as the device lets them be read.

- **MPS**: ``torch.mps.current_allocated_memory()`` (bytes the tensors hold) and
  ``torch.mps.driver_allocated_memory()`` (bytes Metal gave the allocator, its cache included),
  read every 5 ms from a thread while the work runs (PyTorch keeps no MPS peak), each reported
  as its peak less its value at the start. Not run here (no Mac).
- **CUDA**: ``torch.cuda.max_memory_allocated`` after a reset, less the allocation at the start.
- **CPU**: the process's kernel peak (Linux ``VmHWM``, macOS ``ri_interval_max_phys_footprint``;
  ``stageload.meter``), reset at the start, less the footprint then — resident memory of the
  whole process; where the peak cannot be reset, the footprint read every 5 ms instead. The
  allocators' caches are emptied first (``stageload.releasing.empty_allocator_cache``: glibc's
  ``malloc_trim`` on Linux), so memory earlier work freed is not reused unseen. macOS's
  ``malloc`` keeps its own free pages and has no such call there (not run here: no Mac).

``seconds``: wall time with the device synchronised at both ends (MPS and CUDA run
asynchronously).
"""
from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any, Callable

import torch

from stageload.gpu import allocator_figures
from stageload.releasing import empty_allocator_cache

INTERVAL = 0.005  # seconds between two readings of a sampled figure


def what_is_measured(device: torch.device) -> str:
    """The memory figures of :func:`measure` on ``device``, in words."""
    if device.type == "mps":
        return ("MPS: the allocator's current and driver-allocated bytes, peak over the part's "
                "start (read every 5 ms)")
    if device.type == "cuda":
        return "CUDA: the allocator's peak allocated bytes over the part's start"
    return ("CPU: the process's resident memory at its kernel peak over the part's start "
            "(memory the allocator kept from earlier work and reused does not show)")


def _sync(device: torch.device) -> None:
    if device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "cuda":
        torch.cuda.synchronize(device)


class _Sampler:
    """Reads ``read() -> {name: bytes}`` every :data:`INTERVAL` on a thread; keeps the peaks."""

    def __init__(self, read: Callable[[], dict]):
        self.read = read
        self.start = read()
        self.peak = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="selfcheck-meter")

    def _loop(self) -> None:
        while not self._stop.wait(INTERVAL):
            self._take()

    def _take(self) -> None:
        for name, value in self.read().items():
            self.peak[name] = max(self.peak.get(name, value), value)

    def __enter__(self) -> "_Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def over_start(self) -> dict:
        return {name: max(0, self.peak[name] - self.start[name]) for name in self.peak}


def _mps_read(device) -> dict:
    figures = allocator_figures(device)
    return {"mps_current": figures["current"], "mps_driver": figures["driver"]}


def _process_read() -> dict:
    from stageload.meter import footprint
    return {"process": footprint(os.getpid(), tree=False)}


def measure(work: Callable[[], Any], device) -> tuple[Any, dict]:
    """Run ``work()`` and return ``(its result, {"seconds", "memory": {name: bytes}})``: the
    figures of :func:`what_is_measured` (``mps_current`` and ``mps_driver``; ``cuda``;
    ``process``), bytes over the start. The work's own exceptions propagate."""
    device = torch.device(device)
    gc.collect()
    _sync(device)
    # What earlier work freed but the allocator kept (MPS's cache, glibc's free lists) goes
    # back first, so this work's pages are new and show in its peak over the start: otherwise
    # the second of two paths reuses the first's and looks smaller than it is.
    empty_allocator_cache()
    if device.type == "mps":
        return _timed(work, device, _Sampler(lambda: _mps_read(device)))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        result, out = _timed(work, device, None)
        out["memory"] = {"cuda": max(0, torch.cuda.max_memory_allocated(device) - start)}
        return result, out
    from stageload.meter import footprint, high_water_mark, reset_high_water_mark
    pid = os.getpid()
    if not reset_high_water_mark(pid):
        return _timed(work, device, _Sampler(_process_read))
    start = footprint(pid, tree=False)
    result, out = _timed(work, device, None)
    peak = high_water_mark(pid)
    out["memory"] = {"process": max(0, (peak or start) - start)}
    return result, out


def _timed(work, device, sampler) -> tuple[Any, dict]:
    began = time.perf_counter()
    if sampler is None:
        result = work()
        _sync(device)
        return result, {"seconds": time.perf_counter() - began, "memory": {}}
    with sampler:
        result = work()
        _sync(device)
    return result, {"seconds": time.perf_counter() - began, "memory": sampler.over_start()}
