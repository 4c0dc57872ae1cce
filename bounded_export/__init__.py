"""The bounded export engine: the port's saved asset (``save_mesh_checkpoint`` ``.npz``) →
textured glTF 2.0 PBR GLB on the CPU, within a memory budget, with no port code and no torch
(numpy, SciPy, trimesh, Pillow, fast-simplification, xatlas — the extension bundles them, so it
runs in Blender's own Python).

Public API (stable; the runner, ``python -m runner export`` and the benchmark use it)::

    from bounded_export import export_asset, ExportLevers, BadAsset, ExportCancelled
    info = export_asset("character.asset.npz", "character.glb",
                        ExportLevers(decimation_target=1_000_000, texture_size=2048,
                                     budget=2 << 30),
                        emit=print, cancel=threading.Event())

One module per idea: ``asset`` (load and validate), ``budget`` (the memory model and piece
sizes), ``steps`` (sub-step events, progress, cancel), ``cleanup``, ``orient`` (faces wound
consistently and outward: the port's extraction winds about half inward), ``decimate`` (with
``stoppable``: a library call in a killable child process), ``unwrap`` (xatlas in batches and
our shelf packer), ``raster`` (UV rasterisation in chunks), ``voxels`` (the sorted-key sparse
trilinear sample), ``bake``, ``coverage`` (do the voxels line up with the mesh: their boxes
before the bake, the share of used texels that found a voxel after it), ``seams``, ``glb``;
``engine`` runs them in order.

Not done: the port's remesh (dual contouring at the grid), its hole filling and its BVH
projection of texels onto the full mesh (see ``bake``); the engine exports the cleaned,
decimated input surface.
"""
from bounded_export.engine import (
           DEFAULT_DECIMATION_TARGET,
           DEFAULT_TEXTURE_SIZE,
           TEXTURE_SIZES,
           ExportLevers,
           export_asset,
)
from bounded_export.errors import BadAsset, ExportCancelled
from bounded_export.steps import SUBSTEPS

__all__ = ["DEFAULT_DECIMATION_TARGET", "DEFAULT_TEXTURE_SIZE", "SUBSTEPS", "TEXTURE_SIZES",
           "BadAsset", "ExportCancelled", "ExportLevers", "export_asset"]
