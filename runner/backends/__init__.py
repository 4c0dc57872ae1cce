"""Backend registry: name → :class:`runner.backends.base.Backend` (the module that runs it, its
planned stages, its options, its light checks and its hand-over to an export process).

The supervisor uses only this package's light parts (no backend's worker module is imported
there, so no torch and none of the built-in backend's libraries): the planned stage names for
``hello``, the precheck, the hand-over. The worker loads the module (``Backend.load``) and
calls ``run_job(image, output, options, *, had_alpha, emit, handover)`` with the job's
``meshfacts.job_options.JobOptions``.

``Backend.check()`` imports the module, so call it where importing torch is fine (the worker's
``--probe`` mode, which ``python -m runner check`` runs in a subprocess). ``precheck`` is the
light part the supervisor runs before the guard and the trace (files and folders only; it must
not import torch — tests/runner/test_precheck.py checks that).
"""
from __future__ import annotations

from meshfacts import options as options_table
from runner.backends import pixal3d
from runner.backends.base import Backend, Option
from runner.job.export_step import BOUNDED

__all__ = ["BACKENDS", "DEFAULT", "Backend", "Option", "all_options", "export_step_named",
           "get", "names"]


def _builtin_module():
    # NumPy, SciPy and trimesh take over a second to import: only the worker loads them.
    from runner.backends import builtin
    return builtin


def _pixal3d_module():
    # the model process's module (torch is imported by its run_job): only the worker loads it
    from runner.backends.pixal3d import model
    return model


BACKENDS: dict[str, Backend] = {
    "builtin": Backend(
        name="builtin",
        module="runner.backends.builtin",
        load=_builtin_module,
        title="built-in silhouette inflation (no weights, CPU, seconds)",
        stages=("matte", "shape", "texture", "export"),
        texture_floor=512,  # runner.backends.builtin.texture.MIN_TEXTURE_SIZE (a test checks)
    ),
    "pixal3d": Backend(
        name="pixal3d",
        module="runner.backends.pixal3d.model",
        load=_pixal3d_module,
        title="Pixal3D (staged through stageload; needs a Pixal3D-mac checkout and its weights)",
        # SPEC §2.5's plan; the same for both pipeline types: stageload.pixal3d.plan.STAGES
        # (torch-free), the one source.
        stages=tuple(pixal3d.STAGES),
        # the options table's pixal3d entries (meshfacts/options.py), the export levers among them
        options=options_table.backend_options("pixal3d"),
        install_hint="The Pixal3D backend is not installed in this version of the runner.",
        needs_torch=True,
        # the port folder and its weight files (files only), the export levers' combinations
        precheck=pixal3d.precheck,
        # --export-process own (default): the export stage in a process of its own, with the
        # bounded engine (default) or the port's
        hand_over=pixal3d.hand_over,
    ),
}

DEFAULT = "builtin"

EXPORT_STEPS = {step.name: step for step in (BOUNDED, *pixal3d.EXPORT_STEPS)}
"""Every export step by name (``WorkerJob.export`` names one)."""


def export_step_named(name: str):
    """The export step called ``name`` (``runner.job.export_step.ExportStep``). Raises
    ``KeyError`` naming the known ones."""
    try:
        return EXPORT_STEPS[name]
    except KeyError:
        raise KeyError(f"unknown export step {name!r}; known: {', '.join(EXPORT_STEPS)}") \
            from None


def names() -> list[str]:
    """Registered backend names, default first."""
    return [DEFAULT] + [n for n in BACKENDS if n != DEFAULT]


def get(name: str) -> Backend:
    """The backend called ``name``. Raises ``KeyError`` naming the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(names())}") from None


def all_options() -> list[Option]:
    """Every backend option once (for the command line), in registry order."""
    seen, out = set(), []
    for backend in BACKENDS.values():
        for opt in backend.options:
            if opt.dest not in seen:
                seen.add(opt.dest)
                out.append(opt)
    return out
