"""The body of a lean ``get_proj_cond_shape`` pass (see :mod:`.conditioning`): the port's
steps in the port's order — move the extractor when ``low_vram``, the pass's grid resolution, the
extractor's own ``forward``, the active voxels' features as a ``SparseTensor`` with zeros for
``neg_cond``, the extractor back to the CPU — with the extractor's ``proj_grid`` and
``naf_model`` swapped for the lean stand-ins for the duration of its ``forward`` (the port
itself swaps ``proj_grid`` around a pass the same way).

The port's ``PIXAL3D_PROJ_GRID_DEVICE`` switch keeps a copy of the extractor's ``proj_grid`` as
``_proj_grid_alt`` (made on first use, reused while its device matches): during a lean pass that
copy would be made of the restricted grid and outlive the pass, so the extractor's own is put
aside for the pass (the port then copies the restricted grid for this pass only) and put back
after it. With either device switch set the port moves NAF's output, so the pass hands it the
whole map at once, computed in bands (``LazyNAF(whole=…)``, a ``warning``), the projection still
at the active voxels."""
from __future__ import annotations

import sys

import torch

from stageload.pixal3d.lean import checks
from stageload.pixal3d.lean.sampled import LazyNAF, SampledProjGrid

#: The port's copy of ``proj_grid`` for ``PIXAL3D_PROJ_GRID_DEVICE`` (809cf5f5).
ALT_GRID = "_proj_grid_alt"


def lean_cond_shape(pipeline, extractor, image, coords, camera_angle_x, distance, mesh_scale,
                    grid_resolution_override=None, sink=None) -> dict:
    """``{"cond": {"global", "proj"}, "neg_cond": {...}}`` as the port's
    ``get_proj_cond_shape`` returns it, ``proj`` holding ``[N, proj_channels]`` features at
    ``coords`` ``[N, 4]`` (batch 0)."""
    device = pipeline.device
    low_vram = bool(getattr(pipeline, "low_vram", False))
    if low_vram:
        extractor.to(device)
    resolution = extractor.grid_resolution if grid_resolution_override is None \
        else int(grid_resolution_override)
    c = coords.long()
    flat = (c[:, 1] * resolution + c[:, 2]) * resolution + c[:, 3]
    port_grid = extractor.proj_grid
    grid = type(port_grid)(grid_resolution=resolution,
                           image_resolution=port_grid.image_resolution).to(device)
    kept = (extractor.grid_resolution, port_grid, getattr(extractor, "naf_model", None))
    alt = (hasattr(extractor, ALT_GRID), getattr(extractor, ALT_GRID, None))
    try:
        extractor.grid_resolution = resolution
        extractor.proj_grid = SampledProjGrid(grid, flat)
        if alt[0]:
            setattr(extractor, ALT_GRID, None)
        if getattr(extractor, "use_naf_upsample", False):
            switches = checks.device_switches()
            whole = (f"{' and '.join(switches)}: the port moves NAF's output between devices"
                     if switches else None)
            extractor.naf_model = LazyNAF(kept[2], sink, whole=whole)
        z_global, z_proj = extractor(
            image, camera_angle_x=torch.tensor([camera_angle_x], device=device),
            distance=torch.tensor([distance], device=device),
            mesh_scale=torch.tensor([mesh_scale], device=device))
    finally:
        extractor.grid_resolution, extractor.proj_grid = kept[:2]
        if hasattr(extractor, "naf_model"):  # a port without NAF may have no such attribute
            extractor.naf_model = kept[2]
        if alt[0]:
            setattr(extractor, ALT_GRID, alt[1])
        elif hasattr(extractor, ALT_GRID):
            delattr(extractor, ALT_GRID)
    feats = z_proj[0]
    if low_vram:
        extractor.cpu()
    sparse = sys.modules[type(pipeline).__module__].SparseTensor
    return {"cond": {"global": z_global, "proj": sparse(feats=feats, coords=coords)},
            "neg_cond": {"global": torch.zeros_like(z_global),
                         "proj": sparse(feats=torch.zeros_like(feats), coords=coords)}}
