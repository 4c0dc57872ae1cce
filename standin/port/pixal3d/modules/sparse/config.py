"""Stand-in of ``pixal3d.modules.sparse.config``: the sparse convolution and attention back ends.

``CONV`` is read once from ``SPARSE_CONV_BACKEND`` and ``ATTN`` from ``SPARSE_ATTN_BACKEND``
(else ``ATTN_BACKEND``) when valid, as the real module does. The real defaults are
``flex_gemm`` and ``flash_attn``; the Mac port runs ``none`` (its pure-PyTorch submanifold
convolution, ``conv/conv_none.py``) unless its Metal flex_gemm is installed, and ``naive``
attention (fp32 matmul + softmax over 2,048-query chunks: MPS's fused SDPA is wrong past ~18-20 k
tokens, the port's INVESTIGATION_FACTS.md Bug D) unless mtlflashattn is, whose ``flash_attn``
import shim then serves the ``flash_attn`` back end: those are this stand-in's defaults, the
paths whose working memory the stand-in exists to mirror. ``flex_gemm`` runs the stand-in
``flex_gemm.ops.spconv``; ``spconv`` and ``torchsparse`` are known names whose libraries the
stand-in does not have (their import fails, as on a Mac). ``flash_attn`` selects the stand-in
``flash_attn`` package (a plain-PyTorch fused-kernel stand-in); ``xformers``/``flash_attn_3``/
``flash_attn_4`` are valid names whose CUDA kernels the stand-in lacks (the attention function
says so when called).
"""
import os
from typing import *

CONV = 'none'
ATTN = 'naive'

VALID_CONV_BACKENDS = ['none', 'spconv', 'torchsparse', 'flex_gemm']
VALID_ATTN_BACKENDS = ['xformers', 'flash_attn', 'flash_attn_3', 'flash_attn_4', 'sdpa', 'naive']


def __from_env():
    global ATTN, CONV
    conv = os.environ.get('SPARSE_CONV_BACKEND')
    if conv is not None and conv in VALID_CONV_BACKENDS:
        CONV = conv
    env = os.environ.get('SPARSE_ATTN_BACKEND')
    if env is None:
        env = os.environ.get('ATTN_BACKEND')
    if env is not None and env in VALID_ATTN_BACKENDS:
        ATTN = env


__from_env()


def set_conv_backend(backend: Literal['none', 'spconv', 'torchsparse', 'flex_gemm']):
    global CONV
    CONV = backend


def set_attn_backend(backend: Literal['xformers', 'flash_attn', 'flash_attn_3', 'flash_attn_4',
                                      'sdpa', 'naive']):
    global ATTN
    ATTN = backend
