"""Export steps: what turns a job's decoded asset (the hand-over file, or a saved asset) into its
GLB in an export process of its own, after the model process has exited.

A job's export step is decided once, when its worker job is made (the backend's
``Backend.hand_over``; ``python -m runner export`` always takes :data:`BOUNDED`), and travels
by name in ``WorkerJob.export``; the export process runs the step of that name
(:func:`runner.backends.export_step_named`) and nothing downstream looks at the engine's name
again.

:data:`BOUNDED` is the bounded export engine (``bounded_export``): no torch, no port code, so
it runs in the runner's own interpreter (Blender's Python with the bundled wheels) and in an
install without Pixal3D. Its levers (the options table's, ``meshfacts/options.py``):
``export_budget`` (bytes), ``decimation_target`` (faces), ``texture_size`` (px). The port's
own levers have no meaning here: :meth:`BoundedExport.check` refuses them before anything runs.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

from bounded_export import ExportLevers, export_asset
from meshfacts.errors import RunnerError
from meshfacts.events import make


class ExportStep:
    """One way of exporting a decoded asset: ``name`` (the export engine, the options table's
    ``ENGINES``), ``needs_torch`` (the export process imports torch first), ``ERRORS`` (its
    exception class names → runner error kinds, as a backend module's)."""

    name = ""
    needs_torch = False
    ERRORS: dict = {}

    def check(self, options) -> None:
        """Refuse (``RunnerError('usage')``), before anything runs, options this step cannot
        honour. ``options``: the job's ``JobOptions``."""

    def run(self, handover: str, output, options, *, emit: Callable[[dict], None],
            stages: list | None = None) -> dict:
        """Export ``handover`` to ``output`` in the export process with the job's ``options``;
        returns the facts for the result's ``info``. ``stages``: the plan whose ``export``
        stage this process enters itself (None: the supervisor entered it)."""
        raise NotImplementedError


PORT_ONLY = {"remesh": "on", "remesh_resolution": None, "export_profile": "fit"}
"""Options (and the value that is refused; None: any value) that only the port's export has."""


def levers(options, *, check: bool = True) -> ExportLevers:
    """``bounded_export.ExportLevers`` from the job's options: each lever the job gives, the
    engine's own default for one it leaves out (``decimation_target``, ``export_budget``: None).
    Checked (``ExportLevers.check``) unless ``check`` is False: the export process leaves the
    check to ``export_asset``, the engine's entry, since the supervisor checked the same values
    where they entered. Raises ``RunnerError('usage')`` naming a bad value."""
    given = {"texture_size": options.texture_size,
             "decimation_target": options.decimation_target, "budget": options.export_budget}
    chosen = ExportLevers(**{k: v for k, v in given.items() if v is not None})
    if not check:
        return chosen
    try:
        return chosen.check()
    except ValueError as exc:  # BudgetTooSmall says which budget is accepted
        raise RunnerError("usage", f"Export options: {exc}.",
                          getattr(exc, "hint", None)) from None


class BoundedExport(ExportStep):
    """The bounded export engine on the hand-over: the ``export`` stage's sub-steps, no
    torch."""

    name = "bounded"

    def check(self, options) -> None:
        """Refuse the port's levers (``--remesh on``, any ``--remesh-resolution``,
        ``--export-profile fit``), ``--export-process in-process`` and a ``--export-budget``
        below the engine's minimum."""
        for name, refused in PORT_ONLY.items():
            value = getattr(options, name)
            if value is not None and (refused is None or str(value) == refused):
                flag = "--" + name.replace("_", "-")
                raise RunnerError(
                    "usage", f"{flag} {value} is a lever of the port's export; the bounded "
                    "export engine (the default) does not remesh: it exports the decoded "
                    "surface, decimated.", f"Leave {flag} out, or add --export-engine port "
                    "(the port's export, about 70 GB at the 1024 grid on a Mac).")
        levers(options)  # a budget below the minimum is refused now, not at export
        if options.export_process == "in-process":
            raise RunnerError("usage", "The bounded export engine runs in a process of its "
                              "own; --export-process in-process is the port's way.",
                              "Leave --export-process out, or add --export-engine port.")

    def run(self, handover: str, output, options, *, emit: Callable[[dict], None],
            stages: list | None = None) -> dict:
        """``bounded_export.export_asset`` from ``handover`` to ``output`` (sub-steps with
        ``parent`` "export"), after entering the ``export`` stage of ``stages`` itself (its
        ``stage`` with this process's pid, then ``ready``) when given — ``runner export``'s
        one-stage plan; a run's supervisor enters the stage as it starts this process. Returns
        ``{"export_engine", "export_seconds", "export_substeps", "export"}`` (the engine's
        result). Raises ``BadAsset`` (kind ``bad_asset``)."""
        start = time.perf_counter()
        if stages:
            emit(make("stage", stage="export", index=stages.index("export"),
                      count=len(stages), pid=os.getpid()))
            emit(make("ready", stage="export", seconds=time.perf_counter() - start,
                      released_bytes=0))
        info = export_asset(handover, output, levers(options, check=False), emit=emit)
        return {"export_engine": self.name, "export_seconds": info["seconds"],
                "export_substeps": list(info["step_seconds"]), "export": info}


BOUNDED = BoundedExport()
