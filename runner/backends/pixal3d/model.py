"""The pixal3d backend's model process: the runner's job (a validated image, a partial output
path, the job's ``JobOptions``) → ``stageload.pixal3d.Pixal3DRun`` with the matching
``RunOptions``, every stage/load/release event passed to the runner's stream, the adapter's
exception classes mapped to the runner's error kinds (``ERRORS``). Only the worker imports this
module; torch is imported by :func:`run_job`."""
from __future__ import annotations

from typing import Callable, Optional

from meshfacts.errors import RunnerError
from runner.backends.pixal3d import weights_problem
from runner.backends.pixal3d.errors import ERRORS, kind_of
from runner.backends.pixal3d.export import device_name, export_settings
from stageload.pixal3d import check_port
from stageload.pixal3d.options import RunOptions
from stageload.pixal3d.plan import STAGES  # noqa: F401  (the one stage list)

__all__ = ["ERRORS", "NAME", "STAGES", "check", "run_job", "run_options", "self_check"]

NAME = "Pixal3D (staged)"


def run_options(options) -> RunOptions:
    """The adapter's ``RunOptions`` of the job's ``JobOptions`` (its export levers resolved:
    ``export.export_settings``). Raises ``RunnerError('usage')``."""
    return RunOptions(pipeline_type=options.pipeline_type, load=options.load,
                      keep_resident=options.keep_resident, prefetch=options.prefetch == "on",
                      working_memory=options.working_memory, seed=options.seed,
                      texture_size=options.texture_size, export=export_settings(options))


def run_job(image, output, options, *, had_alpha: bool,
            emit: Optional[Callable[[dict], None]] = None,
            handover: Optional[str] = None) -> dict:
    """One image → GLB at ``output`` (the runner's partial path; must not exist yet).

    ``image``: validated PIL image (RGBA); with ``had_alpha`` False its alpha is opaque and the
    port's background remover runs. ``options``: the job's ``JobOptions`` (the port folder, the
    run's options, the export levers). ``emit``: the runner's event sink (stage, ready, load,
    reload, release events). ``handover``: the job's export runs in a process of its own (its
    export step): the ``.npz`` path (must not exist) the decoded asset is written to instead of
    exporting. The device is ``$PIXAL3D_DEVICE`` or mps when available.

    Returns ``{"backend", "vertices", "faces", "resolution", "seconds", "resident_bytes",
    "kept", "load", "pipeline_type", "working_memory"}`` (+ ``"handover"``). Raises
    ``PortError`` (kinds ``pixal3d_missing`` / ``pixal3d_version`` / ``export_refused``) before
    loading anything when the folder is unusable, ``RunnerError`` (``export_refused``) when a
    hand-over is asked of a port that cannot write one.
    """
    from stageload.pixal3d import Pixal3DRun  # torch: only the model process touches it

    run = Pixal3DRun(options.pixal3d_dir, run_options(options), device=device_name(),
                     events=emit)
    if handover is not None and not run.can_hand_over:
        run.close()  # the port's export must not stand in for the export step unannounced
        raise RunnerError("export_refused", "This job exports in a process of its own, which "
                          "needs the decoded asset handed over, and this port cannot write it.",
                          "Use --export-engine port --export-process in-process (the port's "
                          "own export in the model process).")
    try:
        result = run.generate(image, output, handover=handover)
    finally:
        run.close()
    out = {"backend": NAME, "vertices": result["vertices"], "faces": result["faces"],
           "resolution": result["resolution"], "seconds": result["seconds"],
           "resident_bytes": result["resident_bytes"], "kept": result["kept"],
           "load": options.load, "pipeline_type": options.pipeline_type,
           "working_memory": options.working_memory}
    if result.get("handover"):
        out["handover"] = result["handover"]
    return out


def check(options) -> dict:
    """Can a port folder be used (the job's ``JobOptions``: its ``pixal3d_dir`` and
    ``pipeline_type``)? Imports it and checks every name the adapter relies on, then that every
    weight file the plan reads is there and whole (``weights_problem``: no weights are loaded;
    seconds). ``{"ok", "reason", "hint", "root", "version", "missing", "kind"}`` (``kind``: the
    runner error kind a run would fail with, e.g. ``pixal3d_missing``; None when ok)."""
    report = check_port(options.pixal3d_dir)
    if report["ok"]:
        problem = weights_problem(report["root"], options.pipeline_type)
        if problem is not None:
            details = problem["details"]
            return {"ok": False, "reason": problem["reason"], "hint": problem["hint"],
                    "root": report["root"], "version": report["version"],
                    "missing": details.get("missing") or [details.get("file")],
                    "kind": problem["kind"], "static": report["static"]}
    return {"ok": report["ok"], "reason": report["reason"], "hint": report["hint"],
            "root": report["root"], "version": report["version"],
            "missing": report["missing"], "kind": kind_of(report["error"]),
            "static": report["static"]}


def self_check(options, emit: Optional[Callable[[dict], None]] = None) -> dict:
    """The deep self-check (``python -m runner check --backend pixal3d --deep``) with the job's
    ``JobOptions`` (the port folder, the pipeline type): each lean part against the port's own
    path on the user's port, weights and device, at reduced sizes
    (``stageload.pixal3d.selfcheck``); one ``self_check`` event per part to ``emit``. Returns
    the report. Raises ``PortError`` subclasses before anything loads (mapped by ``ERRORS``)."""
    from stageload.pixal3d.selfcheck.run import deep_check  # torch: the worker's business
    return deep_check(options.pixal3d_dir, device=device_name(),
                      pipeline_type=options.pipeline_type, emit=emit)
