"""Pieces shared by the stand-in models: time embedding and the ballast weight."""
import math

import torch
import torch.nn as nn

from standin_hf import ballast  # noqa: F401  (re-exported for the model modules)


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
