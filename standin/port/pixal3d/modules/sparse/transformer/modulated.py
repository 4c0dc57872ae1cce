"""Stand-in of ``pixal3d.modules.sparse.transformer.modulated``:
``ModulatedSparseTransformerCrossBlock`` — ``self_attn`` (full self-attention over the sparse
tokens), ``cross_attn`` (to the image's global tokens) and ``mlp``, each after a
``LayerNorm32`` and added to the tokens (the real block also modulates them by the time step;
left out here, it holds no working memory of note)."""
from typing import *

import torch.nn as nn

from ...norm import LayerNorm32
from .. import SparseTensor
from ..attention import SparseMultiHeadAttention

__all__ = ['ModulatedSparseTransformerCrossBlock']


class ModulatedSparseTransformerCrossBlock(nn.Module):
    def __init__(self, channels: int, ctx_channels: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.norm1 = LayerNorm32(channels, elementwise_affine=False, eps=1e-6)
        self.norm2 = LayerNorm32(channels, elementwise_affine=True, eps=1e-6)
        self.norm3 = LayerNorm32(channels, elementwise_affine=False, eps=1e-6)
        self.self_attn = SparseMultiHeadAttention(channels, num_heads, type="self")
        self.cross_attn = SparseMultiHeadAttention(channels, num_heads, ctx_channels,
                                                   type="cross")
        hidden = int(channels * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(channels, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, channels))

    def forward(self, x: SparseTensor, context) -> SparseTensor:
        x = x + self.self_attn(x.replace(self.norm1(x.feats)))
        x = x + self.cross_attn(x.replace(self.norm2(x.feats)), context)
        return x + x.replace(self.mlp(self.norm3(x.feats)))
