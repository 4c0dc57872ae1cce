"""Stand-in of the port's ``pixal3d/modules/sparse/conv/conv_none.py`` (Pixal3D-mac): the
pure-PyTorch submanifold sparse convolution the Mac port runs without flex_gemm.

Parameters as the port's (and flex_gemm's): ``weight`` [Co, Kd, Kh, Kw, Ci] — initialised as a
``[Co, Ci, Kd, Kh, Kw]`` convolution weight (Kaiming uniform, a = √5; ``bias`` uniform in
±1/√fan_in) and then permuted — and ``bias`` [Co]. The forward is the port's: the neighbour map
``(src, tgt, kernel)`` cached on the input's spatial cache under the port's key, then per kernel
offset ``feats[src] @ W[offset]`` (``W = weight.reshape(Co, K, Ci).permute(1, 2, 0)``) added
into a zero ``[N, Co]`` output of the input's dtype, offsets in order (an accumulating
``index_put_`` per offset where the port calls ``scatter_add_``: one addition per row and offset
either way, the same sums), then ``+ bias``. The neighbour map itself is found by sorted keys
(``standin_sparse.submanifold_neighbours``) where the port loops over voxels in Python: the
same pairs in the same order, so the same sums.
"""
import math

import torch
import torch.nn as nn
from standin_sparse import submanifold_neighbours


def sparse_conv3d_init(self, in_channels, out_channels, kernel_size, stride=1, dilation=1,
                       padding=None, bias=True, indice_key=None):
    assert stride == 1 and padding is None, \
        "conv_none only supports submanifold sparse convolution (stride=1, padding=None)"
    self.in_channels = in_channels
    self.out_channels = out_channels
    self.kernel_size = tuple(kernel_size) if isinstance(kernel_size, (list, tuple)) \
        else (kernel_size,) * 3
    self.stride = tuple(stride) if isinstance(stride, (list, tuple)) else (stride,) * 3
    self.dilation = tuple(dilation) if isinstance(dilation, (list, tuple)) else (dilation,) * 3
    self.weight = nn.Parameter(torch.empty((out_channels, in_channels, *self.kernel_size)))
    if bias:
        self.bias = nn.Parameter(torch.empty(out_channels))
    else:
        self.register_parameter("bias", None)
    nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
    if self.bias is not None:
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        if fan_in != 0:
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)
    # (Co, Ci, Kd, Kh, Kw) -> (Co, Kd, Kh, Kw, Ci), flex_gemm's layout
    self.weight = nn.Parameter(self.weight.permute(0, 2, 3, 4, 1).contiguous())


def sparse_conv3d_forward(self, x):
    co, kd, kh, kw, ci = self.weight.shape
    feats = x.feats
    cache_key = f"SubMConv3d_none_neighbor_{kw}x{kh}x{kd}_dilation{self.dilation}"
    neighbours = x.get_spatial_cache(cache_key)
    if neighbours is None:
        neighbours = tuple(t.to(feats.device) for t in
                           submanifold_neighbours(x.coords, (kd, kh, kw), self.dilation))
        x.register_spatial_cache(cache_key, neighbours)
    src, tgt, kernel = neighbours
    count = kd * kh * kw
    weights = self.weight.reshape(co, count, ci).permute(1, 2, 0)
    out = torch.zeros(feats.shape[0], co, device=feats.device, dtype=feats.dtype)
    # the map is sorted by kernel offset: each offset's pairs are one contiguous run
    bounds = torch.searchsorted(kernel, torch.arange(count + 1, device=kernel.device)).tolist()
    for k in range(count):
        lo, hi = bounds[k], bounds[k + 1]
        if lo == hi:
            continue
        edge_out = feats.index_select(0, src[lo:hi]) @ weights[k]
        # the port's scatter_add_: each row is a target at most once per offset, so one
        # accumulating put per offset makes the same single addition per row
        out.index_put_((tgt[lo:hi],), edge_out, accumulate=True)
    if self.bias is not None:
        out = out + self.bias
    return x.replace(out)


def sparse_inverse_conv3d_init(self, *args, **kwargs):
    raise NotImplementedError("SparseInverseConv3d is not implemented for conv_none")


def sparse_inverse_conv3d_forward(self, x):
    raise NotImplementedError("SparseInverseConv3d is not implemented for conv_none")
