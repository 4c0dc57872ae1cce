"""Stand-in of ``pixal3d.modules.sparse.transformer.blocks``: ``SparseFeedForwardNet(channels,
mlp_ratio=4.0)`` — ``mlp`` = ``SparseLinear(C, int(C × mlp_ratio))``, ``SparseGELU(tanh)``,
``SparseLinear(int(C × mlp_ratio), C)`` over a sparse tensor's feats (keys ``mlp.0``,
``mlp.2``, as the dense ``FeedForwardNet``)."""
import torch.nn as nn

from ..linear import SparseLinear
from ..nonlinearity import SparseGELU

__all__ = ['SparseFeedForwardNet']


class SparseFeedForwardNet(nn.Module):
    def __init__(self, channels: int, mlp_ratio: float = 4.0):
        super().__init__()
        hidden = int(channels * mlp_ratio)
        self.mlp = nn.Sequential(SparseLinear(channels, hidden), SparseGELU(approximate="tanh"),
                                 SparseLinear(hidden, channels))

    def forward(self, x):
        return self.mlp(x)
