"""``--working-memory lean|port``: what a Pixal3D run puts on the port's pipeline to hold each
stage's working memory (its temporaries, beyond the weights) down.

- ``port``: nothing; the port's own computations run unchanged.
- ``lean`` (the default): the two parts of :data:`PARTS`, each ``install(pipeline, sink, ...)
  -> handle`` (``handle.remove()`` undoes it): :mod:`.conditioning` — NAF's upsampling from the
  low-resolution keys and values, the projection sampled at the active voxels only;
  :mod:`.models` — the flow models' attention query chunks sized from a budget, the decoders'
  row ops in chunks, the MPS allocator's cache and limit, sub-step ``stage`` events. Each part
  says what it changed in ``working_memory`` events and, where a precondition fails, leaves the
  port's path in place with a ``warning`` event.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from meshfacts.choices import DEFAULT_WORKING_MEMORY, WORKING_MEMORY
from stageload.patching import patched
from stageload.pixal3d.lean import conditioning, models

#: ``(part, what it makes lean)``, installed in this order, removed in reverse.
PARTS = (("conditioning", "the conditioning (NAF upsampling and the projection)"),
         ("models", "the flow models' attention and the decoders' rows"))


@dataclass
class WorkingMemory:
    """What :func:`install` did: ``mode`` (``lean``/``port``), ``handles`` (one per installed
    part, in order), ``installed`` (the parts' names of :data:`PARTS`)."""

    mode: str
    handles: list = field(default_factory=list)
    installed: list[str] = field(default_factory=list)

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


def install(pipeline: Any, sink: Callable[[dict], None], mode: Optional[str] = None, *,
            budget_bytes: Optional[int] = None, mps_limit_bytes: Optional[int] = None,
            stage: Optional[Callable[[], Optional[str]]] = None,
            unbuilt: tuple = ()) -> WorkingMemory:
    """Make ``pipeline`` (the port's ``Pixal3DImageTo3DPipeline``, staged or eager) compute
    with ``mode``'s working memory (:func:`check_mode`; ``port`` installs nothing). Install it
    before hooks that must see the port's calls (a part may replace a method outright).

    ``sink``: the run's event sink, handed to each part. ``budget_bytes``: the memory the
    flow attention's chunks are sized from (bytes; None: :mod:`.models`' default);
    ``mps_limit_bytes``: the MPS allocator's hard limit (bytes; None: PyTorch's own, no limit of
    ours); ``stage``: a callable giving the current stage's name (for the parts' events).
    ``unbuilt``: attributes of ``pipeline`` that hold a placeholder until a stage builds them (a
    staged run's extractors): while a part installs they read None, so it checks them when
    their pass runs, not a placeholder now. Returns a :class:`WorkingMemory`; a part that
    raises while installing has the parts before it removed again, then the error propagates.
    Raises ``ValueError`` for an unknown mode.
    """
    done = WorkingMemory(check_mode(mode))
    if done.mode == "port":
        return done
    steps = {
        "conditioning": lambda: conditioning.install(pipeline, sink, stage=stage),
        "models": lambda: models.install(pipeline, sink, budget_bytes=budget_bytes,
                                         mps_limit_bytes=mps_limit_bytes, stage=stage),
    }
    try:
        for name, _what in PARTS:
            with contextlib.ExitStack() as hidden:
                for attr in unbuilt:
                    hidden.enter_context(patched(pipeline, attr, None))
                done.handles.append(steps[name]())
            done.installed.append(name)
    except BaseException:
        done.remove()
        raise
    return done
