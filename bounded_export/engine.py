"""``export_asset``: the port's saved asset → textured GLB, step by step within a budget.

Steps (``steps.SUBSTEPS``, each a ``stage`` event with ``parent`` "export"): ``load`` (the
file's headers checked against the budget before any array is read, then the mesh, and the
voxels' values streamed in blocks — the voxels themselves are read for the bake),
``cleanup``, ``orient`` (faces wound consistently and outward), ``decimate``, ``uv_unwrap``,
``bake`` (the voxels are read here), ``seams``, ``write``. The full input mesh is dropped once
decimated. Remeshing (the port's dual contouring) is not done: the decimated input surface is
exported.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bounded_export import budget as budgeting
from bounded_export.asset import inspect_asset, load_asset, load_voxels
from bounded_export.errors import BadAsset, BudgetTooSmall, PiecesUnavailable
from bounded_export.steps import Steps
from meshfacts.choices import DEFAULT_TEXTURE_SIZE, MAX_DECIMATION_TARGET, TEXTURE_SIZES

DEFAULT_DECIMATION_TARGET = 1_000_000


@dataclass(frozen=True)
class ExportLevers:
    """What the export makes: ``decimation_target`` (faces, 1..``MAX_DECIMATION_TARGET``),
    ``texture_size`` (px, one of ``TEXTURE_SIZES``), ``budget`` (bytes or None for
    ``budget.DEFAULT_BUDGET``; at least ``budget.MIN_BUDGET``). ``check()`` raises
    ``ValueError`` naming a bad value (``BudgetTooSmall``, with a ``hint``, for a budget below
    the minimum)."""

    decimation_target: int = DEFAULT_DECIMATION_TARGET
    texture_size: int = DEFAULT_TEXTURE_SIZE
    budget: int | None = None

    def check(self) -> ExportLevers:
        t = self.decimation_target
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_DECIMATION_TARGET:
            raise ValueError(f"decimation target {t!r} must be a whole number of faces from 1 "
                             f"to {MAX_DECIMATION_TARGET:,}")
        if self.texture_size not in TEXTURE_SIZES:
            raise ValueError(f"texture size {self.texture_size!r} must be one of "
                             f"{', '.join(map(str, TEXTURE_SIZES))}")
        if self.budget is not None and (isinstance(self.budget, bool)
                                        or not isinstance(self.budget, int)):
            raise ValueError(f"export budget {self.budget!r} must be a number of bytes")
        if self.budget is not None and self.budget < budgeting.MIN_BUDGET:
            raise BudgetTooSmall(self.budget, budgeting.MIN_BUDGET)
        return self


def _plan(path: Path, levers: ExportLevers):
    if not path.is_file():
        raise BadAsset(None, f"{path} is not a file", "Check the path of the asset (.npz).")
    budgeting.check_file(path.stat().st_size, levers.budget)  # before a byte is read
    members = inspect_asset(path)
    plan = budgeting.plan(**budgeting.asset_sizes(members), target=levers.decimation_target,
                          texture=levers.texture_size, file_bytes=path.stat().st_size,
                          budget=levers.budget)
    if plan.decimate_pieces and not has_pyfqmr():  # refused now, never a fallback
        raise PiecesUnavailable(plan.budget)
    return plan


def has_pyfqmr() -> bool:
    """Whether this interpreter can find pyfqmr (the pieced decimation's library), checked
    without importing it: the export process never runs it (each piece's child does)."""
    import importlib.util

    return importlib.util.find_spec("pyfqmr") is not None


def _decimate(cleaned: Path, decimated: Path, levers: ExportLevers, plan, steps: Steps,
              workdir: Path) -> dict:
    """The decimate step: one fast-simplification call, or (``plan.decimate_pieces``) the
    pieced decimation of ``pieces.py`` — its ``stage`` event says which (``method``), its
    ``progress`` events carry ``pieces``. Returns the step's facts for the result."""
    from bounded_export.pieces import decimate_in_pieces
    from bounded_export.stoppable import call

    if plan.decimate_pieces:
        steps.begin("decimate", method="pieces", pieces=plan.decimate_pieces)
        steps.progress(0.0, force=True, pieces=plan.decimate_pieces)
        done = decimate_in_pieces(cleaned, decimated, levers.decimation_target,
                                  plan.decimate_pieces, workdir, steps)
        return {"method": "pieces", **done}
    steps.begin("decimate", method="one call")
    steps.progress(0.0, force=True)
    done = call("bounded_export.decimate:simplify_file", None,
                {"inp": str(cleaned), "out": str(decimated),
                 "target": levers.decimation_target}, workdir, steps)
    return {"method": "one call", "pieces": 1, "twins": int(done["twins"])}


def _orient(cleaned: Path, oriented: Path, steps: Steps, workdir: Path) -> dict:
    """The orient step (``orient.py``) in a child process: the cleaned mesh's faces wound
    consistently and outward, written to ``oriented``; a ``warning`` event for the parts whose
    outside could not be decided. Returns ``orient``'s facts (ints); ``cleaned`` is removed."""
    from bounded_export.orient import undecided_warning
    from bounded_export.stoppable import call

    steps.begin("orient")
    steps.progress(0.0, force=True)
    facts = call("bounded_export.orient:orient_file", None,
                 {"inp": str(cleaned), "out": str(oriented)}, workdir, steps)
    cleaned.unlink()
    facts = {key: int(value) for key, value in facts.items()}
    warning = undecided_warning(facts)
    if warning is not None:
        steps.emit(warning)
    return facts


def _mesh_steps(path: Path, levers: ExportLevers, plan, steps: Steps, workdir: Path):
    """load (validate the mesh, then drop it), cleanup, orient and decimate (each a child process
    reading and writing files in ``workdir``: this process never holds the full mesh while
    they run), uv_unwrap. Returns (asset without arrays, unwrapped mesh, normals, faces in,
    the decimation's facts, the orientation's facts)."""
    import numpy as np

    from bounded_export.glb import vertex_normals
    from bounded_export.stoppable import call
    from bounded_export.unwrap import unwrap

    asset = load_asset(path, voxels=False, tick=steps.check)  # every value checked, dropped
    faces_in = len(asset.faces)
    asset.vertices = asset.faces = None
    cleaned, decimated = workdir / "cleaned.npz", workdir / "decimated.npz"
    steps.begin("cleanup")
    steps.progress(0.0, force=True)
    call("bounded_export.cleanup:clean_file", None,
         {"asset": str(path), "out": str(cleaned)}, workdir, steps)
    oriented = workdir / "oriented.npz"
    orientation = _orient(cleaned, oriented, steps, workdir)
    decimation = _decimate(oriented, decimated, levers, plan, steps, workdir)
    oriented.unlink()
    with np.load(decimated) as data:
        vertices, faces = data["vertices"], data["faces"]
    decimated.unlink()
    steps.begin("uv_unwrap")
    mesh = unwrap(vertices, faces, levers.texture_size, plan.unwrap_batch_faces, workdir, steps)
    normals = vertex_normals(vertices, faces)[mesh.source]
    return asset, mesh, normals, faces_in, decimation, orientation


def _texture_steps(asset, mesh, levers: ExportLevers, plan, steps: Steps):
    """bake (the voxels read now), its coverage judged (``coverage.judge``: a ``warning``, or
    ``BadAsset`` before anything is written), seams. Returns (``Baked``, voxel count, the
    share of used texels that found a voxel)."""
    from bounded_export.bake import bake
    from bounded_export.coverage import judge
    from bounded_export.seams import fill
    from bounded_export.voxels import SparseVoxels

    steps.begin("bake")
    load_voxels(asset, steps.check)
    steps.check()
    voxels = SparseVoxels(asset.coords, asset.attrs, asset.origin, asset.voxel_size,
                          asset.resolution)
    count = len(asset.coords)
    asset.coords = asset.attrs = None
    steps.check()
    baked = bake(mesh.vertices, mesh.faces, mesh.uv, voxels, levers.texture_size,
                 plan.bake_chunk_texels, steps)
    del voxels
    share = judge(baked.used, baked.used - baked.orphans, asset.boxes, steps.emit)
    if share is not None:  # in the trace, for ``stageload summary``'s bake row
        steps.progress(1.0, force=True, facts={"voxel_coverage": round(share, 6)})
    steps.begin("seams")
    fill(baked.channels, baked.baked)
    return baked, count, share


def export_asset(asset: os.PathLike | str, output: os.PathLike | str,
                 levers: ExportLevers = ExportLevers(), *,
                 emit: Callable[[dict], None] | None = None, cancel=None,
                 overwrite: bool = False) -> dict:
    """Export the asset ``.npz`` at ``asset`` to the GLB ``output``.

    ``levers``: ``ExportLevers``. ``emit``: event sink for the sub-steps' ``stage`` events
    (``parent`` "export") and ``progress`` events. ``cancel``: None, a callable returning True,
    or a ``threading.Event``: checked at every piece (a cancel is honoured within about a
    second; each decimation call — the single one or a piece's — runs in a child process that
    is killed).
    ``overwrite``: replace an existing ``output`` (else ``FileExistsError``).

    Returns ``{"output", "faces_in", "faces", "vertices", "texture_size", "alpha_mode",
    "charts", "unwrap_batches", "utilization", "orphan_texels", "used_texels", "voxel_coverage",
    "voxels", "budget", "unwrap_batch_faces", "bake_chunk_texels", "predicted_peak",
    "decimation", "orientation", "seconds", "step_seconds"}`` (bytes, seconds; ``orientation``:
    ``orient.orient``'s facts; ``decimation``: ``{"method": "one call" | "pieces",
    "pieces", "twins", …}``, the pieced path's ``piece_faces`` and ``stitched`` faces too;
    ``twins``: the twin faces dropped after the decimation, ``decimate.drop_twin_faces``;
    ``voxel_coverage``: the share, 0..1, of the ``used_texels`` — those a face covers — that
    found a voxel, ``coverage.judge``: below 0.99 a ``warning`` event says so). Raises
    ``BadAsset`` (nothing read beyond the headers when the budget refuses it; the voxels and
    the mesh not lining up: from their boxes in the ``load`` step, or from the bake's coverage
    before anything is written),
    ``PiecesUnavailable`` (the budget needs the pieced decimation and pyfqmr is missing:
    refused before reading), ``ExportCancelled``, ``ValueError`` (a bad lever),
    ``FileExistsError``; no GLB is left at ``output`` unless it returns.
    """
    from bounded_export.glb import write

    start = time.perf_counter()
    levers.check()
    path, output = Path(asset), Path(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} exists; give another output or overwrite=True")
    steps = Steps(emit, cancel)
    steps.begin("load")
    plan = _plan(path, levers)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=output.parent) as work:
        loaded, mesh, normals, faces_in, decimation, orientation = _mesh_steps(
            path, levers, plan, steps, Path(work))
    baked, voxel_count, share = _texture_steps(loaded, mesh, levers, plan, steps)
    steps.begin("write")
    written = write(output, mesh.vertices, mesh.faces, mesh.uv, normals, baked.channels,
                    baked.covered)
    steps.end()
    return {"output": str(output), "faces_in": faces_in, "faces": len(mesh.faces),
            "vertices": len(mesh.vertices), "texture_size": levers.texture_size,
            "alpha_mode": written["alpha_mode"], "glb_bytes": written["bytes"],
            "charts": mesh.charts, "unwrap_batches": mesh.batches,
            "utilization": round(mesh.utilization, 4), "orphan_texels": baked.orphans,
            "used_texels": baked.used,
            "voxel_coverage": None if share is None else round(share, 6),
            "voxels": voxel_count, "budget": plan.budget,
            "unwrap_batch_faces": plan.unwrap_batch_faces,
            "bake_chunk_texels": plan.bake_chunk_texels, "predicted_peak": plan.peak,
            "decimation": decimation, "orientation": orientation,
            "seconds": round(time.perf_counter() - start, 3),
            "step_seconds": {k: round(v, 3) for k, v in steps.seconds.items()}}


__all__ = ["BadAsset", "ExportLevers", "export_asset"]
