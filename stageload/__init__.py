"""stageload: only the current stage's models in memory.

Public API (``from stageload import ...``)::

    StagedModels, release, ReleasedModuleError, on_call, around_call, share,
    chunk_rows, slice_attention, query_chunk_for_budget (working memory),
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

#: submodule -> the public names it defines (imported on first use)
_EXPORTS = {
    "stageload.staged": ("StagedModels",),
    "stageload.releasing": ("release", "module_bytes", "empty_allocator_cache", "is_released"),
    "stageload.hooks": ("on_call", "around_call", "CallHook"),
    "stageload.working_memory": ("chunk_rows", "slice_attention", "query_chunk_for_budget"),
    "stageload.sharing": ("share", "Shared"),
    "stageload.loading": ("load_module", "load_checkpoint"),
    "stageload.rng": ("preserved_rng", "save_rng_state", "restore_rng_state"),
    "stageload.events": ("make_event", "fan_out"),
    "stageload.errors": ("StageloadError", "ReleasedModuleError", "UnknownModelError",
                         "UnknownStageError", "LoaderError", "NotAModuleError", "PlanError",
                         "HookError", "ShareError", "CheckpointError", "WorkingMemoryError"),
}

__all__ = sorted(name for names in _EXPORTS.values() for name in names)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

