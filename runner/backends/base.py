"""What a backend is to the runner (:class:`Backend`): its name, planned stages, options, the
module the worker runs, and the light checks the supervisor makes before anything starts.

A backend's worker module (:attr:`Backend.load` returns it; only the worker imports it, so the
supervisor never imports torch or the backend's libraries) provides:

- ``run_job(image, output, options, *, had_alpha, emit, handover=None) -> dict``: writes the
  GLB to ``output`` (or, with ``handover``, the decoded asset there for the job's export step)
  from the job's ``meshfacts.job_options.JobOptions``; returns facts about the result,
- ``STAGES`` (tuple of stage names; the registry's ``stages`` must match — a test checks it),
- optionally ``check(options) -> dict`` with ``ok`` (bool), ``reason``, ``hint``,
- optionally ``ERRORS``: ``{exception class name: runner error kind}`` for its own exceptions.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

from meshfacts import options as options_table

Option = options_table.Option
"""A backend's own option: an entry of the options table (``meshfacts/options.py``)."""


@dataclass(frozen=True)
class Backend:
    """One backend: ``name``, ``module`` (the dotted name of its worker module, found without
    importing it by :meth:`installed`), ``load`` (imports and returns that module: a plain
    import inside a function, so only the worker pays for it), ``title`` (what it is, for
    people), ``stages`` (planned stage names), ``options`` (its own ``Option`` entries),
    ``install_hint`` (what to do when the module is not there)."""

    name: str
    module: str
    load: Callable[[], ModuleType]
    title: str
    stages: tuple[str, ...]
    options: tuple[Option, ...] = field(default_factory=tuple)
    install_hint: str = ""
    precheck: Callable | None = None
    """A cheap check (no torch, no weights: e.g. that a folder exists and holds the expected
    files) of the job's ``JobOptions``: returns None or raises ``RunnerError``. Also refuses
    option combinations the backend cannot honour. None: nothing to check before the worker."""
    hand_over: Callable | None = None
    """The job's ``JobOptions`` → what the supervisor runs the job's export with, in a process
    of its own, once the model process has handed the decoded asset over (an object with
    ``step``, the ``runner.job.export_step.ExportStep``, ``check(run, trace_path)`` and
    ``finish(run, info, handover)``: the Pixal3D backend's ``handover.HandOver``), or None when
    the backend exports in the model process. Decided once, when the job is made. None: the
    backend always exports in the model process."""
    texture_floor: int | None = None
    """Smallest texture side (px) the backend really makes: a smaller ``--texture-size`` is
    accepted and raised to it (the command line says so on stderr). None: no floor."""
    needs_torch: bool = False
    """True when the backend imports torch: only then does the worker import it (and fail with
    ``no_torch`` when it cannot). The built-in backend needs NumPy, Pillow, SciPy, trimesh and
    psutil only, so it runs in Blender's own Python with the extension's bundled wheels."""

    def planned_stages(self) -> list[str]:
        """The stage names this backend will announce, in order."""
        return list(self.stages)

    def run_precheck(self, options) -> None:
        """Run :attr:`precheck` on the job's ``JobOptions``. Raises ``RunnerError`` (the
        backend's kind, e.g. ``pixal3d_missing``, exit 32, or ``usage``) when the backend cannot
        run with them; returns None otherwise or when there is no precheck."""
        if self.precheck is not None:
            self.precheck(options)

    def hand_over_of(self, options):
        """The job's hand-over (:attr:`hand_over`), or None: exported in the model process."""
        return None if self.hand_over is None else self.hand_over(options)

    def installed(self) -> bool:
        """True when the worker module can be found (without importing it)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def check(self, options=None) -> dict:
        """Can it run here? ``{"ok": bool, "reason": str|None, "hint": str|None, ...}``.
        Imports the module; never raises. ``options``: the ``JobOptions`` to check with."""
        if not self.installed():
            return {"ok": False, "reason": "not installed",
                    "hint": self.install_hint or f"{self.module} is missing from this install."}
        try:
            module = self.load()
        except Exception as exc:  # broken install, missing dependency
            return {"ok": False, "reason": f"cannot be imported: {type(exc).__name__}: {exc}",
                    "hint": "Reinstall the project's dependencies into this interpreter."}
        own = getattr(module, "check", None)
        if own is None:
            return {"ok": True, "reason": None, "hint": None}
        try:
            result = dict(own(options))
        except Exception as exc:
            return {"ok": False, "reason": f"its check failed: {type(exc).__name__}: {exc}",
                    "hint": "See the log on stderr."}
        result.setdefault("reason", None)
        result.setdefault("hint", None)
        result["ok"] = bool(result.get("ok"))
        return result
