"""Decoder of the sparse-structure latent to occupancy logits [B, 1, 4R, 4R, 4R] (stand-in).

A centred-blob prior keeps the occupied set small and non-empty (a few thousand voxels at 32^3),
so the later sparse stages stay fast; the learned part moves its surface.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import add_ballast


class SparseStructureDecoder(nn.Module):
    def __init__(self, latent_channels=8, model_channels=8, radius=0.2, ballast_numel=1):
        super().__init__()
        self.inp = nn.Conv3d(latent_channels, model_channels, 1)
        self.out = nn.Conv3d(model_channels, 1, 1)
        self.radius = radius
        add_ballast(self, ballast_numel)

    def forward(self, z):
        h = F.interpolate(self.out(F.gelu(self.inp(z))), scale_factor=4, mode='nearest')
        r = h.shape[-1]
        axis = (torch.arange(r, dtype=torch.float32, device=z.device) + 0.5) / r - 0.5
        x, y, w = torch.meshgrid(axis, axis, axis, indexing='ij')
        dist = torch.sqrt(x * x + y * y + w * w)
        return 20.0 * (self.radius - dist) + 0.5 * torch.tanh(h) + 1e-3 * self.ballast.mean()
