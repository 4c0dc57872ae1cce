"""Stand-in of ``pixal3d.modules.sparse.conv.conv``: ``SparseConv3d`` hands its set-up and its
forward to the back end ``conv_{config.CONV}`` (imported when the first convolution is built, as
in the real module), so the parameters' names and layout are the back end's."""
import importlib

import torch.nn as nn

from .. import config

_backends = {}


def _backend():
    if config.CONV not in _backends:
        _backends[config.CONV] = importlib.import_module(f'..conv_{config.CONV}', __name__)
    return _backends[config.CONV]


class SparseConv3d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1,
                 padding=None, bias=True, indice_key=None):
        super().__init__()
        _backend().sparse_conv3d_init(self, in_channels, out_channels, kernel_size, stride,
                                      dilation, padding, bias, indice_key)

    def forward(self, x):
        return _backends[config.CONV].sparse_conv3d_forward(self, x)


class SparseInverseConv3d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1, bias=True,
                 indice_key=None):
        super().__init__()
        _backend().sparse_inverse_conv3d_init(self, in_channels, out_channels, kernel_size,
                                              stride, dilation, bias, indice_key)

    def forward(self, x):
        return _backends[config.CONV].sparse_inverse_conv3d_forward(self, x)
