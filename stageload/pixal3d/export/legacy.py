"""The 0578f857-shaped path: ports whose ``generate_mps.py`` has no ``load_pipeline`` /
``image_to_asset`` / ``asset_to_glb`` entry points, driven through the steps their ``main()``
inlines, step for step."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class LegacyAsset:
    """What 0578f857's ``main()`` hands from generation to export (0be9e69a: its
    ``Pixal3DAsset``)."""
    mesh: Any
    vertices: Any
    faces: Any
    resolution: int
    has_voxels: bool


def legacy_image_to_asset(run, image, args) -> LegacyAsset:
    """0578f857's ``main()`` between ``init_pipeline`` and the export: preprocess, the camera
    (``run.camera_params``), the seeded ``pipeline.run``; ``run`` is the ``adapter.Pixal3DRun``
    and ``args`` the port's namespace."""
    preprocessed = run.pipeline.preprocess_image(image)
    camera = run.camera_params(preprocessed, fov=args.fov, mesh_scale=args.mesh_scale,
                               extend_pixel=args.extend_pixel,
                               image_resolution=args.image_resolution)
    torch.manual_seed(args.seed)
    gm = run.gm
    meshes, (_shape, _tex, resolution) = run.pipeline.run(
        preprocessed, camera_params=camera, seed=args.seed,
        sparse_structure_sampler_params=gm.sampler_overrides(args, "ss"),
        shape_slat_sampler_params=gm.sampler_overrides(args, "shape"),
        tex_slat_sampler_params=gm.sampler_overrides(args, "tex"), preprocess_image=False,
        return_latent=True, pipeline_type=run.pipeline_type, max_num_tokens=args.max_num_tokens)
    mesh = meshes[0]
    has_voxels = (getattr(mesh, "attrs", None) is not None
                  and getattr(mesh, "coords", None) is not None)
    return LegacyAsset(mesh, mesh.vertices.detach().cpu().numpy(),
                       mesh.faces.detach().cpu().numpy(), int(resolution), has_voxels)


def legacy_export(gm, asset, output: Path, args) -> None:
    """0578f857's ``main()`` export: geometry only / native o_voxel / fallback baker."""
    if args.no_texture or not asset.has_voxels:
        gm.export_geometry_only(asset.vertices, asset.faces, output)
    elif not gm.try_export_native_o_voxel_glb(asset.mesh, asset.resolution, asset.vertices,
                                              asset.faces, output, args):
        gm.export_fallback_texture_glb(asset.mesh, asset.vertices, asset.faces, output, args)
