"""Sparse flow model over ``SparseTensor`` tokens (shape and texture SLat, stand-in).

Its tokens go through ``blocks`` of ``ModulatedSparseTransformerCrossBlock`` (self-attention
over all tokens through the port's ``sparse_scaled_dot_product_attention``, cross-attention to
the image's global tokens, an MLP), as the real ``SLatFlowModel``'s 30 blocks do. The stand-in
weights have none (``num_blocks=0``): full self-attention over the stand-in's ~10,000
high-resolution tokens costs tens of seconds per call on this project's CPU, so the pipeline
tests stay fast and their latents unchanged; a test or bench that measures the attention
builds blocks (``num_blocks``, ``num_heads``)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..modules.sparse.transformer import ModulatedSparseTransformerCrossBlock
from ._common import RotaryFreqs, TimeEmbed, add_ballast


class SLatFlowModel(nn.Module):
    def __init__(self, resolution=64, in_channels=8, out_channels=8, model_channels=16,
                 cond_channels=16, proj_channels=32, num_heads=2, num_blocks=0,
                 ballast_numel=1):
        super().__init__()
        self.resolution = resolution
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.inp = nn.Linear(in_channels, model_channels)
        self.cond = nn.Linear(cond_channels, model_channels)
        self.proj = nn.Linear(proj_channels, model_channels)
        self.t_embed = TimeEmbed(model_channels)
        self.blocks = nn.ModuleList([
            ModulatedSparseTransformerCrossBlock(model_channels, cond_channels, num_heads)
            for _ in range(num_blocks)])
        self.out = nn.Linear(model_channels, out_channels)
        self.rope = RotaryFreqs(model_channels)  # plain tensor attribute, as the real model's RoPE
        add_ballast(self, ballast_numel)

    def forward(self, x, t, cond, concat_cond=None, **kwargs):
        feats = x.feats
        if concat_cond is not None:
            feats = torch.cat([feats, concat_cond.feats], dim=1)
        h = self.inp(feats) + self.cond(cond['global'].mean(1)) + self.t_embed(t)
        h = h + self.proj(cond['proj'].feats) + 1e-2 * self.rope.phase(x.coords[:, 1:])
        h = x.replace(h)
        for block in self.blocks:
            h = block(h, cond['global'])
        return x.replace(self.out(F.gelu(h.feats)) + 1e-3 * self.ballast.mean())
