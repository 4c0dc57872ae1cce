"""Stand-in of ``pixal3d.modules.sparse.transformer.modulated``:
``ModulatedSparseTransformerCrossBlock``, one block of the structured-latent flow DiTs
(TRELLIS.2, with Pixal3D's projection conditioning) — the dense
``ModulatedTransformerCrossBlock`` (``pixal3d.modules.transformer.modulated``: the same weights,
arguments and order of operations) over sparse tokens: ``SparseMultiHeadAttention`` (RoPE from
the tokens' coordinates, no ``phases`` argument), ``SparseProjectAttention`` for
``image_attn_mode="proj"``, ``SparseFeedForwardNet``.

``forward(x, mod [B, 6C] (shared) or [B, C], context)``: x a sparse tensor of feats ``[N, C]``;
each token takes the modulation of its batch (``coords[:, 0]``), as the real sparse tensor's
element-wise operators broadcast a ``[B, C]`` tensor: at each operation (``h * (1 + scale) +
shift``, ``h * gate``), one ``[N, C]`` copy alive at a time. Returns x's tokens, feats ``[N, C]``.
"""
from typing import *

import torch
import torch.nn as nn
import torch.utils.checkpoint

from ...norm import LayerNorm32
from ...transformer.modulated import build_image_attention, modulation_chunks
from ..attention import SparseMultiHeadAttention, SparseProjectAttention
from .blocks import SparseFeedForwardNet

__all__ = ['ModulatedSparseTransformerCrossBlock']


def _per_token(x, value: torch.Tensor) -> torch.Tensor:
    """``value`` ``[B, C]`` as one row per token of x (``[N, C]``)."""
    return value[x.coords[:, 0].long()]


class ModulatedSparseTransformerCrossBlock(nn.Module):
    def __init__(self, channels: int, ctx_channels: int, num_heads: int,
                 mlp_ratio: float = 4.0, attn_mode: Literal["full", "swin"] = "full",
                 window_size: Optional[int] = None,
                 shift_window: Optional[Tuple[int, int, int]] = None,
                 use_checkpoint: bool = False, use_rope: bool = False,
                 rope_freq: Tuple[float, float] = (1.0, 10000.0), qk_rms_norm: bool = False,
                 qk_rms_norm_cross: bool = False, qkv_bias: bool = True, share_mod: bool = False,
                 image_attn_mode: Literal["cross", "proj"] = "cross",
                 proj_in_channels: Optional[int] = None, vae_in_channels: Optional[int] = None):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.share_mod = share_mod
        self.image_attn_mode = image_attn_mode
        self.norm1 = LayerNorm32(channels, elementwise_affine=False, eps=1e-6)
        self.norm2 = LayerNorm32(channels, elementwise_affine=True, eps=1e-6)
        self.norm3 = LayerNorm32(channels, elementwise_affine=False, eps=1e-6)
        self.self_attn = SparseMultiHeadAttention(
            channels, num_heads=num_heads, type="self", attn_mode=attn_mode,
            window_size=window_size, shift_window=shift_window, qkv_bias=qkv_bias,
            use_rope=use_rope, rope_freq=rope_freq, qk_rms_norm=qk_rms_norm)
        self.cross_attn = build_image_attention(
            SparseMultiHeadAttention, SparseProjectAttention, channels, ctx_channels, num_heads,
            qkv_bias, qk_rms_norm_cross, image_attn_mode, proj_in_channels)
        self.mlp = SparseFeedForwardNet(channels, mlp_ratio=mlp_ratio)
        if not share_mod:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(),
                                                  nn.Linear(channels, 6 * channels, bias=True))
        else:
            self.modulation = nn.Parameter(torch.randn(6 * channels) / channels ** 0.5)

    def _forward(self, x, mod: torch.Tensor, context):
        # each [B, C] modulation is broadcast to the tokens at the operation that uses it, as
        # the real sparse tensor's element-wise operators do: one [N, C] at a time, not six
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            modulation_chunks(self, mod)
        h = x.replace(self.norm1(x.feats) * _per_token(x, 1 + scale_msa)
                      + _per_token(x, shift_msa))
        x = x.replace(x.feats + self.self_attn(h).feats * _per_token(x, gate_msa))
        x = x.replace(x.feats + self.cross_attn(x.replace(self.norm2(x.feats)), context).feats)
        h = x.replace(self.norm3(x.feats) * _per_token(x, 1 + scale_mlp)
                      + _per_token(x, shift_mlp))
        return x.replace(x.feats + self.mlp(h).feats * _per_token(x, gate_mlp))

    def forward(self, x, mod: torch.Tensor, context):
        if self.use_checkpoint:
            return torch.utils.checkpoint.checkpoint(self._forward, x, mod, context,
                                                     use_reentrant=False)
        return self._forward(x, mod, context)
