"""stageload: only the current stage's models in memory.

Public API (``from stageload import ...``)::

    StagedModels, release, ReleasedModuleError, on_call, share,
    load_module, load_checkpoint, module_bytes, empty_allocator_cache,
    preserved_rng, save_rng_state, restore_rng_state,
    StageloadError and the other error types, make_event, fan_out

Names are imported on first use (PEP 562 module ``__getattr__``), so ``import stageload`` —
and ``python -m stageload guard``, which must not pay for torch — stays cheap: torch is
imported only when a torch-using name is first touched.
"""
from __future__ import annotations

import importlib
import sys
import types

from ._lazy import lazy_exports

_EXPORTS = {
    "StagedModels": "stageload.staged",
    "release": "stageload.release",
    "module_bytes": "stageload.release",
    "empty_allocator_cache": "stageload.release",
    "is_released": "stageload.release",
    "on_call": "stageload.hooks",
    "CallHook": "stageload.hooks",
    "share": "stageload.share",
    "Shared": "stageload.share",
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


def _function_over_submodule(name: str) -> property:
    # ``release`` and ``share`` are both a submodule and the function in it. Importing the
    # submodule makes the import system set ``stageload.<name>`` to the submodule, which would
    # make ``from stageload import release`` return a module. A property on the package's class
    # keeps the function; the submodule stays importable as ``from stageload.release import …``.
    def get(package):
        return getattr(importlib.import_module(f"stageload.{name}"), name)

    def set_(package, value):
        if not isinstance(value, types.ModuleType):
            raise AttributeError(f"stageload.{name} cannot be replaced")

    return property(get, set_)


class _Package(types.ModuleType):
    release = _function_over_submodule("release")
    share = _function_over_submodule("share")


sys.modules[__name__].__class__ = _Package
