"""Dense flow model for the sparse-structure latent [B, C, R, R, R] (stand-in, tiny)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import TimeEmbed, add_ballast


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
        # a position table computed in __init__ on the device of the parameters, registered as
        # a (persistent) buffer and so saved in the checkpoint, as the real model's pos_emb
        axis = torch.arange(resolution, dtype=torch.float32,
                            device=self.inp.weight.device) / resolution
        grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing='ij'), dim=-1)  # [R, R, R, 3]
        freqs = torch.arange(1, model_channels + 1, dtype=torch.float32,
                             device=self.inp.weight.device)
        # [R, R, R, M]
        self.register_buffer('pos_emb', torch.sin(grid.sum(-1, keepdim=True) * freqs))
        add_ballast(self, ballast_numel)

    def forward(self, x, t, cond, **kwargs):
        b, r = x.shape[0], x.shape[2]
        h = self.inp(x.permute(0, 2, 3, 4, 1)) + 1e-2 * self.pos_emb  # [B, R, R, R, M]
        h = h + self.cond(cond['global'].mean(1))[:, None, None, None] + self.t_embed(t)[:, None,
                                                                                         None, None]
        proj = cond['proj']
        if proj.shape[1] == r ** 3:
            h = h + self.proj(proj.reshape(b, r, r, r, -1))
        out = self.out(F.gelu(h)) + 1e-3 * self.ballast.mean()
        return out.permute(0, 4, 1, 2, 3)
