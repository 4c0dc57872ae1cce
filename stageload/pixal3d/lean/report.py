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
#: ``differs`` where lean computes NAF's whole output in bands instead of at the sampled pixels.
DIFFERS_WHOLE = ("nothing in the output: NAF's whole output is computed in bands (the same "
                 "arithmetic); the pass holds that map, not the port's attention temporaries")


def fallback(sink, message: str, cause: str, *, kind: str = "port_conditioning",
             differs: str = DIFFERS) -> None:
    """A ``warning`` that lean falls back (``fallback``: ``kind`` — ``port_conditioning``, the
    port's own computation; ``banded_upsampler``, NAF's whole output in bands —, ``cause``: the
    precondition that failed, ``differs``: what that changes)."""
    emit(sink, "warning", message=message, source=SOURCE, fallback=kind, cause=cause,
         differs=differs)


def whole_map(sink, why: str, nbytes: int) -> None:
    """The ``warning`` of a lean pass that computes NAF's whole output (``nbytes``) in bands
    because the port uses it as a tensor (``why``)."""
    fallback(sink, f"NAF's whole output ({nbytes / 2 ** 30:.2f} GiB) is computed in bands, not "
                   f"only at the sampled pixels: {why}", why, kind="banded_upsampler",
             differs=DIFFERS_WHOLE)


def announce(sink, stage, target, tool, chunk, saved, note) -> None:
    """A ``working_memory`` event: the part ``tool`` installed on ``target`` (``chunk`` rows or
    pixels at a time, ``saved`` bytes the port\'s path would hold beyond it, as estimated)."""
    emit(sink, "working_memory", stage=stage, target=target, tool=tool, chunk=chunk,
         bytes_saved=max(0, int(saved)), note=note)
