"""Stand-in of ``pixal3d.modules.attention.rope`` (TRELLIS.2): ``RotaryPositionEmbedder``.

``RotaryPositionEmbedder(head_dim, dim=3, rope_freq=(1.0, 10000.0))``: ``freq_dim = head_dim //
2 // dim`` frequencies ``rope_freq[0] / rope_freq[1] ** (i / freq_dim)`` kept as a plain tensor
attribute ``freqs`` (not a buffer: in no checkpoint; moved to the input's device on use).
``forward(indices [..., N, dim])`` → unit complex phases ``[..., N, head_dim // 2]``: for each
axis the phase angles ``index × freqs``, axes one after another, padded with angle 0 (phase 1)
up to ``head_dim // 2``. ``apply_rotary_embedding(x [..., N, H, head_dim], phases [N, head_dim
// 2])`` rotates consecutive channel pairs (as complex numbers) by the phases, in fp32, and
returns ``x``'s dtype.
"""
from typing import *

import torch
import torch.nn as nn

__all__ = ['RotaryPositionEmbedder']


def rope_frequencies(head_dim: int, dim: int, rope_freq: Tuple[float, float]) -> torch.Tensor:
    """The ``freq_dim = head_dim // 2 // dim`` RoPE frequencies (float32, default device)."""
    freq_dim = head_dim // 2 // dim
    exponents = torch.arange(freq_dim, dtype=torch.float32) / freq_dim
    return rope_freq[0] / (rope_freq[1] ** exponents)


def rope_phases(indices: torch.Tensor, freqs: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Unit complex phases ``[..., N, head_dim // 2]`` of integer positions ``[..., N, dim]``."""
    angles = torch.outer(indices.reshape(-1), freqs).reshape(*indices.shape[:-1], -1)
    pad = head_dim // 2 - angles.shape[-1]
    if pad > 0:
        angles = torch.cat([angles, angles.new_zeros(*angles.shape[:-1], pad)], dim=-1)
    return torch.polar(torch.ones_like(angles), angles)


def rotate(x: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
    """``x [..., N, H, C]`` with channel pairs rotated by ``phases [N, C // 2]`` (fp32 math)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    turned = pairs * phases.unsqueeze(-2)
    return torch.view_as_real(turned).reshape(*turned.shape[:-1], -1).to(x.dtype)


class RotaryPositionEmbedder(nn.Module):
    def __init__(self, head_dim: int, dim: int = 3,
                 rope_freq: Tuple[float, float] = (1.0, 10000.0)):
        super().__init__()
        assert head_dim % 2 == 0, "Head dim must be divisible by 2"
        self.head_dim = head_dim
        self.dim = dim
        self.rope_freq = rope_freq
        self.freq_dim = head_dim // 2 // dim
        self.freqs = rope_frequencies(head_dim, dim, rope_freq)

    @staticmethod
    def apply_rotary_embedding(x: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
        return rotate(x, phases)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        assert indices.shape[-1] == self.dim, f"Last dim of indices must be {self.dim}"
        self.freqs = self.freqs.to(indices.device)
        return rope_phases(indices, self.freqs, self.head_dim)
