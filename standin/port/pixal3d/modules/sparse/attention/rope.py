"""Stand-in of ``pixal3d.modules.sparse.attention.rope`` (TRELLIS.2):
``SparseRotaryPositionEmbedder(head_dim, dim=3, rope_freq=(1.0, 10000.0))``.

Its frequency table ``freqs`` (``head_dim // 2 // dim`` values ``rope_freq[0] / rope_freq[1] **
(i / freq_dim)``) is a plain tensor attribute computed in ``__init__`` on the default device —
not a parameter nor a buffer, so it is in no checkpoint — and moved to the input's device on use,
as in the real module. ``forward(q, k=None)`` with sparse tensors of feats ``[N, H, head_dim]``:
the phases of the tokens' coordinates (``coords[:, 1:]``, the same as the dense embedder's, see
``pixal3d.modules.attention.rope``) rotate the channel pairs of q (and k); returns the rotated
q, or ``(q, k)``. The real module caches the phases on the tensor's spatial cache; the stand-in
computes them per call (the same values).
"""
from typing import *

import torch.nn as nn

from ...attention.rope import rope_frequencies, rope_phases, rotate

__all__ = ['SparseRotaryPositionEmbedder']


class SparseRotaryPositionEmbedder(nn.Module):
    def __init__(self, head_dim: int, dim: int = 3,
                 rope_freq: Tuple[float, float] = (1.0, 10000.0)):
        super().__init__()
        assert head_dim % 2 == 0, "Head dim must be divisible by 2"
        self.head_dim = head_dim
        self.dim = dim
        self.rope_freq = rope_freq
        self.freq_dim = head_dim // 2 // dim
        self.freqs = rope_frequencies(head_dim, dim, rope_freq)

    def forward(self, q, k=None):
        assert q.coords.shape[-1] == self.dim + 1, "Last dimension of coords must be dim + 1"
        self.freqs = self.freqs.to(q.coords.device)
        phases = rope_phases(q.coords[..., 1:], self.freqs, self.head_dim)
        q_embed = q.replace(rotate(q.feats, phases))
        if k is None:
            return q_embed
        return q_embed, k.replace(rotate(k.feats, phases))
