"""Stand-in of ``pixal3d.modules.sparse.config``: the sparse attention backend.

``ATTN`` is read once from ``SPARSE_ATTN_BACKEND`` (else ``ATTN_BACKEND``) when valid, as the
real module does. The real default is ``flash_attn``; the Mac port runs ``naive`` (fp32
matmul + softmax over 2,048-query chunks) unless mtlflashattn is installed, so that is this
stand-in's default: it is the path whose working memory the stand-in exists to mirror.
"""
import os
from typing import *

ATTN = 'naive'

VALID_ATTN_BACKENDS = ['sdpa', 'naive']


def __from_env():
    global ATTN
    env = os.environ.get('SPARSE_ATTN_BACKEND')
    if env is None:
        env = os.environ.get('ATTN_BACKEND')
    if env is not None and env in VALID_ATTN_BACKENDS:
        ATTN = env


__from_env()


def set_attn_backend(backend: Literal['sdpa', 'naive']):
    global ATTN
    ATTN = backend
