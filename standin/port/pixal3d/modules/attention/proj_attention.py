"""Stand-in of ``pixal3d.modules.attention.proj_attention`` (Pixal3D ``image_attn_mode="proj"``):
``ProjectAttention(cross_attn_block, channels, proj_in_channels)`` — the block's image
cross-attention (``cross_attn_block``, a ``MultiHeadAttention`` to the global image tokens) plus
``proj_linear`` (``Linear(proj_in_channels, channels)``, one per block) of the view-aligned
projected features: ``forward(x [B, L, C], context)`` with ``context`` ``{'global': [B, M,
ctx], 'proj': [B, L, proj_in]}`` (or the pair ``(global, proj)``) → ``cross_attn_block(x,
global) + proj_linear(proj)``, ``[B, L, C]``. Pixal3D's ``gated_proj`` variant is not in the
released configs and not in this stand-in.
"""
from typing import *

import torch
import torch.nn as nn

__all__ = ['ProjectAttention', 'split_context']


def split_context(context) -> Tuple[Any, Any]:
    """``(global, proj)`` of a ``{'global', 'proj'}`` dict or a pair."""
    if isinstance(context, dict):
        return context['global'], context['proj']
    global_context, proj_context = context
    return global_context, proj_context


class ProjectAttention(nn.Module):
    def __init__(self, cross_attn_block: nn.Module, channels: int, proj_in_channels: int):
        super().__init__()
        self.cross_attn_block = cross_attn_block
        self.proj_linear = nn.Linear(proj_in_channels, channels, bias=True)

    def forward(self, x: torch.Tensor, context) -> torch.Tensor:
        global_context, proj_context = split_context(context)
        return self.proj_linear(proj_context) + self.cross_attn_block(x, global_context)
