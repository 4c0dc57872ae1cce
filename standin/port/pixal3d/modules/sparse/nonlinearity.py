"""Stand-in of ``pixal3d.modules.sparse.nonlinearity``: ``SparseGELU`` (``nn.GELU`` on a sparse
tensor's ``feats``)."""
import torch.nn as nn

__all__ = ['SparseGELU']


class SparseGELU(nn.GELU):
    def forward(self, input):
        return input.replace(super().forward(input.feats))
