"""Save and restore every random generator a model build can touch.

Building a model runs its random initialisation (``nn.Linear``'s ``kaiming_uniform_`` …) on
the same generator a pipeline draws its noise from. Pixal3D seeds once with
``torch.manual_seed`` and draws each stage's noise with ``torch.randn`` on the CPU generator, so
a model built in the middle of a run would shift every later draw, and the mesh would change.
Loading inside :func:`preserved_rng` leaves the generators exactly as they were.

Saved: torch's CPU generator, every CUDA device's generator (when CUDA is available), the MPS
generator (when MPS is available), Python's ``random`` and NumPy's global generator
(``numpy.random.get_state``). The CUDA and MPS parts are not exercised on this project's CPU-only
Linux test machine; they use the documented ``torch.cuda.get/set_rng_state_all`` and
``torch.mps.get/set_rng_state``. On a machine where CUDA is available, the first save
initialises CUDA (reading its generators needs it); a pipeline that runs there uses CUDA anyway.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch


@dataclass(frozen=True)
class RNGState:
    """A snapshot of the generators. ``cuda``/``mps``/``numpy`` are None where not present."""

    torch_cpu: torch.Tensor
    cuda: Optional[list[torch.Tensor]]
    mps: Optional[torch.Tensor]
    python: Any
    numpy: Any


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def save_rng_state() -> RNGState:
    """Return a snapshot of every generator listed in the module docstring."""
    try:
        import numpy
    except ImportError:  # numpy is a dependency, but the core does not need it to work
        numpy_state = None
    else:
        numpy_state = numpy.random.get_state()
    return RNGState(
        torch_cpu=torch.get_rng_state(),
        cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        mps=torch.mps.get_rng_state() if _mps_available() else None,
        python=random.getstate(),
        numpy=numpy_state,
    )


def restore_rng_state(state: RNGState) -> None:
    """Put every generator back to ``state`` (taken by :func:`save_rng_state`)."""
    torch.set_rng_state(state.torch_cpu)
    if state.cuda is not None:
        torch.cuda.set_rng_state_all(state.cuda)
    if state.mps is not None:
        torch.mps.set_rng_state(state.mps)
    random.setstate(state.python)
    if state.numpy is not None:
        import numpy

        numpy.random.set_state(state.numpy)


@contextmanager
def preserved_rng(enabled: bool = True) -> Iterator[None]:
    """Run the block, then restore every generator to its state before it (also on error).

    ``enabled=False`` runs the block without saving or restoring (the control case).
    """
    if not enabled:
        yield
        return
    state = save_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)
