"""The runner's ``pixal3d`` backend: staged Pixal3D-mac through ``stageload.pixal3d``.

Everything Pixal3D-specific lives in ``stageload.pixal3d``; this package maps the runner's job
onto it. One module per process:

- this module (the supervisor's, torch-free): the precheck (:func:`precheck`: the port folder,
  its weight files, the export levers' combinations) and the job's export step
  (:func:`export_step`: decided once, when the worker job is made);
- ``handover``: the supervisor's side of an export in a process of its own — the export
  process started once the model process has exited, and ``--keep-asset``;
- ``model``: the model process (``run_job``: ``Pixal3DRun`` with the job's options; torch);
- ``export``: the port's own export step (``--export-engine port``; torch, in the export
  process); the bounded engine's is ``runner.job.export_step.BOUNDED``;
- ``errors``: the adapter's exception classes → the runner's error kinds.
"""
from __future__ import annotations

from meshfacts.errors import RunnerError
from runner.backends.pixal3d.errors import ERRORS, kind_of
from runner.backends.pixal3d.export import PORT
from runner.backends.pixal3d.handover import HandOver
from runner.job.export_step import BOUNDED

# each torch-free (the supervisor imports this module): the port check, the weights check, the
# stage list
from stageload.pixal3d.build.weights import require_weights
from stageload.pixal3d.errors import BadWeights, WeightsMissing
from stageload.pixal3d.plan import STAGES  # noqa: F401  (the one stage list)
from stageload.pixal3d.port.open import static_report

__all__ = ["ERRORS", "EXPORT_STEPS", "STAGES", "export_step", "hand_over", "precheck",
           "weights_problem"]

EXPORT_STEPS = (BOUNDED, PORT)
"""The export engines this backend offers (``--export-engine``), in the options table's order."""
_BY_ENGINE = {step.name: step for step in EXPORT_STEPS}


def export_step(options):
    """The job's export step (``JobOptions``): the chosen engine's (``--export-engine``, the
    bounded engine by default), or None for the port's export in the model process
    (``--export-process in-process``, which only the port's engine has)."""
    step = _BY_ENGINE[options.export_engine]
    if step is PORT and options.export_process == "in-process":
        return None
    return step


def hand_over(options) -> HandOver | None:
    """What the supervisor is handed for the job's export in a process of its own
    (:class:`handover.HandOver` with :func:`export_step` and ``--keep-asset``), or None: the
    port exports in the model process."""
    step = export_step(options)
    return None if step is None else HandOver(step, options.keep_asset)


def check_export(options) -> None:
    """Refuse, before anything runs (``RunnerError('usage')``), the export options the chosen
    engine cannot honour (``ExportStep.check``), and ``--keep-asset`` without a hand-over file
    to keep (``--export-process in-process``)."""
    _BY_ENGINE[options.export_engine].check(options)
    if options.keep_asset and export_step(options) is None:
        raise RunnerError("usage", "--keep-asset keeps the hand-over file of an export in a "
                          "process of its own; with --export-process in-process there is none.",
                          "Leave --export-process out (own is the default).")


def precheck(options) -> None:
    """The supervisor's light check of the job's ``JobOptions``, before the guard and the
    trace: the export options (:func:`check_export`), then a port folder is found
    (``--pixal3d-dir``, else ``$PIXAL3D_DIR``, else the interpreter's own), holds
    ``generate_mps.py`` and ``pixal3d/``, and its sources have what the adapter relies on —
    ``stageload.pixal3d.port.open.static_report`` (file system and ``ast`` only: no torch, no
    port import, no weights) —, then every weight file the plan reads is there and whole
    (``stageload.pixal3d.build.weights.require_weights``: file system and safetensors headers
    only). Raises ``RunnerError`` (``usage``; ``pixal3d_missing``, exit 32, or
    ``pixal3d_version``, exit 33, naming every drifted item; ``weights_missing`` 36 naming the
    first missing file and how to download the weights; ``bad_weights`` 35 naming the file and
    the tensor when known)."""
    check_export(options)  # a combination the export engine refuses: before the port
    report = static_report(options.pixal3d_dir)
    if not report["ok"]:
        raise RunnerError(kind_of(report["error"]), report["reason"], report["hint"],
                          missing=list(report["missing"]))
    problem = weights_problem(report["root"], options.pipeline_type)
    if problem is not None:
        raise RunnerError(problem["kind"], problem["reason"], problem["hint"], **problem["details"])


def weights_problem(root: str, pipeline_type: str) -> dict | None:
    """None when every weight file the plan of ``pipeline_type`` reads is usable; else
    ``{"kind", "reason", "hint", "details"}`` for the first at fault (``details``: ``missing``
    — every missing file's expected path —, or ``file`` and ``tensors``)."""
    try:
        require_weights(root, pipeline_type)
    except WeightsMissing as err:
        return {"kind": "weights_missing", "reason": err.message, "hint": err.hint,
                "details": {"missing": list(err.missing)}}
    except BadWeights as err:
        return {"kind": "bad_weights", "reason": err.message, "hint": err.hint,
                "details": err.details}
    return None
