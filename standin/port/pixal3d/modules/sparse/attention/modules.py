"""Stand-in of ``pixal3d.modules.sparse.attention.modules`` (TRELLIS.2):
``SparseMultiHeadRMSNorm`` and ``SparseMultiHeadAttention``, whose forward calls this module's
global ``sparse_scaled_dot_product_attention`` (imported from ``full_attn``, as the real one
imports it; the product's lean working memory replaces that global here).

``SparseMultiHeadRMSNorm(dim, heads)``: ``gamma`` ``[heads, dim]``; feats ``[N, heads, dim]``
(sparse tensor or tensor) → ``normalize(x, fp32) · gamma · √dim`` in the input's dtype.

``SparseMultiHeadAttention(channels, num_heads, ctx_channels=None, type="self"|"cross",
attn_mode="full", window_size=None, shift_window=None, qkv_bias=True, use_rope=False,
rope_freq=(1.0, 10000.0), qk_rms_norm=False)``. Weights as the dense ``MultiHeadAttention``
(``to_qkv`` or ``to_q`` + ``to_kv``, ``q_rms_norm``/``k_rms_norm``, ``to_out``), plus ``rope``
(a ``SparseRotaryPositionEmbedder`` of ``C / num_heads`` channels, no weights) when
``use_rope`` (self-attention only). ``forward(x, context=None)``: x a sparse tensor of feats
``[N, C]``; self-attention: qkv ``[N, 3, H, C/H]``, with RMS norm or RoPE split, normed (q, k),
rotated by the tokens' coordinates, restacked — always the packed ``(qkv)`` form; cross-attention
to ``context`` (dense ``[B, M, ctx]`` or sparse): ``(q, k, v)`` with k normed when
``qk_rms_norm``, else ``(q, kv)``. Returns x's tokens with ``[N, C]`` feats. Windowed modes
(``windowed``, ``double_windowed``: the sparse VAEs', not the flows') raise
``NotImplementedError``.
"""
from typing import *

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import SparseTensor
from .full_attn import sparse_scaled_dot_product_attention
from .rope import SparseRotaryPositionEmbedder

__all__ = ['SparseMultiHeadRMSNorm', 'SparseMultiHeadAttention']


def _is_sparse(x) -> bool:
    return hasattr(x, 'feats') and hasattr(x, 'replace')


class SparseMultiHeadRMSNorm(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(heads, dim))

    def forward(self, x):
        feats = x.feats if _is_sparse(x) else x
        out = (F.normalize(feats.float(), dim=-1) * self.gamma * self.scale).to(feats.dtype)
        return x.replace(out) if _is_sparse(x) else out


class SparseMultiHeadAttention(nn.Module):
    def __init__(self, channels: int, num_heads: int, ctx_channels: Optional[int] = None,
                 type: Literal["self", "cross"] = "self",
                 attn_mode: Literal["full", "windowed", "double_windowed"] = "full",
                 window_size: Optional[int] = None,
                 shift_window: Optional[Tuple[int, int, int]] = None, qkv_bias: bool = True,
                 use_rope: bool = False, rope_freq: Tuple[float, float] = (1.0, 10000.0),
                 qk_rms_norm: bool = False):
        super().__init__()
        assert channels % num_heads == 0
        assert type in ("self", "cross"), f"Invalid attention type: {type}"
        assert attn_mode in ("full", "windowed", "double_windowed"), \
            f"Invalid attention mode: {attn_mode}"
        assert type == "self" or attn_mode == "full", "Cross-attention only supports full attention"
        assert type == "self" or use_rope is False, \
            "Rotary position embeddings only supported for self-attention"
        self.channels = channels
        self.head_dim = channels // num_heads
        self.ctx_channels = ctx_channels if ctx_channels is not None else channels
        self.num_heads = num_heads
        self._type = type
        self.attn_mode = attn_mode
        self.window_size = window_size
        self.shift_window = shift_window
        self.use_rope = use_rope
        self.qk_rms_norm = qk_rms_norm
        if type == "self":
            self.to_qkv = nn.Linear(channels, channels * 3, bias=qkv_bias)
        else:
            self.to_q = nn.Linear(channels, channels, bias=qkv_bias)
            self.to_kv = nn.Linear(self.ctx_channels, channels * 2, bias=qkv_bias)
        if qk_rms_norm:
            self.q_rms_norm = SparseMultiHeadRMSNorm(self.head_dim, num_heads)
            self.k_rms_norm = SparseMultiHeadRMSNorm(self.head_dim, num_heads)
        self.to_out = nn.Linear(channels, channels)
        if use_rope:
            self.rope = SparseRotaryPositionEmbedder(self.head_dim, rope_freq=rope_freq)

    def _self(self, x: SparseTensor) -> SparseTensor:
        if self.attn_mode != "full":
            raise NotImplementedError(f"{self.attn_mode} attention is not in the stand-in "
                                      f"(the flow models use full attention)")
        qkv = x.replace(self.to_qkv(x.feats).reshape(x.feats.shape[0], 3, self.num_heads, -1))
        if self.qk_rms_norm or self.use_rope:
            q, k, v = (x.replace(t) for t in qkv.feats.unbind(dim=-3))
            if self.qk_rms_norm:
                q, k = self.q_rms_norm(q), self.k_rms_norm(k)
            if self.use_rope:
                q, k = self.rope(q, k)
            qkv = qkv.replace(torch.stack([q.feats, k.feats, v.feats], dim=1))
        return sparse_scaled_dot_product_attention(qkv)

    def _cross(self, x: SparseTensor, context) -> SparseTensor:
        q = x.replace(self.to_q(x.feats).reshape(x.feats.shape[0], self.num_heads, -1))
        if _is_sparse(context):
            kv = context.replace(self.to_kv(context.feats).reshape(
                context.feats.shape[0], 2, self.num_heads, -1))
            kv_feats = kv.feats
        else:
            kv = self.to_kv(context).reshape(*context.shape[:2], 2, self.num_heads, -1)
            kv_feats = kv
        if not self.qk_rms_norm:
            return sparse_scaled_dot_product_attention(q, kv)
        k, v = kv_feats.unbind(dim=-3)
        if _is_sparse(context):
            k, v = context.replace(k), context.replace(v)
        return sparse_scaled_dot_product_attention(self.q_rms_norm(q), self.k_rms_norm(k), v)

    def forward(self, x: SparseTensor, context=None) -> SparseTensor:
        h = self._self(x) if self._type == "self" else self._cross(x, context)
        return h.replace(self.to_out(h.feats.reshape(h.feats.shape[0], -1)))
