"""The exceptions stageload raises. Every one is a :class:`StageloadError`.

Each also derives from the built-in type a caller would expect (``KeyError`` for an unknown
name, ``TypeError`` for a wrong type, ``RuntimeError`` for a failed load), so existing
``except`` clauses keep working. Messages say what went wrong and what to do.
"""
from __future__ import annotations

from typing import Optional


class StageloadError(Exception):
    """Base class of every error stageload raises on purpose."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class ReleasedModuleError(StageloadError, RuntimeError):
    """A module was used after :func:`stageload.release` moved its weights to ``meta``.

    Attributes: ``model`` (name given to release, or None), ``stage`` (the stage that released
    it, or None).
    """

    def __init__(self, model: Optional[str], stage: Optional[str], detail: str = ""):
        self.model = model
        self.stage = stage
        who = f"model {model!r}" if model else "this module"
        when = f" by stage {stage!r}" if stage else ""
        text = (f"{who} was released{when}: its weights are no longer in memory. "
                f"Get it again from the StagedModels mapping (which reloads it) instead of keeping "
                f"an old reference, or list it in this stage's plan (or pin it).")
        super().__init__(text + (f" {detail}" if detail else ""))


class UnknownModelError(StageloadError, KeyError):
    """A model name that the plan does not know (in ``stages``, ``pinned``, ``pin`` or indexing)."""


class UnknownStageError(StageloadError, KeyError):
    """``enter()`` was given a stage that is not in the plan."""


class LoaderError(StageloadError, RuntimeError):
    """A model's loader raised. ``model`` names it; the original exception is ``__cause__``."""

    def __init__(self, model: str, message: str):
        self.model = model
        super().__init__(message)


class NotAModuleError(StageloadError, TypeError):
    """A loader returned, or a caller assigned, something that is not a ``torch.nn.Module``."""


class HookError(StageloadError, TypeError):
    """``on_call`` cannot hook the named attribute (missing, not callable, or no instance dict)."""


class ShareError(StageloadError, TypeError):
    """``share`` cannot patch the named attribute (missing or not callable)."""


class CheckpointError(StageloadError, ValueError):
    """A checkpoint does not fit the module (missing file, names, shapes, or weights left on
    meta)."""


class PlanError(StageloadError, ValueError):
    """The ``loaders`` / ``stages`` given to ``StagedModels`` are malformed (e.g. not callable)."""


class WorkingMemoryError(StageloadError, ValueError):
    """A working-memory tool (:mod:`stageload.working_memory`) was given a chunk size, budget or
    input it cannot honour (e.g. ``rows=0``, a budget below one query's scores, a module whose
    output does not keep its input's rows)."""
