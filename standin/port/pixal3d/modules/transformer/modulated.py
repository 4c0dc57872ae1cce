"""Stand-in of ``pixal3d.modules.transformer.modulated``: ``ModulatedTransformerCrossBlock``,
one block of the sparse-structure flow DiT (TRELLIS.2, with Pixal3D's projection conditioning).

Weights: ``norm1`` (no affine), ``norm2`` (affine), ``norm3`` (no affine) — ``LayerNorm32``,
eps 1e-6; ``self_attn`` (``MultiHeadAttention`` type self, RoPE when ``use_rope``, QK RMS norm
when ``qk_rms_norm``); ``cross_attn``: with ``image_attn_mode="cross"`` a ``MultiHeadAttention``
to the image tokens, with ``"proj"`` a ``ProjectAttention`` around one (QK RMS norm when
``qk_rms_norm_cross``) plus its ``proj_linear`` (``Linear(proj_in_channels or ctx_channels,
C)``); ``mlp`` (``FeedForwardNet``); the modulation — ``adaLN_modulation`` (SiLU, ``Linear(C,
6C)``) per block, or with ``share_mod`` only ``modulation`` (a ``[6C]`` parameter added to the
model's shared modulation).

``forward(x [B, L, C], mod [B, 6C] (shared) or [B, C] (the time embedding), context, phases)``:
shift/scale/gate for attention and MLP from the modulation (chunks of 6, in that order);
``x + gate_msa · self_attn(norm1(x) · (1 + scale_msa) + shift_msa)``, then ``x +
cross_attn(norm2(x), context)`` (not modulated), then ``x + gate_mlp · mlp(norm3(x) · (1 +
scale_mlp) + shift_mlp)``. ``use_checkpoint`` runs it under ``torch.utils.checkpoint`` (no
effect on the values).
"""
from typing import *

import torch
import torch.nn as nn
import torch.utils.checkpoint

from ..attention import MultiHeadAttention, ProjectAttention
from ..norm import LayerNorm32
from .blocks import FeedForwardNet

__all__ = ['ModulatedTransformerCrossBlock', 'build_image_attention', 'modulation_chunks']


def modulation_chunks(block: nn.Module, mod: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """The six ``[B, C]`` modulation tensors of ``block`` for ``mod`` (shared or per block)."""
    if block.share_mod:
        return (block.modulation + mod).type(mod.dtype).chunk(6, dim=1)
    return block.adaLN_modulation(mod).chunk(6, dim=1)


def build_image_attention(attention_cls, project_cls, channels: int, ctx_channels: int,
                          num_heads: int, qkv_bias: bool, qk_rms_norm_cross: bool,
                          image_attn_mode: str, proj_in_channels: Optional[int]) -> nn.Module:
    """A block's ``cross_attn``: the image cross-attention, wrapped in ``project_cls`` (with
    its ``proj_linear``) for ``image_attn_mode="proj"``. Raises ValueError for another mode."""
    attention = attention_cls(channels, ctx_channels=ctx_channels, num_heads=num_heads,
                              type="cross", attn_mode="full", qkv_bias=qkv_bias,
                              qk_rms_norm=qk_rms_norm_cross)
    if image_attn_mode == "cross":
        return attention
    if image_attn_mode == "proj":
        proj_in = proj_in_channels if proj_in_channels is not None else ctx_channels
        return project_cls(attention, channels, proj_in)
    raise ValueError(f"Unknown image attention mode: {image_attn_mode} (the stand-in has "
                     f"'cross' and 'proj'; Pixal3D's 'gated_proj' is in no released config)")


class ModulatedTransformerCrossBlock(nn.Module):
    def __init__(self, channels: int, ctx_channels: int, num_heads: int,
                 mlp_ratio: float = 4.0, attn_mode: Literal["full", "windowed"] = "full",
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
        self.self_attn = MultiHeadAttention(
            channels, num_heads=num_heads, type="self", attn_mode=attn_mode,
            window_size=window_size, shift_window=shift_window, qkv_bias=qkv_bias,
            use_rope=use_rope, rope_freq=rope_freq, qk_rms_norm=qk_rms_norm)
        self.cross_attn = build_image_attention(
            MultiHeadAttention, ProjectAttention, channels, ctx_channels, num_heads, qkv_bias,
            qk_rms_norm_cross, image_attn_mode, proj_in_channels)
        self.mlp = FeedForwardNet(channels, mlp_ratio=mlp_ratio)
        if not share_mod:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(),
                                                  nn.Linear(channels, 6 * channels, bias=True))
        else:
            self.modulation = nn.Parameter(torch.randn(6 * channels) / channels ** 0.5)

    def _forward(self, x: torch.Tensor, mod: torch.Tensor, context,
                 phases: Optional[torch.Tensor] = None) -> torch.Tensor:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            modulation_chunks(self, mod)
        h = self.norm1(x) * (1 + scale_msa.unsqueeze(1)) + shift_msa.unsqueeze(1)
        x = x + self.self_attn(h, phases=phases) * gate_msa.unsqueeze(1)
        x = x + self.cross_attn(self.norm2(x), context)
        h = self.norm3(x) * (1 + scale_mlp.unsqueeze(1)) + shift_mlp.unsqueeze(1)
        return x + self.mlp(h) * gate_mlp.unsqueeze(1)

    def forward(self, x: torch.Tensor, mod: torch.Tensor, context,
                phases: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.use_checkpoint:
            return torch.utils.checkpoint.checkpoint(self._forward, x, mod, context, phases,
                                                     use_reentrant=False)
        return self._forward(x, mod, context, phases)
