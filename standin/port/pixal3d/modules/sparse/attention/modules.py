"""Stand-in of ``pixal3d.modules.sparse.attention.modules``: ``SparseMultiHeadAttention``,
whose forward calls this module's global ``sparse_scaled_dot_product_attention`` (imported
from ``full_attn``, as the real one imports it) — self-attention with the packed ``qkv``
form, cross-attention with ``(q, kv)`` against dense context tokens."""
from typing import *

import torch.nn as nn

from .. import SparseTensor
from .full_attn import sparse_scaled_dot_product_attention

__all__ = ['SparseMultiHeadAttention']


class SparseMultiHeadAttention(nn.Module):
    def __init__(self, channels: int, num_heads: int, ctx_channels: Optional[int] = None,
                 type: Literal["self", "cross"] = "self", attn_mode: str = "full"):
        super().__init__()
        self.channels = channels
        self.num_heads = num_heads
        self._type = type
        self.attn_mode = attn_mode
        if type == "self":
            self.to_qkv = nn.Linear(channels, channels * 3)
        else:
            self.to_q = nn.Linear(channels, channels)
            self.to_kv = nn.Linear(ctx_channels, channels * 2)
        self.to_out = nn.Linear(channels, channels)

    def forward(self, x: SparseTensor, context=None) -> SparseTensor:
        tokens = x.feats.shape[0]
        if self._type == "self":
            qkv = x.replace(self.to_qkv(x.feats).reshape(tokens, 3, self.num_heads, -1))
            h = sparse_scaled_dot_product_attention(qkv)
        else:
            q = x.replace(self.to_q(x.feats).reshape(tokens, self.num_heads, -1))
            batch, length = context.shape[:2]
            kv = self.to_kv(context).reshape(batch, length, 2, self.num_heads, -1)
            h = sparse_scaled_dot_product_attention(q, kv)
        return x.replace(self.to_out(h.feats.reshape(tokens, -1)))
