"""Stand-in of ``pixal3d.modules.sparse.spatial.spatial2channel``'s ``SparseChannel2Spatial``:
×``factor`` upsampling of a sparse tensor by moving channels to space (the decoders' only
spatial op; the encoders' ``SparseSpatial2Channel`` is not mirrored).

Each voxel of ``x`` ([N, 8·C'] for factor 2) becomes the children its ``subdivision`` marks
(bool [N, 8]; child ``s`` at ``2·coords + (s & 1, s >> 1 & 1, s >> 2 & 1)`` — x the lowest bit)
in the order parent by parent, children ascending; child ``s`` takes channels
``[s·C', (s+1)·C')`` of its parent. Without ``subdivision`` the children come from the cache a
``SparseSpatial2Channel`` left (``channel2spatial_{factor}``), else ``ValueError``. The output
has scale ``x._scale / factor`` and a fresh spatial cache unless that cache was used.
"""
from typing import *

import torch
import torch.nn as nn

from .. import SparseTensor


class SparseChannel2Spatial(nn.Module):
    def __init__(self, factor: int = 2):
        super().__init__()
        self.factor = factor

    def forward(self, x: SparseTensor, subdivision: Optional[SparseTensor] = None) -> SparseTensor:
        dim = x.coords.shape[-1] - 1
        cache = x.get_spatial_cache(f'channel2spatial_{self.factor}')
        if cache is None:
            if subdivision is None:
                raise ValueError('Cache not found. Provide subdivision tensor or pair '
                                 'SparseChannel2Spatial with SparseSpatial2Channel.')
            sub = subdivision.feats
            leaves = sub.sum(dim=-1)
            subidx = sub.nonzero()[:, -1]
            new_coords = x.coords.clone().detach()
            new_coords[:, 1:] *= self.factor
            new_coords = torch.repeat_interleave(new_coords, leaves, dim=0,
                                                 output_size=subidx.shape[0])
            for i in range(dim):
                new_coords[:, i + 1] += subidx // self.factor ** i % self.factor
            idx = torch.repeat_interleave(torch.arange(x.coords.shape[0], device=x.device),
                                          leaves, dim=0, output_size=subidx.shape[0])
        else:
            new_coords, idx, subidx = cache
        # the real reshape's -1, spelled out: the same for voxels, and no voxels stay none
        x_feats = x.feats.reshape(x.feats.shape[0] * self.factor ** dim,
                                  x.feats.shape[1] // self.factor ** dim)
        new_feats = x_feats[idx * self.factor ** dim + subidx]
        shape = None if x._shape is None else torch.Size([x._shape[0],
                                                          x._shape[1] // self.factor ** dim])
        out = SparseTensor(new_feats, new_coords, shape)
        out._scale = tuple(s / self.factor for s in x._scale)
        if cache is not None:  # the cache is kept only when a subdivision pairs with it
            out._spatial_cache = x._spatial_cache
        return out
