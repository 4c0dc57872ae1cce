"""Dense flow model for the sparse-structure latent [B, C, R, R, R] (stand-in, tiny)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import TimeEmbed, ballast


class SparseStructureFlowModel(nn.Module):
    def __init__(self, resolution=16, in_channels=8, model_channels=16, cond_channels=16,
                 proj_channels=16, ballast_numel=1):
        super().__init__()
        self.resolution = resolution
        self.in_channels = in_channels
        self.inp = nn.Linear(in_channels, model_channels)
        self.cond = nn.Linear(cond_channels, model_channels)
        self.proj = nn.Linear(proj_channels, model_channels)
        self.t_embed = TimeEmbed(model_channels)
        self.out = nn.Linear(model_channels, in_channels)
        self.ballast = ballast(ballast_numel)

    def forward(self, x, t, cond, **kwargs):
        b, c, r = x.shape[0], x.shape[1], x.shape[2]
        h = self.inp(x.permute(0, 2, 3, 4, 1))  # [B, R, R, R, M]
        h = h + self.cond(cond['global'].mean(1))[:, None, None, None] + self.t_embed(t)[:, None, None, None]
        proj = cond['proj']
        if proj.shape[1] == r ** 3:
            h = h + self.proj(proj.reshape(b, r, r, r, -1))
        out = self.out(F.gelu(h)) + 1e-3 * self.ballast.mean()
        return out.permute(0, 4, 1, 2, 3)
