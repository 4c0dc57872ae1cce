"""The pixal3d backend's bounded export (``--export-engine bounded``, the default): the export
process runs ``bounded_export`` on the hand-over asset — no torch, no port code, so it
works with the runner's own interpreter (Blender's Python with the bundled wheels) and in an
install without Pixal3D (``python -m runner export``).

Options (the runner's, ``meshfacts/options.py``): ``export_engine`` (``bounded`` | ``port``),
``export_budget`` (bytes or ``2G``), ``decimation_target`` (faces), ``texture_size`` (px). The
port's own levers have no meaning here: ``check_options`` refuses them with the bounded engine
before anything runs, and refuses the budget with the port's engine.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

from bounded_export import (
    DEFAULT_DECIMATION_TARGET,
    DEFAULT_TEXTURE_SIZE,
    ExportLevers,
    export_asset,
)
from meshfacts import options as options_table
from meshfacts.errors import RunnerError
from runner.backends import parse_faces, parse_size
from stageload.events import make_event
from stageload.pixal3d.plan import STAGES

ENGINES = options_table.ENGINES
PORT_ONLY = {"remesh": "on", "remesh_resolution": None, "export_profile": "fit"}
"""Options (and the value that is refused; None: any value) that only the port's export has."""


def engine(options: dict) -> str:
    """The job's export engine (``bounded`` when not given)."""
    return options.get("export_engine") or "bounded"


def check_options(options: dict) -> None:
    """Refuse, before anything runs (``RunnerError('usage')``), the combinations the chosen
    engine cannot honour: with ``bounded`` the port's remesh (``--remesh on``, any
    ``--remesh-resolution``), ``--export-profile fit`` and ``--export-process in-process``;
    and a ``--export-budget`` below the engine's minimum; with ``port`` a
    ``--export-budget``; ``--keep-asset`` with ``--export-process in-process``
    (there is no hand-over file to keep)."""
    in_process = (options.get("export_process") or "own") == "in-process"
    if engine(options) == "bounded":
        for name, refused in PORT_ONLY.items():
            value = options.get(name)
            if value is not None and (refused is None or str(value) == refused):
                flag = "--" + name.replace("_", "-")
                raise RunnerError(
                    "usage", f"{flag} {value} is a lever of the port's export; the bounded "
                    "export engine (the default) does not remesh: it exports the decoded "
                    "surface, decimated.", f"Leave {flag} out, or add --export-engine port "
                    "(the port's export, about 70 GB at the 1024 grid on a Mac).")
        if options.get("export_budget") not in (None, ""):  # a budget below the minimum
            levers(export_budget=options["export_budget"])  # is refused now, not at export
        if in_process:
            raise RunnerError("usage", "The bounded export engine runs in a process of its "
                              "own; --export-process in-process is the port's way.",
                              "Leave --export-process out, or add --export-engine port.")
    elif options.get("export_budget") is not None:
        raise RunnerError("usage", "--export-budget applies to the bounded export engine, "
                          "not to the port's export.", "Leave --export-budget out, or use "
                          "--export-engine bounded.")
    if options.get("keep_asset") and in_process:
        raise RunnerError("usage", "--keep-asset keeps the hand-over file of an export in a "
                          "process of its own; with --export-process in-process there is none.",
                          "Leave --export-process out (own is the default).")


def levers(texture_size=None, decimation_target=None, export_budget=None, *, check=True):
    """``bounded_export.ExportLevers`` from the runner's values (None: the engine's
    default), checked (``ExportLevers.check``) unless ``check`` is False: the export process
    leaves the check to ``export_asset``, the engine's entry, since the supervisor checked the
    same values where they entered. Raises ``RunnerError('usage')`` naming a bad value."""
    try:
        chosen = ExportLevers(
            decimation_target=DEFAULT_DECIMATION_TARGET if decimation_target is None
            else parse_faces(decimation_target),
            texture_size=DEFAULT_TEXTURE_SIZE if texture_size is None else int(texture_size),
            budget=None if export_budget in (None, "") else parse_size(export_budget))
        return chosen.check() if check else chosen
    except ValueError as exc:  # BudgetTooSmall says which budget is accepted
        raise RunnerError("usage", f"Export options: {exc}.",
                          getattr(exc, "hint", None)) from None


def export(handover: str, output, *, texture_size=None, emit: Callable[[dict], None] | None = None,
           stages=None, decimation_target=None, export_budget=None, stage_announced=False,
           **_other) -> dict:
    """The export process's work: the ``export`` stage (``stage`` with this process's pid,
    then ``ready``; ``stages``: the plan it belongs to, default the Pixal3D plan; not when
    ``stage_announced``: a run's supervisor entered it as it started this process), then
    ``bounded_export.export_asset`` from ``handover`` to ``output`` (sub-steps with
    ``parent`` "export"). Returns ``{"export_engine", "export_seconds", "export_substeps",
    "export"}`` (the engine's result). Raises ``BadAsset`` (kind ``bad_asset``)."""
    start = time.perf_counter()
    plan = list(stages or STAGES)
    chosen = levers(texture_size, decimation_target, export_budget, check=False)
    emit = emit or (lambda event: None)
    if not stage_announced:
        emit(make_event("stage", stage="export", index=plan.index("export"), count=len(plan),
                        pid=os.getpid()))
        emit(make_event("ready", stage="export", seconds=time.perf_counter() - start,
                        released_bytes=0))
    info = export_asset(handover, output, chosen, emit=emit)
    return {"export_engine": "bounded", "export_seconds": info["seconds"],
            "export_substeps": list(info["step_seconds"]), "export": info}
