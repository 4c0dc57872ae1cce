"""Shape SLat decoder (stand-in for ``FlexiDualGridVaeDecoder``): ``upsample`` for the cascade,
``set_resolution`` and ``forward(slat, return_subs=True)`` -> (meshes, subs), its tokens
through ``SparseConvNeXtBlock3d`` blocks first, as the real decoder's; each mesh carries
the ``fdg_coords``/``fdg_dual_vertices``/``fdg_intersected``/``fdg_split_weight`` tensors its
extraction started from, as the real decoder sets them."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...modules.sparse import SparseTensor
from ...representations import Mesh

# bound to the name the real decoder module calls its mesh extraction by (fdg_vae.py imports
# flexible_dual_grid_to_mesh): hooks on that module attribute mark where extraction begins
from ...utils.mesh_extract import voxel_surface_to_mesh as flexible_dual_grid_to_mesh
from ._vae_common import add_ballast
from .sparse_unet_vae import SparseConvNeXtBlock3d


class FlexiDualGridVaeDecoder(nn.Module):
    def __init__(self, latent_channels=8, model_channels=16, num_blocks=0, ballast_numel=1):
        super().__init__()
        self.inp = nn.Linear(latent_channels, model_channels)
        self.blocks = nn.ModuleList([SparseConvNeXtBlock3d(model_channels)
                                     for _ in range(num_blocks)])
        self.children_logits = nn.Linear(model_channels, 8)
        self.subdiv = nn.Linear(model_channels, 1)
        add_ballast(self, ballast_numel)
        self.resolution = 1024
        self.low_vram = False

    def set_resolution(self, resolution):
        self.resolution = resolution

    def upsample(self, slat, upsample_times=4):
        """LR tokens (grid 32, units of 16 in a 512 grid) -> HR coords [M, 4] in 512 units.

        Each token may split into its 8 children at grid 64 (kept where a learned logit > -1);
        the result is expressed in the 512-voxel frame the pipeline quantises from.
        """
        h = F.gelu(self.inp(slat.feats)) + 1e-3 * self.ballast.mean()
        keep = self.children_logits(h) > -1.0  # [N, 8]
        offsets = torch.tensor([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)],
                               device=slat.coords.device)
        idx, child = torch.nonzero(keep, as_tuple=True)
        parent = slat.coords[idx]
        xyz = parent[:, 1:].long() * 2 + offsets[child]
        scale = 512 // 64
        hr = torch.cat([parent[:, :1].long(), xyz * scale + scale // 2], dim=1)
        return hr.int()

    def forward(self, slat, return_subs=False):
        h = slat.replace(F.gelu(self.inp(slat.feats)) + 1e-3 * self.ballast.mean())
        for block in self.blocks:  # SparseConvNeXtBlock3d: LayerNorm32 and the hidden MLP rows
            h = block(h)
        h = h.feats
        logit = self.subdiv(h)[:, 0]
        grid = self.resolution // 16
        meshes = []
        for b in range(slat.shape[0]):
            sel = (slat.coords[:, 0] == b) & (logit > -2.0)
            occ = torch.zeros(grid, grid, grid, dtype=torch.bool)
            c = slat.coords[sel][:, 1:].long().clamp(0, grid - 1).cpu()
            occ[c[:, 0], c[:, 1], c[:, 2]] = True
            vertices, faces = flexible_dual_grid_to_mesh(occ)
            mesh = Mesh(vertices.to(slat.device), faces.to(slat.device))
            # the flexible-dual-grid inputs of the extraction, kept on the mesh as the real
            # decoder's forward does (the port's export and --save-mesh write them out)
            mesh.fdg_coords = slat.coords[sel][:, 1:].int()
            mesh.fdg_dual_vertices = torch.sigmoid(h[sel][:, :3])
            mesh.fdg_intersected = (h[sel][:, 3:6] > 0)
            mesh.fdg_split_weight = F.softplus(h[sel][:, 6:7])
            meshes.append(mesh)
        subs = [SparseTensor(feats=logit[:, None], coords=slat.coords)]
        return (meshes, subs) if return_subs else meshes
