"""Texture SLat decoder (stand-in for ``SparseUnetVaeDecoder``): tokens -> 6 PBR channels in
[-1, 1] (base colour 3, metallic, roughness, alpha), guided by the shape decoder's ``subs``."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._vae_common import add_ballast


class SparseUnetVaeDecoder(nn.Module):
    def __init__(self, latent_channels=8, model_channels=16, out_channels=6, ballast_numel=1):
        super().__init__()
        self.inp = nn.Linear(latent_channels + 1, model_channels)
        self.out = nn.Linear(model_channels, out_channels)
        add_ballast(self, ballast_numel)

    def forward(self, slat, guide_subs=None):
        guide = guide_subs[0].feats if guide_subs else torch.zeros_like(slat.feats[:, :1])
        h = F.gelu(self.inp(torch.cat([slat.feats, guide], dim=1)))
        return slat.replace(torch.tanh(self.out(h) + 1e-3 * self.ballast.mean()))
