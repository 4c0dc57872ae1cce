"""Stand-in of ``pixal3d.models.sc_vaes.fdg_vae`` (Pixal3D-mac 0be9e69a; TRELLIS.2's
``FlexiDualGridVaeDecoder`` plus the port's mesh extraction switch): the shape decoder, a
``SparseUnetVaeDecoder`` with 7 output channels and predicted subdivision, whose output becomes
flexible-dual-grid meshes.

``forward(x, return_subs=…)`` (eval): per voxel, ``dual vertex = (1 + 2·margin)·sigmoid(h[:3])
− margin`` (in voxel units), ``intersected = h[3:6] > 0`` (one flag per axis) and ``split weight
= softplus(h[6:7])``; each batch's voxels go to the module-level ``flexible_dual_grid_to_mesh``
with ``aabb`` [−0.5, 0.5]³ and ``grid_size = self.resolution`` (``set_resolution``); each mesh
keeps those four tensors as ``fdg_coords`` / ``fdg_dual_vertices`` / ``fdg_intersected`` /
``fdg_split_weight``, as the port's decoder does. ``flexible_dual_grid_to_mesh`` is this
module's own name (as in the port), so a hook on this module attribute sees every extraction:
native o_voxel for CUDA tensors when it imports, else ``pixal3d.utils.mesh_extract``'s
pure-PyTorch one (the Mac's path, and the stand-in's: its ``o_voxel`` has no ``convert``).
"""
from typing import *

import torch
import torch.nn.functional as F

from ...representations import Mesh
from ...utils.mesh_extract import flexible_dual_grid_to_mesh as _torch_flexible_dual_grid_to_mesh
from .sparse_unet_vae import SparseUnetVaeDecoder

try:
    from o_voxel.convert import flexible_dual_grid_to_mesh as _native_flexible_dual_grid_to_mesh
except (ImportError, RuntimeError, OSError):
    _native_flexible_dual_grid_to_mesh = None


def flexible_dual_grid_to_mesh(*args, **kwargs):
    """The extraction the decoder calls: native o_voxel for CUDA coords when it imports, else
    the pure-PyTorch one (same arguments; returns (vertices [V, 3], faces [F, 3]))."""
    coords = args[0] if args else kwargs.get('coords')
    if (_native_flexible_dual_grid_to_mesh is not None and isinstance(coords, torch.Tensor)
            and coords.device.type == 'cuda'):
        return _native_flexible_dual_grid_to_mesh(*args, **kwargs)
    return _torch_flexible_dual_grid_to_mesh(*args, **kwargs)


class FlexiDualGridVaeDecoder(SparseUnetVaeDecoder):
    def __init__(self, resolution: int, model_channels: List[int], latent_channels: int,
                 num_blocks: List[int], block_type: List[str], up_block_type: List[str],
                 block_args: List[Dict[str, Any]], voxel_margin: float = 0.5,
                 use_fp16: bool = False):
        self.resolution = resolution
        self.voxel_margin = voxel_margin
        super().__init__(7, model_channels, latent_channels, num_blocks, block_type,
                         up_block_type, block_args, use_fp16)

    def set_resolution(self, resolution: int) -> None:
        self.resolution = resolution

    def forward(self, x, gt_intersected=None, **kwargs):
        """x: shape latent ``SparseTensor``. Returns the list of ``Mesh`` (one per batch), and
        the subdivision logits too when ``return_subs=True``. Training mode is not mirrored."""
        if self.training:
            raise NotImplementedError("the stand-in decoder mirrors inference only")
        decoded = super().forward(x, **kwargs)
        out_list = list(decoded) if isinstance(decoded, tuple) else [decoded]
        h = out_list[0]
        vertices = h.replace((1 + 2 * self.voxel_margin) * F.sigmoid(h.feats[..., 0:3])
                             - self.voxel_margin)
        intersected = h.replace(h.feats[..., 3:6] > 0)
        quad_lerp = h.replace(F.softplus(h.feats[..., 6:7]))
        meshes = []
        for v, i, q in zip(vertices, intersected, quad_lerp, strict=True):
            fdg_coords = v.coords[:, 1:]
            mesh = Mesh(*flexible_dual_grid_to_mesh(
                fdg_coords, v.feats, i.feats, q.feats,
                aabb=[[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]], grid_size=self.resolution,
                train=False))
            mesh.fdg_coords = fdg_coords
            mesh.fdg_dual_vertices = v.feats
            mesh.fdg_intersected = i.feats
            mesh.fdg_split_weight = q.feats
            meshes.append(mesh)
        out_list[0] = meshes
        return out_list[0] if len(out_list) == 1 else tuple(out_list)
