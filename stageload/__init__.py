"""stageload: only the current stage's models in memory.

Public API (``from stageload import ...``)::

    StagedModels, release, ReleasedModuleError, on_call, share,
    load_module, load_checkpoint, module_bytes, empty_allocator_cache,
    preserved_rng, save_rng_state, restore_rng_state,
    StageloadError and the other error types, make_event, fan_out

Names are imported on first use (PEP 562 module ``__getattr__``), so ``import stageload`` —
and ``python -m stageload guard``, which must not pay for torch — stays cheap: torch is
imported only when a torch-using name is first touched. The functions ``release`` and ``share``
live in the submodules ``releasing`` and ``sharing``, so a name never means both a module and
a function.
"""
from __future__ import annotations

from ._lazy import lazy_exports

_EXPORTS = {
    "StagedModels": "stageload.staged",
    "release": "stageload.releasing",
    "module_bytes": "stageload.releasing",
    "empty_allocator_cache": "stageload.releasing",
    "is_released": "stageload.releasing",
    "on_call": "stageload.hooks",
    "CallHook": "stageload.hooks",
    "share": "stageload.sharing",
    "Shared": "stageload.sharing",
    "load_module": "stageload.loading",
    "load_checkpoint": "stageload.loading",
    "preserved_rng": "stageload.rng",
    "save_rng_state": "stageload.rng",
    "restore_rng_state": "stageload.rng",
    "make_event": "stageload.events",
    "fan_out": "stageload.events",
    "StageloadError": "stageload.errors",
    "ReleasedModuleError": "stageload.errors",
    "UnknownModelError": "stageload.errors",
    "UnknownStageError": "stageload.errors",
    "LoaderError": "stageload.errors",
    "NotAModuleError": "stageload.errors",
    "PlanError": "stageload.errors",
    "HookError": "stageload.errors",
    "ShareError": "stageload.errors",
    "CheckpointError": "stageload.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

