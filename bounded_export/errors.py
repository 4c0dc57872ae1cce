"""The engine's two ways to stop: a bad asset, and a cancel.

``BadAsset`` carries the runner's error kind ``bad_asset`` (``meshfacts/errors.py``, exit 18):
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
    found from the headers. ``title``: the message's first words."""

    kind = "bad_asset"
    title = "Bad asset"

    def __init__(self, key: str | None, problem: str, hint: str = ""):
        where = f"{key!r}: " if key else ""
        super().__init__(f"{self.title}: {where}{problem}")
        self.key = key
        self.problem = problem
        self.hint = hint or ("Export the asset again with the port's save_mesh_checkpoint "
                             "(Pixal3D's --keep-asset or the port's --save-mesh).")
        self.message = str(self)
        self.details = {"key": key} if key else {}  # the error event's fields (runner.worker.run)


class AssetTooLarge(BadAsset):
    """The asset is sound but does not fit the export budget (the file, or the plan's peak of
    a step, from its size and headers alone: nothing was read). The runner's kind stays
    ``bad_asset`` (exit 18: what to change is the budget or the levers, for this input; see
    runner/PROTOCOL.md), titled "Asset too large for the export budget"; ``details`` carry
    ``budget`` (bytes) so a reader can tell it from a broken asset."""

    title = "Asset too large for the export budget"

    def __init__(self, problem: str, hint: str, budget: int):
        super().__init__(None, problem, hint)
        self.budget = budget
        self.details = {"budget": budget}


class BudgetTooSmall(ValueError):
    """``--export-budget`` is below the engine's minimum (``budget.MIN_BUDGET``): a bad lever,
    not a bad asset (the runner reports it as ``usage``, exit 2, before anything runs).
    ``hint`` names the smallest budget that is accepted."""

    def __init__(self, budget: int, minimum: int):
        from meshfacts.units import format_size

        super().__init__(f"an export budget of {format_size(budget)} is below the engine's "
                         f"minimum of {format_size(minimum)}")
        self.hint = f"Give --export-budget {minimum >> 20}M or more."


class PiecesUnavailable(RuntimeError):
    """The budget needs the decimation in pieces (``pieces.py``) and this interpreter cannot
    import pyfqmr, which it uses: refused before anything is read (never a silent change of
    method). ``kind``: the runner's ``missing_dependency`` (exit 34)."""

    kind = "missing_dependency"

    def __init__(self, budget: int):
        from meshfacts.units import format_size

        super().__init__(f"An export budget of {format_size(budget)} needs the decimation in "
                         "pieces, which needs pyfqmr; this Python cannot import it.")
        self.hint = ("Install pyfqmr into the export's Python (pip install pyfqmr; the "
                     "extension bundles it), or raise --export-budget (the one-call "
                     "decimation needs no pyfqmr).")
        self.message = str(self)


_MEMORY_HINT = ("Close other programs, lower --decimation-target or --texture-size, or give a "
                "smaller --export-budget (at most the memory that is free: the export plans "
                "its steps to fit it, decimating in pieces where one call does not, or says "
                "before it starts which budget the asset needs); then run again.")


class StepOutOfMemory(MemoryError):
    """A step's child process (``stoppable.call``) ran out of memory: a ``MemoryError`` there
    (numpy's ``_ArrayMemoryError``, a C++ ``std::bad_alloc`` that Cython turns into
    ``MemoryError``). ``kind``: the runner's ``out_of_memory`` (exit 47); ``limit``: the
    address-space or data limit's text (``meshfacts.proclimits.memory_limit``), None without one."""

    kind = "out_of_memory"

    def __init__(self, step: str, said: str, limit: str | None):
        under = f" under {limit}" if limit else ""
        super().__init__(f"The export's {step} step ran out of memory{under} ({said}).")
        self.message = str(self)
        # under an address-space limit the budget (resident bytes) says little: the process
        # maps more than it holds, so the limit itself is what to change
        self.hint = ("Raise or remove that limit (`ulimit -v unlimited` in the shell that "
                     "starts the runner), or lower --decimation-target or --texture-size; then "
                     "run again." if limit else _MEMORY_HINT)
        self.details = {"step": step}


class StepKilled(RuntimeError):
    """A step's child process ended by a signal the engine did not send (it kills a child only
    on a cancel, raising ``ExportCancelled``). ``kind``: ``worker_crashed`` (exit 42) for a
    crash signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS: a fault in the native
    library), else ``worker_killed`` (exit 41: from outside — SIGKILL is what the Linux
    out-of-memory killer and macOS's jetsam send), as runner/PROTOCOL.md says for the worker."""

    def __init__(self, step: str, pid: int, name: str, crashed: bool):
        if crashed:
            self.kind = "worker_crashed"
            said = (f"The export's {step} step crashed in its child process (pid {pid}, "
                    f"{name}: a fault inside the library it runs).")
            self.hint = ("See the log on stderr and the trace; run again, and report it with "
                         "the trace if it happens again.")
        else:
            self.kind = "worker_killed"
            said = (f"The export's {step} step was killed in its child process (pid {pid}) by "
                    f"{name}, which the runner did not send"
                    + (" — possibly the system's out-of-memory killer." if name == "SIGKILL"
                       else "."))
            self.hint = ("If memory ran out: " + _MEMORY_HINT[0].lower() + _MEMORY_HINT[1:]
                         if name == "SIGKILL" else "Run it again when nothing stops it.")
        super().__init__(said)
        self.message = said
        self.details = {"step": step, "signal": name}


class ExportCancelled(Exception):
    """The caller's cancel flag was set; ``step`` is the sub-step that noticed it."""

    kind = "cancelled"

    def __init__(self, step: str):
        super().__init__(f"export cancelled during {step}")
        self.step = step
        self.message = str(self)
