"""Stand-in of ``pixal3d.modules.sparse.attention.proj_attention``: ``SparseProjectAttention``
(Pixal3D ``image_attn_mode="proj"``) — as the dense ``ProjectAttention``, for sparse tokens:
``forward(x, context)`` with ``context`` ``{'global': [B, M, ctx], 'proj': SparseTensor [N,
proj_in] (the same tokens as x) or a [N, proj_in] tensor}`` → ``x``'s tokens with
``proj_linear(proj) + cross_attn_block(x, global)``."""
import torch.nn as nn

from ...attention.proj_attention import split_context

__all__ = ['SparseProjectAttention']


class SparseProjectAttention(nn.Module):
    def __init__(self, cross_attn_block: nn.Module, channels: int, proj_in_channels: int):
        super().__init__()
        self.cross_attn_block = cross_attn_block
        self.proj_linear = nn.Linear(proj_in_channels, channels, bias=True)

    def forward(self, x, context):
        global_context, proj_context = split_context(context)
        global_out = self.cross_attn_block(x, global_context)
        proj = proj_context.feats if hasattr(proj_context, 'feats') else proj_context
        return global_out.replace(self.proj_linear(proj) + global_out.feats)
