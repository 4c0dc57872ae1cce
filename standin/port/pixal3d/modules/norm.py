"""Stand-in of ``pixal3d.modules.norm`` (TRELLIS.2's ``trellis2/modules/norm.py``):
``LayerNorm32`` runs a LayerNorm in fp32 and casts back to the input's dtype."""
import torch
import torch.nn as nn


class LayerNorm32(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_dtype = x.dtype
        x = x.float()
        o = super().forward(x)
        return o.to(x_dtype)
