"""Stand-in of ``pixal3d.modules.attention.modules`` (TRELLIS.2): ``MultiHeadRMSNorm`` and the
dense ``MultiHeadAttention`` the sparse-structure flow's blocks use.

``MultiHeadRMSNorm(dim, heads)``: ``gamma`` ``[heads, dim]`` (ones); ``x [..., heads, dim]`` →
``normalize(x, fp32) · gamma · √dim`` in ``x``'s dtype.

``MultiHeadAttention(channels, num_heads, ctx_channels=None, type="self"|"cross",
attn_mode="full", qkv_bias=True, use_rope=False, rope_freq=(1.0, 10000.0),
qk_rms_norm=False)``. Weights: self — ``to_qkv`` ``Linear(C, 3C)``; cross — ``to_q``
``Linear(C, C)`` and ``to_kv`` ``Linear(ctx, 2C)``; ``q_rms_norm``/``k_rms_norm`` when
``qk_rms_norm``; ``to_out`` ``Linear(C, C)``. ``forward(x [B, L, C], context [B, M, ctx] =
None, phases [L, C/heads/2] = None)`` → ``[B, L, C]``: heads of ``C / num_heads`` channels; with
RMS norm or RoPE the self-attention goes through ``scaled_dot_product_attention(q, k, v)`` (norm
first, then the rotation by ``phases``), else ``(qkv)``; cross-attention ``(q, k, v)`` with the
norms, else ``(q, kv)``. Windowed attention is not implemented (as in the real dense module).
"""
from typing import *

import torch
import torch.nn as nn
import torch.nn.functional as F

from .full_attn import scaled_dot_product_attention
from .rope import RotaryPositionEmbedder

__all__ = ['MultiHeadRMSNorm', 'MultiHeadAttention']


class MultiHeadRMSNorm(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(heads, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (F.normalize(x.float(), dim=-1) * self.gamma * self.scale).to(x.dtype)


class MultiHeadAttention(nn.Module):
    def __init__(self, channels: int, num_heads: int, ctx_channels: Optional[int] = None,
                 type: Literal["self", "cross"] = "self",
                 attn_mode: Literal["full", "windowed"] = "full",
                 window_size: Optional[int] = None,
                 shift_window: Optional[Tuple[int, int, int]] = None, qkv_bias: bool = True,
                 use_rope: bool = False, rope_freq: Tuple[float, float] = (1.0, 10000.0),
                 qk_rms_norm: bool = False):
        super().__init__()
        assert channels % num_heads == 0
        assert type in ("self", "cross"), f"Invalid attention type: {type}"
        assert attn_mode in ("full", "windowed"), f"Invalid attention mode: {attn_mode}"
        assert type == "self" or attn_mode == "full", "Cross-attention only supports full attention"
        if attn_mode == "windowed":
            raise NotImplementedError("Windowed attention is not yet implemented")
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
            self.q_rms_norm = MultiHeadRMSNorm(self.head_dim, num_heads)
            self.k_rms_norm = MultiHeadRMSNorm(self.head_dim, num_heads)
        self.to_out = nn.Linear(channels, channels)

    def _self(self, x: torch.Tensor, phases: Optional[torch.Tensor]) -> torch.Tensor:
        B, L, _ = x.shape
        qkv = self.to_qkv(x).reshape(B, L, 3, self.num_heads, -1)
        if not (self.qk_rms_norm or self.use_rope):
            return scaled_dot_product_attention(qkv)
        q, k, v = qkv.unbind(dim=2)
        if self.qk_rms_norm:
            q, k = self.q_rms_norm(q), self.k_rms_norm(k)
        if self.use_rope:
            assert phases is not None, "Phases must be provided for RoPE"
            q = RotaryPositionEmbedder.apply_rotary_embedding(q, phases)
            k = RotaryPositionEmbedder.apply_rotary_embedding(k, phases)
        return scaled_dot_product_attention(q, k, v)

    def _cross(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q = self.to_q(x).reshape(B, L, self.num_heads, -1)
        kv = self.to_kv(context).reshape(B, context.shape[1], 2, self.num_heads, -1)
        if not self.qk_rms_norm:
            return scaled_dot_product_attention(q, kv)
        k, v = kv.unbind(dim=2)
        return scaled_dot_product_attention(self.q_rms_norm(q), self.k_rms_norm(k), v)

    def forward(self, x: torch.Tensor, context: Optional[torch.Tensor] = None,
                phases: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self._self(x, phases) if self._type == "self" else self._cross(x, context)
        return self.to_out(h.reshape(x.shape[0], x.shape[1], -1))
