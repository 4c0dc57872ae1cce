"""``--working-memory lean|port``: what a Pixal3D run puts on the port's pipeline to hold each
stage's working memory (its temporaries, beyond the weights) down.

- ``port``: nothing; the port's own computations run unchanged.
- ``lean`` (the default): the parts of :data:`PARTS`, each a module of this package with
  ``install(pipeline, sink, **options) -> handle`` (``handle.remove()`` undoes it):
  ``lean`` — the conditioning (NAF's upsampling in bands from the low-resolution keys and
  values, the projection sampled at the active voxels only); ``lean_model`` — the flow models'
  attention query chunks sized from a budget, the decoders' row ops in chunks, the MPS
  allocator's cache and high-watermark, sub-step ``stage`` events. Each part says what it
  changed in ``working_memory`` events and, where a precondition fails, leaves the port's
  path in place with a ``warning`` event.

A part this build does not have is not installed: a ``warning`` event names it (the port's own
computation runs there), so a lean run never differs from what it says it did.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..patching import patched
from .choices import DEFAULT_WORKING_MEMORY, WORKING_MEMORY

log = logging.getLogger(__name__)

#: ``(module of this package, what it makes lean)``, installed in this order, removed in reverse.
PARTS = (("lean", "the conditioning (NAF upsampling and the projection)"),
         ("lean_model", "the flow models' attention and the decoders' rows"))
#: ``source`` of the warning a missing part gets.
SOURCE = "stageload.pixal3d.working (--working-memory; docs/pixal3d.md, Working memory)"


@dataclass
class WorkingMemory:
    """What :func:`install` did: ``mode`` (``lean``/``port``), ``handles`` (one per installed
    part, in order), ``installed`` and ``missing`` (part module names)."""

    mode: str
    handles: list = field(default_factory=list)
    installed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def remove(self) -> None:
        """Remove every installed part (last first); safe to call twice."""
        while self.handles:
            self.handles.pop().remove()


def check_mode(mode: Optional[str]) -> str:
    """``mode`` (None: the default, ``lean``) checked against :data:`WORKING_MEMORY`. Raises
    ``ValueError`` naming the choices."""
    mode = DEFAULT_WORKING_MEMORY if mode is None else mode
    if mode not in WORKING_MEMORY:
        raise ValueError(f"working_memory must be one of {', '.join(WORKING_MEMORY)}, "
                         f"got {mode!r}")
    return mode


def _part(name: str):
    """The module ``stageload.pixal3d.<name>``, or None when this build has none (an import
    error inside an existing module propagates)."""
    full = f"{__package__}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if exc.name == full:
            return None
        raise


def _options(install_part: Callable, offered: dict) -> dict:
    """The entries of ``offered`` that ``install_part`` declares as parameters (a part takes
    the options it knows: ``budget_bytes``, ``stage``)."""
    import inspect
    try:
        params = inspect.signature(install_part).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in offered.items() if k in params}


def install(pipeline: Any, sink: Callable[[dict], None], mode: Optional[str] = None, *,
            budget_bytes: Optional[int] = None, mps_limit_bytes: Optional[int] = None,
            emit: Optional[Callable[..., None]] = None,
            stage: Optional[Callable[[], Optional[str]]] = None, unbuilt: tuple = (),
            parts: tuple = PARTS) -> WorkingMemory:
    """Make ``pipeline`` (the port's ``Pixal3DImageTo3DPipeline``, staged or eager) compute
    with ``mode``'s working memory (:func:`check_mode`; ``port`` installs nothing). Install it
    before hooks that must see the port's calls (a part may replace a method outright).

    ``sink``: the run's event sink, handed to each part. ``budget_bytes``: the memory the
    flow attention's chunks and the MPS high-watermark are sized from (bytes; None: the part's
    own default); ``mps_limit_bytes``: the MPS allocator's hard limit (bytes; None: PyTorch's
    own, no limit of ours); ``stage``: a callable giving the current stage's name (for the parts'
    events); each passed to the parts whose ``install`` takes it. ``unbuilt``: attributes of
    ``pipeline`` that hold a placeholder until a stage builds them (a staged run's extractors):
    while a part installs they read None, so it checks them when their pass runs, not a
    placeholder now. ``emit(kind, **fields)``:
    where a missing part's ``warning`` goes (None: the log only). Returns a
    :class:`WorkingMemory`; a part that raises while installing has the parts before it
    removed again, then the error propagates. Raises ``ValueError`` for an unknown mode.
    """
    done = WorkingMemory(check_mode(mode))
    if done.mode == "port":
        return done
    try:
        for name, what in parts:
            module = _part(name)
            if module is None:
                done.missing.append(name)
                cause = f"this build has no stageload.pixal3d.{name}"
                message = f"--working-memory lean: {cause}, so {what} run the port's own way"
                log.warning("%s", message)
                if emit is not None:
                    emit("warning", message=message, source=SOURCE, fallback="working_memory",
                         cause=cause, differs=f"how {what} are computed: the port's own way, "
                         "with its full working memory (its own result)")
                continue
            options = _options(module.install, {"budget_bytes": budget_bytes, "stage": stage,
                                                "mps_limit_bytes": mps_limit_bytes})
            with contextlib.ExitStack() as hidden:
                for attr in unbuilt:
                    hidden.enter_context(patched(pipeline, attr, None))
                done.handles.append(module.install(pipeline, sink, **options))
            done.installed.append(name)
    except BaseException:
        done.remove()
        raise
    return done
