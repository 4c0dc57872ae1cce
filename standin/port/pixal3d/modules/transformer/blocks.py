"""Stand-in of ``pixal3d.modules.transformer.blocks`` (TRELLIS.2): ``AbsolutePositionEmbedder``
and ``FeedForwardNet``.

``AbsolutePositionEmbedder(channels, in_channels=3)``: ``freq_dim = channels // in_channels //
2`` frequencies ``1 / 10000 ** (i / freq_dim)`` as a plain tensor attribute ``freqs``;
``forward(x [N, in_channels])`` → ``[N, channels]``: per axis ``sin`` then ``cos`` of ``x ×
freqs``, axes one after another, zero-padded up to ``channels``.

``FeedForwardNet(channels, mlp_ratio=4.0)``: ``mlp`` = ``Linear(C, int(C × mlp_ratio))``,
``GELU(tanh)``, ``Linear(int(C × mlp_ratio), C)``.
"""
import torch
import torch.nn as nn

__all__ = ['AbsolutePositionEmbedder', 'FeedForwardNet']


class AbsolutePositionEmbedder(nn.Module):
    def __init__(self, channels: int, in_channels: int = 3):
        super().__init__()
        self.channels = channels
        self.in_channels = in_channels
        self.freq_dim = channels // in_channels // 2
        self.freqs = 1.0 / (10000 ** (torch.arange(self.freq_dim, dtype=torch.float32)
                                      / self.freq_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, D = x.shape
        assert D == self.in_channels, "Input dimension must match number of input channels"
        self.freqs = self.freqs.to(x.device)
        angles = torch.outer(x.reshape(-1), self.freqs)
        embed = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(N, -1)
        if embed.shape[1] < self.channels:
            embed = torch.cat([embed, embed.new_zeros(N, self.channels - embed.shape[1])], dim=-1)
        return embed


class FeedForwardNet(nn.Module):
    def __init__(self, channels: int, mlp_ratio: float = 4.0):
        super().__init__()
        hidden = int(channels * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(channels, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)
