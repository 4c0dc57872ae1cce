"""Stand-in of ``pixal3d.modules.sparse.linear``: ``SparseLinear``, an ``nn.Linear`` over a
sparse tensor's ``feats`` (same parameters, ``weight`` [out, in] and ``bias`` [out])."""
import torch.nn as nn


class SparseLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__(in_features, out_features, bias)

    def forward(self, input):
        return input.replace(super().forward(input.feats))
