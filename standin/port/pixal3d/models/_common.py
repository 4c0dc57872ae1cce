"""Pieces shared by the stand-in models: time embedding and the ballast weight."""
import math

import torch
import torch.nn as nn
from standin_hf import add_ballast, ballast  # noqa: F401  (re-exported for the model modules)


class TimeEmbed(nn.Module):
    """t (flow time x 1000, shape [B]) -> [B, channels] through a sine code and a Linear."""

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels
        self.fc = nn.Linear(channels, channels)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        freqs = torch.arange(self.channels, dtype=torch.float32, device=t.device) + 1.0
        code = torch.sin(t.float().reshape(-1, 1) / 1000.0 * freqs * math.pi)
        return self.fc(code)


class RotaryFreqs(nn.Module):
    """Stand-in of the real ``SparseRotaryPositionEmbedder``'s frequency table: ``freqs`` is a
    plain tensor attribute computed in ``__init__`` on the default device (not a parameter nor
    a buffer, so it is in no checkpoint) and moved to the input's device on use, as the real
    one does. ``phase(coords)`` -> [N, dim] sines of the coordinates times the frequencies."""

    def __init__(self, dim: int):
        super().__init__()
        self.freqs = 1.0 / (100.0 ** (torch.arange(dim, dtype=torch.float32) / max(dim, 1)))

    def phase(self, coords: torch.Tensor) -> torch.Tensor:
        self.freqs = self.freqs.to(coords.device)
        return torch.sin(coords.float().sum(-1, keepdim=True) * self.freqs)
