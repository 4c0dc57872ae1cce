"""The runner's ``pixal3d`` backend: staged Pixal3D-mac through ``stageload.pixal3d``.

Everything Pixal3D-specific lives in ``stageload.pixal3d``; this module only maps the runner's
job (a validated image, a partial output path, seed, texture size, the backend options
``--pixal3d-dir``, ``--pipeline-type``, ``--load``, ``--keep-resident``, ``--working-memory``,
the export levers) onto ``Pixal3DRun.generate`` and passes every stage/load/release event to
the runner's stream, and maps the adapter's exception classes to the runner's error kinds
(``ERRORS``).
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from meshfacts import options as options_table
from meshfacts.errors import RunnerError
from runner.backends import parse_faces, parse_size
from runner.job import export_step as bounded_export
from runner.job.export_step import check_options, engine

# each torch-free (the supervisor imports this module for its precheck): the port check, the
# weights check, the export levers, the stage list
from stageload.pixal3d import check_port, open_port
from stageload.pixal3d.build.weights import require_weights
from stageload.pixal3d.errors import BadWeights, WeightsMissing
from stageload.pixal3d.export.run import ExportOptions, export_handover
from stageload.pixal3d.plan import STAGES  # noqa: F401  (the one stage list)
from stageload.pixal3d.port.open import static_report

NAME = "Pixal3D (staged)"
TEXTURE_SIZES = options_table.choices.TEXTURE_SIZES
DEFAULT_TEXTURE_SIZE = options_table.choices.DEFAULT_TEXTURE_SIZE
"""The port's texture sides (px) and its default, from ``meshfacts/choices.py`` through
the options table."""
#: the adapter's exception classes (stageload.pixal3d.errors) → runner error kinds; the worker
#: looks each class of an exception's MRO up here.
ERRORS = {"PortMissing": "pixal3d_missing", "PortVersionError": "pixal3d_version",
          "KnobRefused": "usage", "EmptyMeshError": "empty_mesh", "ExportRefused": "export_refused",
          "BadWeights": "bad_weights", "WeightsMissing": "weights_missing",
          "ExportFallbackRefused": "export_fallback",
          "PortError": "pixal3d_missing"}


def _bytes(value) -> int:
    """``--keep-resident`` value in bytes (an int, or text such as ``1G``; see
    ``runner.backends.parse_size``). Raises ``RunnerError('usage')`` for anything else."""
    try:
        return parse_size(value)
    except ValueError as exc:
        raise RunnerError("usage", f"--keep-resident {value!r}: {exc}",
                          "Give bytes (e.g. 1000000000) or a size like 1G; 0 keeps nothing "
                          "resident.") from None


def export_settings(export_profile: Optional[str] = "port", decimation_target=None, remesh=None,
                    remesh_resolution=None, allow_dense_grid_sample=None, strict_export=None,
                    **_other):
    """The export levers as the runner passes them (strings from the command line, None = not
    given) → ``stageload.pixal3d.export.run.ResolvedExport``. Raises ``RunnerError('usage')``."""
    try:
        options = ExportOptions(
            decimation_target=None if decimation_target is None else parse_faces(decimation_target),
            remesh=None if remesh is None else remesh in (True, "on"),
            remesh_resolution=remesh_resolution,
            profile=None if export_profile in (None, "port") else export_profile,
            allow_dense_grid_sample=bool(allow_dense_grid_sample),
            strict=bool(strict_export))
        return options.resolve()
    except ValueError as exc:
        raise RunnerError("usage", f"Export options: {exc}.") from None


def splits_export(options: dict) -> bool:
    """True when the job's export runs in a process of its own (``--export-process own``; the
    bounded export engine always does)."""
    return engine(options) == "bounded" or (options.get("export_process") or "own") == "own"


def exports_without_torch(options: dict) -> bool:
    """True when the job's export process needs no torch: the bounded export engine."""
    return engine(options) == "bounded"


def _device(device: Optional[str]):
    return device or os.environ.get("PIXAL3D_DEVICE") or None


def _check_job(height_m, texture_size, load: str, export: dict, export_process: str) -> None:
    """The job's options this backend refuses before anything loads: ``RunnerError``
    (``usage``) naming the option and what to give instead."""
    if height_m is not None:
        raise RunnerError("usage", "--height is not supported by the pixal3d backend.",
                          "Leave --height out; scale the imported mesh in Blender.")
    if int(texture_size) not in TEXTURE_SIZES:
        raise RunnerError("usage", f"--texture-size {texture_size} is not one Pixal3D offers.",
                          f"Choose one of {', '.join(map(str, TEXTURE_SIZES))}.")
    loads = options_table.get("load").choices
    if load not in loads:
        raise RunnerError("usage", f"--load {load!r} is not {' or '.join(loads)}.",
                          f"Use {' or '.join('--load ' + name for name in loads)}.")
    check_options({**export, "export_process": export_process})


def generate(image, output, *, had_alpha: bool, seed: int = 42,
             texture_size: int = DEFAULT_TEXTURE_SIZE,
             emit: Optional[Callable[[dict], None]] = None, pixal3d_dir: Optional[str] = None,
             pipeline_type: str = "1024_cascade", load: str = "staged", keep_resident=0,
             prefetch: str = "on", working_memory: str = "lean",
             device: Optional[str] = None, height_m: Optional[float] = None,
             handover: Optional[str] = None, export_process: str = "own", **export) -> dict:
    """One image → GLB at ``output`` (the runner's partial path; must not exist yet).

    Args:
        image: validated PIL image (RGBA); with ``had_alpha`` False its alpha is opaque and the
            port's background remover runs.
        seed: the port's seed. texture_size: px, one of ``TEXTURE_SIZES`` (the port's choices).
        emit: the runner's event sink (stage, ready, load, reload, release events).
        pixal3d_dir: the Pixal3D-mac folder (None: ``$PIXAL3D_DIR``).
        pipeline_type: ``1024_cascade`` or ``1536_cascade``. load: ``staged`` or ``eager``.
        keep_resident: bytes (or ``"1G"``) the shape decoder may stay loaded across the gap.
        prefetch: ``on`` reads the next stage's weight files ahead into the OS's file cache
            (``stageload.prefetch``; floor: 10 % of total memory, the guard's default
            ``--kill-free``); ``off`` does not.
        working_memory: ``lean`` (the stages' largest temporaries in bands and chunks,
            ``stageload.pixal3d.lean.working``) or ``port`` (the port's own computations).
        device: ``mps``/``cuda``/``cpu`` (default mps when available; ``$PIXAL3D_DEVICE``).
        height_m: not supported (Pixal3D exports in its own unit box): given → usage error.
        handover: with ``export_process="own"``, the ``.npz`` path (must not exist) the decoded
            asset is written to instead of exporting; the supervisor's export process
            (:func:`export`) continues from it. ``export``: the levers of ``export_settings``.

    Returns ``{"backend", "vertices", "faces", "resolution", "seconds", "resident_bytes",
    "kept", "load", "pipeline_type", "working_memory"}`` (+ ``"handover"``). Raises
    ``PortError`` (kinds ``pixal3d_missing`` / ``pixal3d_version`` / ``export_refused``) before
    loading anything when the folder is unusable, ``RunnerError`` (``usage``) for a bad option.
    """
    _check_job(height_m, texture_size, load, export, export_process)
    bounded = engine(export) == "bounded"
    settings = export_settings(**export)
    from stageload.pixal3d import Pixal3DRun  # torch: only the model process touches it
    run = Pixal3DRun(pixal3d_dir or None, device=_device(device), load=load,
                     pipeline_type=pipeline_type or "1024_cascade",
                     keep_resident=_bytes(keep_resident), prefetch=(prefetch or "on") == "on",
                     working_memory=working_memory or "lean", events=emit)
    if bounded and (handover is None or not getattr(run, "can_hand_over", True)):
        run.close()  # the port's export must not stand in for the bounded engine unannounced
        raise RunnerError("export_refused", "The bounded export engine needs the decoded asset "
                          "handed over, and this port (or run) cannot write it.",
                          "Use --export-engine port (the port's own export).")
    try:
        result = run.generate(image, output, seed=int(seed), texture_size=int(texture_size),
                              export=settings,
                              handover=handover if export_process == "own" else None)
    finally:
        run.close()
    out = {"backend": NAME, "vertices": result["vertices"], "faces": result["faces"],
           "resolution": result["resolution"], "seconds": result["seconds"],
           "resident_bytes": result["resident_bytes"], "kept": result["kept"], "load": load,
           "pipeline_type": pipeline_type, "working_memory": working_memory or "lean"}
    if result.get("handover"):
        out["handover"] = result["handover"]
    return out


def export(handover: str, output, *, seed: int = 42, texture_size: int = DEFAULT_TEXTURE_SIZE,
           emit: Optional[Callable[[dict], None]] = None, pixal3d_dir: Optional[str] = None,
           pipeline_type: str = "1024_cascade", device: Optional[str] = None, **options) -> dict:
    """The export process: the decoded asset in ``handover`` (written by :func:`generate`) →
    the GLB at ``output`` through the port's own export, sub-steps reported to ``emit``.
    ``options``: the job's backend options (the export levers are used, the rest ignored).
    With ``--export-engine bounded`` (the default) this is ``bounded_export.export``: no torch,
    no port. Returns ``{"export_seconds", "export_substeps"}``. Raises ``PortError`` (e.g.
    ``export_refused`` with the figure) before writing anything when export cannot go on."""
    if engine(options) == "bounded":
        return bounded_export.export(handover, output, texture_size=texture_size, emit=emit,
                                     **options)
    import torch  # the port's export runs on torch: only this export process imports it
    settings = export_settings(**options)
    port = open_port(pixal3d_dir or None)
    dev = torch.device(_device(device) or ("mps" if torch.backends.mps.is_available() else "cpu"))
    result = export_handover(port, handover, output, seed=int(seed), texture_size=int(texture_size),
                             pipeline_type=pipeline_type or "1024_cascade", settings=settings,
                             emit=emit or (lambda event: None), device=dev)
    return {"export_seconds": result["seconds"], "export_substeps": result["substeps"]}


def self_check(emit: Optional[Callable[[dict], None]] = None, pixal3d_dir: Optional[str] = None,
               pipeline_type: Optional[str] = None, device: Optional[str] = None,
               **_options) -> dict:
    """The deep self-check (``python -m runner check --backend pixal3d --deep``): each lean part
    against the port's own path on the user's port, weights and device, at reduced sizes
    (``stageload.pixal3d.selfcheck``); one ``self_check`` event per part to ``emit``. Returns
    the report. Raises ``PortError`` subclasses before anything loads (mapped by ``ERRORS``)."""
    from stageload.pixal3d.selfcheck.run import deep_check  # torch: the worker's business
    return deep_check(pixal3d_dir or None, device=_device(device),
                      pipeline_type=pipeline_type or "1024_cascade", emit=emit)


def _kind(error_name: Optional[str]) -> Optional[str]:
    """The runner error kind of an adapter exception class name (None → None)."""
    return None if error_name is None else ERRORS.get(error_name, "pixal3d_missing")


def precheck(pixal3d_dir: Optional[str] = None, pipeline_type: Optional[str] = None,
             **_options) -> None:
    """The supervisor's light check, before the guard and the trace: a port folder is found
    (``--pixal3d-dir``, else ``$PIXAL3D_DIR``, else the interpreter's own), holds
    ``generate_mps.py`` and ``pixal3d/``, and its sources have what the adapter relies on —
    ``stageload.pixal3d.port.open.static_report`` (file system and ``ast`` only: no torch, no port
    import, no weights) —, then every weight file the plan reads is there and whole
    (``stageload.pixal3d.build.weights.require_weights``: file system and safetensors headers only).
    Raises ``RunnerError`` (``pixal3d_missing``, exit 32, or ``pixal3d_version``, exit 33,
    naming every drifted item; ``weights_missing`` 36 naming the first missing file and how to
    download the weights; ``bad_weights`` 35 naming the file and the tensor when known)."""
    check_options(_options)  # a combination the export engine refuses: before the port
    report = static_report(pixal3d_dir or None)
    if not report["ok"]:
        raise RunnerError(_kind(report["error"]), report["reason"], report["hint"],
                          missing=list(report["missing"]))
    problem = weights_problem(report["root"], pipeline_type)
    if problem is not None:
        raise RunnerError(problem["kind"], problem["reason"], problem["hint"], **problem["details"])


def weights_problem(root: str, pipeline_type: Optional[str] = None) -> Optional[dict]:
    """None when every weight file the plan reads is usable; else ``{"kind", "reason",
    "hint", "details"}`` for the first at fault (``details``: ``missing`` — every missing
    file's expected path —, or ``file`` and ``tensors``)."""
    try:
        require_weights(root, pipeline_type or "1024_cascade")
    except WeightsMissing as err:
        return {"kind": "weights_missing", "reason": err.message, "hint": err.hint,
                "details": {"missing": list(err.missing)}}
    except BadWeights as err:
        return {"kind": "bad_weights", "reason": err.message, "hint": err.hint,
                "details": err.details}
    except ValueError:  # an unknown pipeline type: the run's own validation says so
        return None
    return None


def check(pixal3d_dir: Optional[str] = None, **options) -> dict:
    """Can a port folder be used? Imports it and checks every name the adapter relies on, then
    that every weight file the plan reads is there and whole (:func:`weights_problem`: no weights
    are loaded; seconds). ``{"ok", "reason", "hint", "root", "version", "missing", "kind"}``
    (``kind``: the runner error kind a run would fail with, e.g. ``pixal3d_missing``; None when
    ok)."""
    report = check_port(pixal3d_dir or None)
    if report["ok"]:
        problem = weights_problem(report["root"], options.get("pipeline_type"))
        if problem is not None:
            details = problem["details"]
            return {"ok": False, "reason": problem["reason"], "hint": problem["hint"],
                    "root": report["root"], "version": report["version"],
                    "missing": details.get("missing") or [details.get("file")],
                    "kind": problem["kind"], "static": report["static"]}
    return {"ok": report["ok"], "reason": report["reason"], "hint": report["hint"],
            "root": report["root"],
            "version": report["version"], "missing": report["missing"],
            "kind": _kind(report["error"]),
            "static": report["static"]}
