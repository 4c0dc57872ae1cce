"""Texture SLat decoder (stand-in for ``SparseUnetVaeDecoder``): tokens -> 6 PBR channels in
[-1, 1] (base colour 3, metallic, roughness, alpha), guided by the shape decoder's ``subs``.

``SparseConvNeXtBlock3d`` mirrors the real block's names and order (TRELLIS.2
``trellis2/models/sc_vaes/sparse_unet_vae.py``): ``conv`` → ``norm`` (``LayerNorm32``) → ``mlp``
(Linear → SiLU → Linear, ``mlp_ratio`` 4) → plus the input. The real decoders run these at
every level, ~6.3 M voxels at the finest, one pass each: the MLP's hidden rows are 4× the
channels, in fp32. The stand-in's ``conv`` is a per-token Linear (the real one is a sparse 3×3×3
convolution over neighbours, whose working memory is not what this stand-in measures). The
stand-in weights have no blocks (``num_blocks=0``) unless a test or bench asks for them.

As the real decoder (TRELLIS.2's sparse U-Net VAE, 16x spatial downsampling: four 2x
upsampling blocks whose subdivisions the shape decoder's ``subs`` guide), the output voxels
lie on the full grid — ``coords`` are 16 x the latent grid's, the grid ``decode_latent``
declares with ``voxel_size = 1 / resolution`` — and only near the surface. The stand-in's
surface is the boundary of the occupied latent cells (``voxel_surface_to_mesh`` of the shape
decoder's occupancy, the same ``subs`` logit threshold), so the voxels are one layer of fine
cells inside each exposed face of an occupied cell (16 x 16 per face), each with its token's
features (after the blocks, which run on the tokens): a thin shell, as the real decoder's
voxels are, on the grid they declare.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...modules.norm import LayerNorm32
from ._vae_common import add_ballast

UPSAMPLE = 16           # four 2x blocks, as the real decoder
OCCUPIED_LOGIT = -2.0   # the shape decoder's threshold for an occupied latent cell


class SparseConvNeXtBlock3d(nn.Module):
    def __init__(self, channels: int, mlp_ratio: float = 4.0, use_checkpoint: bool = False):
        super().__init__()
        self.channels = channels
        self.use_checkpoint = use_checkpoint
        self.norm = LayerNorm32(channels, elementwise_affine=True, eps=1e-6)
        self.conv = nn.Linear(channels, channels)
        self.mlp = nn.Sequential(
            nn.Linear(channels, int(channels * mlp_ratio)),
            nn.SiLU(),
            nn.Linear(int(channels * mlp_ratio), channels),
        )
        nn.init.zeros_(self.mlp[2].weight)  # the real block zero-initialises its last layer
        nn.init.zeros_(self.mlp[2].bias)

    def _forward(self, x):
        h = x.replace(self.conv(x.feats))
        h = h.replace(self.norm(h.feats))
        h = h.replace(self.mlp(h.feats))
        return h + x

    def forward(self, x):
        return self._forward(x)


class SparseUnetVaeDecoder(nn.Module):
    def __init__(self, latent_channels=8, model_channels=16, out_channels=6, num_blocks=0,
                 ballast_numel=1):
        super().__init__()
        self.inp = nn.Linear(latent_channels + 1, model_channels)
        self.blocks = nn.ModuleList([SparseConvNeXtBlock3d(model_channels)
                                     for _ in range(num_blocks)])
        self.out = nn.Linear(model_channels, out_channels)
        add_ballast(self, ballast_numel)

    def forward(self, slat, guide_subs=None):
        guide = guide_subs[0].feats if guide_subs else torch.zeros_like(slat.feats[:, :1])
        h = slat.replace(F.gelu(self.inp(torch.cat([slat.feats, guide], dim=1))))
        for block in self.blocks:
            h = block(h)
        feats = torch.tanh(self.out(h.feats) + 1e-3 * self.ballast.mean())
        occupied = guide[:, 0] > OCCUPIED_LOGIT if guide_subs else torch.ones_like(guide[:, 0],
                                                                                   dtype=bool)
        rows, fine = _surface_shell(slat.coords, occupied)
        return type(slat)(feats=feats[rows.to(feats.device)], coords=fine.to(slat.coords.device))



def _surface_shell(coords: torch.Tensor, occupied: torch.Tensor):
    """The fine voxels (on the ``UPSAMPLE`` x finer grid) just inside every exposed face of
    the occupied latent cells: (token row of each, int64 [M], coords int32 [M, 4] = batch,
    x, y, z), unique, in (batch, x, y, z) order. numpy: one int64 key per fine voxel."""
    c = coords.detach().cpu().numpy().astype(np.int64)
    rows_all = np.flatnonzero(occupied.detach().cpu().numpy())
    cells = c[rows_all]
    if not len(cells):
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, 4, dtype=torch.int32)
    size = int(cells[:, 1:].max()) + 3
    occ = np.zeros((int(cells[:, 0].max()) + 1, size, size, size), dtype=bool)
    occ[cells[:, 0], cells[:, 1] + 1, cells[:, 2] + 1, cells[:, 3] + 1] = True
    span = size * UPSAMPLE  # fine cells a side of the key's box
    k = np.arange(UPSAMPLE)
    keys, rows = [], []
    for axis in range(3):
        u, v = [a for a in range(3) if a != axis]
        for sign in (1, -1):
            nb = cells[:, 1:] + 1
            nb[:, axis] += sign
            exposed = ~occ[cells[:, 0], nb[:, 0], nb[:, 1], nb[:, 2]]
            fine = np.repeat(cells[exposed][:, None, :], UPSAMPLE * UPSAMPLE, axis=1)
            fine[:, :, 1:] *= UPSAMPLE
            fine[:, :, 1 + axis] += UPSAMPLE - 1 if sign > 0 else 0
            fine[:, :, 1 + u] += np.repeat(k, UPSAMPLE)
            fine[:, :, 1 + v] += np.tile(k, UPSAMPLE)
            fine = fine.reshape(-1, 4)
            keys.append(((fine[:, 0] * span + fine[:, 1]) * span + fine[:, 2]) * span
                        + fine[:, 3])
            rows.append(np.repeat(rows_all[exposed], UPSAMPLE * UPSAMPLE))
    keys, first = np.unique(np.concatenate(keys), return_index=True)
    rows = np.concatenate(rows)[first]
    out = np.stack([keys // span ** 3, keys // span ** 2 % span, keys // span % span,
                    keys % span], axis=1)
    return torch.from_numpy(rows), torch.from_numpy(out.astype(np.int32))
