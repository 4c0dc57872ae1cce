"""Stand-in of ``pixal3d.modules.sparse.conv.conv_flex_gemm`` (``SPARSE_CONV_BACKEND=flex_gemm``):
the same parameters as ``conv_none`` (flex_gemm's layout: ``weight`` [Co, Kd, Kh, Kw, Ci],
``bias`` [Co], the same initialisation), the forward handed to
``flex_gemm.ops.spconv.sparse_submanifold_conv3d`` with its neighbour cache kept on the input's
spatial cache under the real key. The stand-in ``flex_gemm`` computes it as one gathered matrix
product (another summation order than ``conv_none``: equal to rounding)."""
import flex_gemm
from flex_gemm.ops.spconv import sparse_submanifold_conv3d

from . import config
from .conv_none import sparse_conv3d_init as _none_init


def sparse_conv3d_init(self, in_channels, out_channels, kernel_size, stride=1, dilation=1,
                       padding=None, bias=True, indice_key=None):
    assert stride == 1 and padding is None, \
        'flex_gemm only supports submanifold sparse convolution (stride=1, padding=None)'
    _none_init(self, in_channels, out_channels, kernel_size, stride, dilation, padding, bias,
               indice_key)


def sparse_conv3d_forward(self, x):
    flex_gemm.ops.spconv.set_algorithm(config.FLEX_GEMM_ALGO)
    flex_gemm.ops.spconv.set_hashmap_ratio(config.FLEX_GEMM_HASHMAP_RATIO)
    co, kd, kh, kw, ci = self.weight.shape
    key = f'SubMConv3d_neighbor_cache_{kw}x{kh}x{kd}_dilation{self.dilation}'
    cache = x.get_spatial_cache(key)
    out, new_cache = sparse_submanifold_conv3d(x.feats, x.coords,
                                               [*x.shape, *x.spatial_shape], self.weight,
                                               self.bias, cache, self.dilation)
    if cache is None:
        x.register_spatial_cache(key, new_cache)
    return x.replace(out)


def sparse_inverse_conv3d_init(self, *args, **kwargs):
    raise NotImplementedError('SparseInverseConv3d with flex_gemm is not implemented yet')


def sparse_inverse_conv3d_forward(self, x):
    raise NotImplementedError('SparseInverseConv3d with flex_gemm is not implemented yet')
