"""The Pixal3D adapter's exceptions (torch-free). Callers map the classes to their own error
kinds (the runner does, in ``runner/backends/pixal3d/errors.py`` ``ERRORS``); stageload names none.

- :class:`PortError` — the port folder cannot be used (base class; ``message``, ``hint``,
  ``missing``: the names or files at fault).
- :class:`PortMissing` — no folder, not a port, or it cannot be imported.
- :class:`PortVersionError` — the port's code differs from what the adapter relies on
  (``missing`` names every drifted item: a name, a signature, a call order).
- :class:`KnobRefused` — a port option or environment switch this mode cannot honour
  (``missing``: the option/variable names), raised before anything loads.
- :class:`WeightsMissing` — a weight file the plan reads is not where the port looks for it.
- :class:`BadWeights` — a weight file is damaged or does not fit its model (``file``: its
  path; ``missing``: the tensors at fault, when known).
- :class:`StageOutOfMemory` — the accelerator's allocator refused an allocation in a stage
  (named in ``stage``); a ``MemoryError``, so the runner's ``out_of_memory``.
- :class:`EmptyMeshError` — the port's decoder produced an empty mesh (the port stops with exit
  status 2 and its watchdog message; ``hint`` is that message's advice).
"""
from __future__ import annotations

from ..errors import StageloadError


class PortError(StageloadError, RuntimeError):
    """The port folder cannot be used. ``message``: what happened; ``hint``: what to do;
    ``missing``: the names, files or knobs at fault (tuple of str)."""

    def __init__(self, message: str, hint: str, missing: tuple = ()):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.missing = tuple(missing)


class PortMissing(PortError):
    """No port folder, not a Pixal3D-mac checkout, or its modules cannot be imported."""


class PortVersionError(PortError):
    """The port's sources or imported names differ from what the adapter relies on."""


class KnobRefused(PortError):
    """A port option or environment variable that this run cannot honour (named in ``missing``)."""


class EmptyMeshError(StageloadError, RuntimeError):
    """The decoder produced an empty mesh; the port itself stops here (exit status 2).
    ``message``, ``hint`` (the port's own advice)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.message = message
        self.hint = hint


class WeightsMissing(PortError):
    """A weight file the run's plan reads is not where the port looks for it (``missing``:
    every missing file's expected path, the first one first)."""


class BadWeights(PortError):
    """A weight file that cannot be used as it is: damaged (truncated, a bad header, empty, a
    folder or an unreadable file in its place) or not fitting its model. ``file``: its path;
    ``missing``: the tensor names at fault, when known."""

    def __init__(self, message: str, hint: str, missing: tuple = (), file: str = ""):
        super().__init__(message, hint, missing)
        self.file = file

    @property
    def details(self) -> dict:
        """``{"file": str, "tensors": [names]}`` (the runner puts it in the error event)."""
        return {"file": self.file, "tensors": list(self.missing)}


class StageOutOfMemory(StageloadError, MemoryError):
    """The accelerator's allocator refused an allocation during a stage (on a Mac: Metal, at
    the high-watermark ``stageload.pixal3d.lean.models`` sets from the memory budget).
    ``stage``: the stage (or sub-step) it happened in; ``message`` names it. A ``MemoryError``,
    so the runner reports it as ``out_of_memory``."""

    def __init__(self, message: str, stage):
        super().__init__(message)
        self.message = message
        self.stage = stage
