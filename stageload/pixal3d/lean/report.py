"""How the lean parts tell the user what they did: a ``working_memory`` event for each part
installed, a ``warning`` for each place where the port's own computation runs instead (and why),
and the handle that undoes an installation."""
from __future__ import annotations

from typing import Callable, Optional

from stageload.events import emit


class Handle:
    """Undoes one installation: :meth:`remove` (idempotent). ``active``: whether the lean path
    was installed (False when a precondition failed and the port's path stays)."""

    def __init__(self, undo: Optional[Callable[[], None]], active: bool):
        self._undo = undo
        self.active = active

    def remove(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()


#: ``source`` of a lean fallback's warning.
SOURCE = ("stageload.pixal3d.lean.conditioning (--working-memory lean; docs/pixal3d.md, "
          "Working memory)")
#: ``differs`` of a lean fallback's warning: the output is the port's own.
DIFFERS = "nothing in the output: the port's own computation runs, with its working memory"


def fallback(sink, message: str, cause: str) -> None:
    """A ``warning`` that the port's computation runs instead of the lean one (``fallback``:
    ``port_conditioning``, ``cause``: the precondition that failed)."""
    emit(sink, "warning", message=message, source=SOURCE, fallback="port_conditioning",
         cause=cause, differs=DIFFERS)


def announce(sink, stage, target, tool, chunk, saved, note) -> None:
    """A ``working_memory`` event: the part ``tool`` installed on ``target`` (``chunk`` rows or
    pixels at a time, ``saved`` bytes the port\'s path would hold beyond it, as estimated)."""
    emit(sink, "working_memory", stage=stage, target=target, tool=tool, chunk=chunk,
         bytes_saved=max(0, int(saved)), note=note)
