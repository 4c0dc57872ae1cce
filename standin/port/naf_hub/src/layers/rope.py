"""Stand-in of NAF's ``src/layers/rope.py`` (DINOv3's axial RoPE without learnable weights):
``RoPE(embed_dim, *, num_heads, base=100.0, ..., rescale_coords=None)`` with the ``periods``
buffer (``D_head // 4`` values, ``base ** (2 i / (D_head / 2))``), ``create_coordinate`` (pixel
centres in [-1, 1] per axis; the training-time shift/jitter/rescale are not mirrored: NAF runs
in eval), ``rotate`` and ``forward(x, layout="spatial")`` over ``[B, (heads d), H, W]``."""
import math

import torch
from einops import rearrange
from torch import nn


def rope_rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rope_apply(x, sin, cos):
    return (x * cos) + (rope_rotate_half(x) * sin)


class RoPE(nn.Module):
    def __init__(self, embed_dim, *, num_heads, base=100.0, min_period=None, max_period=None,
                 normalize_coords="separate", shift_coords=None, jitter_coords=None,
                 rescale_coords=None, dtype=None, device=None):
        super().__init__()
        assert embed_dim % (4 * num_heads) == 0
        self.num_heads = num_heads
        self.base = base
        self.min_period = min_period
        self.max_period = max_period
        self.D_head = embed_dim // num_heads
        self.normalize_coords = normalize_coords
        self.shift_coords = shift_coords
        self.jitter_coords = jitter_coords
        self.rescale_coords = rescale_coords
        self._cached_coords = None
        self._cached_hw = None
        self.dtype = dtype
        self.register_buffer("periods", torch.empty(self.D_head // 4, device=device, dtype=dtype),
                             persistent=True)
        self._init_weights()

    def create_coordinate(self, *, H, W):
        dd = {"device": self.periods.device, "dtype": self.dtype}
        if self.normalize_coords != "separate":
            raise ValueError(f"stand-in RoPE mirrors normalize_coords='separate' only, got "
                             f"{self.normalize_coords!r}")
        coords_h = torch.arange(0.5, H, **dd) / H
        coords_w = torch.arange(0.5, W, **dd) / W
        coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1)
        return 2.0 * coords.flatten(0, 1) - 1.0

    def _init_weights(self):
        steps = torch.arange(self.D_head // 4, device=self.periods.device, dtype=self.dtype)
        self.periods.data = self.base ** (2 * steps / (self.D_head // 2))

    def rotate(self, x, coords):
        angles = 2 * math.pi * coords[:, :, None] / self.periods[None, None, :]
        angles = angles.flatten(1, 2).tile(2)
        return rope_apply(x, torch.sin(angles), torch.cos(angles))

    def forward(self, x, layout="spatial"):
        h, w = x.shape[-2:]
        x = rearrange(x, "b (n d) h w -> b n (h w) d", n=self.num_heads)
        if (h, w) != self._cached_hw:
            self._cached_coords = self.create_coordinate(H=h, W=w)
            self._cached_hw = (h, w)
        x = self.rotate(x, self._cached_coords)
        if layout == "spatial":
            return rearrange(x, "b n (h w) d -> b (n d) h w", h=h, w=w)
        if layout == "flatten":
            return rearrange(x, "b n (h w) d -> b h w n d", h=h, w=w)
        return x
