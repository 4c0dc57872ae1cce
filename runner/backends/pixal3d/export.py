"""The Pixal3D backend's own export step (:data:`PORT`, ``--export-engine port``): the port's
``asset_to_glb`` on the hand-over file, in an export process that imports torch and the port;
and the port's export levers from the job's options (:func:`export_settings`)."""
from __future__ import annotations

import os
from collections.abc import Callable

from meshfacts.errors import RunnerError
from runner.backends.pixal3d.errors import ERRORS
from runner.job.export_step import ExportStep
from stageload.pixal3d.export.run import ExportOptions, ResolvedExport


def export_settings(options) -> ResolvedExport:
    """The port's export levers of the job's ``JobOptions`` (None: the port's own) →
    ``stageload.pixal3d.export.run.ResolvedExport``. Raises ``RunnerError('usage')`` for a
    combination the port's levers refuse (a remesh resolution with ``--remesh off``)."""
    try:
        return ExportOptions(
            decimation_target=options.decimation_target,
            remesh=None if options.remesh is None else options.remesh == "on",
            remesh_resolution=options.remesh_resolution,
            profile=None if options.export_profile in (None, "port") else options.export_profile,
            allow_dense_grid_sample=bool(options.allow_dense_grid_sample),
            strict=bool(options.strict_export)).resolve()
    except ValueError as exc:
        raise RunnerError("usage", f"Export options: {exc}.") from None


def device_name(options=None) -> str | None:
    """The device the job asks for: ``$PIXAL3D_DEVICE`` (``mps``/``cuda``/``cpu``), or None
    for the adapter's choice (mps when available)."""
    return os.environ.get("PIXAL3D_DEVICE") or None


class PortExport(ExportStep):
    """The port's export in a process of its own: torch and the port are imported there."""

    name = "port"
    needs_torch = True
    ERRORS = ERRORS

    def check(self, options) -> None:
        """Refuse ``--export-budget`` (the bounded engine's lever) and a combination the port's
        levers refuse."""
        if options.export_budget is not None:
            raise RunnerError("usage", "--export-budget applies to the bounded export engine, "
                              "not to the port's export.", "Leave --export-budget out, or use "
                              "--export-engine bounded.")
        export_settings(options)

    def run(self, handover: str, output, options, *, emit: Callable[[dict], None],
            stages: list | None = None) -> dict:
        """The decoded asset in ``handover`` (written by the model process) → the GLB at
        ``output`` through the port's own export, sub-steps reported to ``emit``. Returns
        ``{"export_seconds", "export_substeps"}``. Raises ``PortError`` (e.g.
        ``export_refused`` with the figure) before writing anything when export cannot go
        on."""
        import torch  # the port's export runs on torch: only this export process imports it

        from stageload.pixal3d import open_port
        from stageload.pixal3d.export.run import export_handover

        port = open_port(options.pixal3d_dir or None)
        device = device_name() or ("mps" if torch.backends.mps.is_available() else "cpu")
        result = export_handover(port, handover, output, seed=options.seed,
                                 texture_size=options.texture_size,
                                 pipeline_type=options.pipeline_type,
                                 settings=export_settings(options), emit=emit,
                                 device=torch.device(device))
        return {"export_seconds": result["seconds"], "export_substeps": result["substeps"]}


PORT = PortExport()
