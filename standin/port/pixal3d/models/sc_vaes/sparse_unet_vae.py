"""Texture SLat decoder (stand-in for ``SparseUnetVaeDecoder``): tokens -> 6 PBR channels in
[-1, 1] (base colour 3, metallic, roughness, alpha), guided by the shape decoder's ``subs``.

``SparseConvNeXtBlock3d`` mirrors the real block's names and order (TRELLIS.2
``trellis2/models/sc_vaes/sparse_unet_vae.py``): ``conv`` → ``norm`` (``LayerNorm32``) → ``mlp``
(Linear → SiLU → Linear, ``mlp_ratio`` 4) → plus the input. The real decoders run these at
every level, ~6.3 M voxels at the finest, one pass each: the MLP's hidden rows are 4× the
channels, in fp32. The stand-in's ``conv`` is a per-token Linear (the real one is a sparse 3×3×3
convolution over neighbours, whose working memory is not what this stand-in measures). The
stand-in weights have no blocks (``num_blocks=0``) unless a test or bench asks for them.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...modules.norm import LayerNorm32
from ._vae_common import add_ballast


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
        return slat.replace(torch.tanh(self.out(h.feats) + 1e-3 * self.ballast.mean()))
