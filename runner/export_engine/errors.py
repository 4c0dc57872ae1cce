"""The engine's two ways to stop: a bad asset, and a cancel.

``BadAsset`` carries the runner's error kind ``bad_asset`` (``runner/errors.py``, exit 18):
``key`` names the ``.npz`` member at fault (None for the file itself) and the message says
what is wrong and what to do. ``BudgetTooSmall`` (a ``ValueError``) is a budget below the
engine's minimum: the runner's ``usage`` (exit 2), like any other bad lever.
``ExportCancelled`` carries ``cancelled`` (exit 130). Both
are raised before anything is written, or after the temporary GLB was removed.
"""
from __future__ import annotations


class BadAsset(ValueError):
    """The asset cannot be exported: ``key`` (the member, or None), ``problem`` (what is wrong),
    ``hint`` (what to do). ``kind`` is the runner's error kind; ``details`` (``{"key": key}``)
    the fields the worker adds to its ``error`` event, as ``runner export`` does for a key
    found from the headers."""

    kind = "bad_asset"

    def __init__(self, key: str | None, problem: str, hint: str = ""):
        where = f"{key!r}: " if key else ""
        super().__init__(f"Bad asset: {where}{problem}")
        self.key = key
        self.problem = problem
        self.hint = hint or ("Export the asset again with the port's save_mesh_checkpoint "
                             "(Pixal3D's --keep-asset or the port's --save-mesh).")
        self.message = str(self)
        self.details = {"key": key} if key else {}  # the error event's fields (runner.worker)


class BudgetTooSmall(ValueError):
    """``--export-budget`` is below the engine's minimum (``budget.MIN_BUDGET``): a bad lever,
    not a bad asset (the runner reports it as ``usage``, exit 2, before anything runs).
    ``hint`` names the smallest budget that is accepted."""

    def __init__(self, budget: int, minimum: int):
        from stageload.units import format_size

        super().__init__(f"an export budget of {format_size(budget)} is below the engine's "
                         f"minimum of {format_size(minimum)}")
        self.hint = f"Give --export-budget {minimum >> 20}M or more."


class PiecesUnavailable(RuntimeError):
    """The budget needs the decimation in pieces (``pieces.py``) and this interpreter cannot
    import pyfqmr, which it uses: refused before anything is read (never a silent change of
    method). ``kind``: the runner's ``missing_dependency`` (exit 34)."""

    kind = "missing_dependency"

    def __init__(self, budget: int):
        from stageload.units import format_size

        super().__init__(f"An export budget of {format_size(budget)} needs the decimation in "
                         "pieces, which needs pyfqmr; this Python cannot import it.")
        self.hint = ("Install pyfqmr into the export's Python (pip install pyfqmr; the "
                     "extension bundles it), or raise --export-budget (the one-call "
                     "decimation needs no pyfqmr).")
        self.message = str(self)


class ExportCancelled(Exception):
    """The caller's cancel flag was set; ``step`` is the sub-step that noticed it."""

    kind = "cancelled"

    def __init__(self, step: str):
        super().__init__(f"export cancelled during {step}")
        self.step = step
        self.message = str(self)
