"""Stand-in of ``pixal3d.modules.norm`` (TRELLIS.2's ``trellis2/modules/norm.py``): ``LayerNorm32``
and ``GroupNorm32`` run their norm in fp32 (``manual_cast``: not under autocast) and cast back
to the input's dtype; ``ChannelLayerNorm32`` is ``LayerNorm32`` over dim 1 of a [B, C, ...]
tensor (moved last and back)."""
import torch
import torch.nn as nn

from .utils import manual_cast


class LayerNorm32(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_dtype = x.dtype
        x = manual_cast(x, torch.float32)
        o = super().forward(x)
        return manual_cast(o, x_dtype)


class GroupNorm32(nn.GroupNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_dtype = x.dtype
        x = manual_cast(x, torch.float32)
        o = super().forward(x)
        return manual_cast(o, x_dtype)


class ChannelLayerNorm32(LayerNorm32):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = x.dim()
        x = x.permute(0, *range(2, dims), 1).contiguous()
        x = super().forward(x)
        return x.permute(0, dims - 1, *range(1, dims - 1)).contiguous()
