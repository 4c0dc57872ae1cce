"""The MPS allocator's hard limit from the memory budget, and a refused allocation named by
its stage.

Metal's allocator in PyTorch has a *high watermark*: a hard limit on what the process may
allocate through MPS, as a ratio of ``device.recommendedMaxWorkingSetSize``
(``torch.mps.recommended_max_memory()``). Its default, 1.7 (``PYTORCH_MPS_HIGH_WATERMARK_RATIO``,
PyTorch docs "MPS Environment Variables"), lies above the RAM of most Macs, so a stage that
outgrows memory slides into swap instead of failing. ``torch.mps.set_per_process_memory_fraction
(fraction)`` sets that ratio at run time (documented range 0–2; "If trying to allocate more than
the allowed value in a process, it will raise an out of memory error in allocator"): from the
guard's budget, ``fraction = budget_bytes / recommended_max_memory()``. The low watermark
(``PYTORCH_MPS_LOW_WATERMARK_RATIO``, default 1.4 on unified memory) is only a soft limit for
the allocator's own garbage collection; it needs changing only when the *environment variable*
sets the high one (the allocator refuses a low ratio above the high one at start), which this
module does not do.

Not run here: no Mac (and no MPS) on this project's test machine. :func:`mps_fraction` (the
arithmetic) and :func:`name_the_stage` (the error) are tested on their own; :func:`set_limit`
calls only the documented ``torch.mps`` functions named above.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from stageload.hooks import CallHook, around_call
from stageload.pixal3d.errors import StageOutOfMemory

MAX_FRACTION = 2.0
"""The largest fraction ``torch.mps.set_per_process_memory_fraction`` accepts (its docs)."""
DEFAULT_HIGH_WATERMARK = 1.7
"""PyTorch's default high-watermark ratio (docs "MPS Environment Variables"), restored on remove
when ``PYTORCH_MPS_HIGH_WATERMARK_RATIO`` is not set."""
MPS_OOM_WORDING = "mps backend out of memory"
"""How the MPS allocator's refusal begins (lower case), e.g. ``RuntimeError: MPS backend out of
memory (MPS allocated: …, max allowed: …). Tried to allocate …``."""


def mps_fraction(budget_bytes: int, recommended_bytes: int) -> Optional[float]:
    """``budget_bytes / recommended_bytes`` — the high-watermark ratio that makes Metal refuse
    an allocation past the budget — or None when it cannot be expressed (a budget beyond
    ``MAX_FRACTION`` × the recommended size: the limit would be above what the call accepts).
    Raises ``ValueError`` for a budget or recommended size that is not a positive int."""
    for name, value in (("budget_bytes", budget_bytes), ("recommended_bytes", recommended_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive number of bytes, got {value!r}")
    fraction = budget_bytes / recommended_bytes
    return fraction if fraction <= MAX_FRACTION else None


#: The guard's default ``--kill-free``: it stops a run when available memory stays under 10 % of
#: the total (docs/guard.md). The worker is not told the guard's settings, so the MPS limit keeps
#: to the default's floor, as the prefetch's does (docs/ARCHITECTURE.md, "Prefetch").
KILL_FREE_SHARE = 0.10


def budget_from_memory(total: Optional[int], available: Optional[int]) -> Optional[int]:
    """What a run may allocate through MPS before the machine falls to the guard's default kill
    threshold: ``available − KILL_FREE_SHARE × total`` (bytes), read when the run starts — on
    unified memory every MPS buffer comes out of that available memory. None when a figure is
    unknown (``stageload.meter.system_memory`` gives None for what it cannot read: no limit is
    then set, never a guessed one) or nothing would be left above the floor."""
    if total is None or available is None or total <= 0:
        return None
    budget = int(available - KILL_FREE_SHARE * total)
    return budget if budget > 0 else None


def set_limit(budget_bytes: int, *, reason: bool = False):
    """Set the MPS allocator's hard limit to ``budget_bytes`` when MPS is available; returns a
    function that puts back the ratio the environment gave (or PyTorch's default), or None when
    nothing was set (no MPS, or a budget beyond what the call accepts). With ``reason``:
    ``(that function or None, why nothing was set or None)``."""
    import torch

    undo, why = None, None
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        why = "MPS is not available in this process (no Metal device, or a CPU run)"
    else:
        fraction = mps_fraction(int(budget_bytes), int(torch.mps.recommended_max_memory()))
        if fraction is None:
            why = (f"the budget ({int(budget_bytes):,} bytes) is beyond the "
                   f"{MAX_FRACTION} x recommended working set Metal accepts")
        else:
            torch.mps.set_per_process_memory_fraction(fraction)
            before = float(os.environ.get("PYTORCH_MPS_HIGH_WATERMARK_RATIO",
                                          DEFAULT_HIGH_WATERMARK))
            undo = lambda: torch.mps.set_per_process_memory_fraction(before)  # noqa: E731
    return (undo, why) if reason else undo


def is_mps_refusal(exc: BaseException) -> bool:
    """True for the MPS allocator's out-of-memory error (a ``RuntimeError``, or
    ``torch.OutOfMemoryError`` in recent torch, both worded as :data:`MPS_OOM_WORDING`)."""
    return isinstance(exc, RuntimeError) and MPS_OOM_WORDING in str(exc).lower()


def name_the_stage(pipeline: Any, stage: Callable[[], Optional[str]]) -> CallHook:
    """Hook ``pipeline.run`` so that an MPS refusal inside it is re-raised as
    :class:`StageOutOfMemory` naming ``stage()`` (the stage or sub-step running then), with the
    refusal as its cause. Other exceptions pass unchanged. Returns the ``CallHook``."""
    def around(call: Callable, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            if not is_mps_refusal(exc):
                raise
            where = stage()
            raise StageOutOfMemory(
                f"Metal refused an allocation in stage {where!r}: the run reached the memory "
                f"limit set from the budget ({str(exc).splitlines()[0]})", where) from exc

    return around_call(pipeline, "run", around)
