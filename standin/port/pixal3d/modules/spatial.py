"""Stand-in of ``pixal3d.modules.spatial``: ``pixel_shuffle_3d``, [B, C·f³, H, W, D] →
[B, C, H·f, W·f, D·f], input channel ``c·f³ + i·f² + j·f + k`` going to output channel ``c`` at
``(h·f + i, w·f + j, d·f + k)`` (the real reshape and permute order)."""
import torch


def pixel_shuffle_3d(x: torch.Tensor, scale_factor: int) -> torch.Tensor:
    b, c, h, w, d = x.shape
    c_out = c // scale_factor ** 3
    x = x.reshape(b, c_out, scale_factor, scale_factor, scale_factor, h, w, d)
    x = x.permute(0, 1, 5, 2, 6, 3, 7, 4)
    return x.reshape(b, c_out, h * scale_factor, w * scale_factor, d * scale_factor)
