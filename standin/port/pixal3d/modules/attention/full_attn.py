"""Stand-in of ``pixal3d.modules.attention.full_attn`` (TRELLIS.2 ``trellis2/modules/attention/
full_attn.py``): dense ``scaled_dot_product_attention`` in the real call forms — ``(qkv)`` with
qkv ``[N, L, 3, H, C]``, ``(q, kv)`` with kv ``[N, L, 2, H, C]``, ``(q, k, v)`` with
``[N, L, H, C*]`` each — returning ``[N, Lq, H, Cv]``, dispatched on ``config.BACKEND``:

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` on ``[N, H, L, C]``.
- ``naive``: the real ``_naive_sdpa`` (``softmax(q kᵀ / √C) v`` with the whole score matrix, in
  the inputs' dtype).
- ``flash_attn``: ``flash_attn.flash_attn_{qkvpacked,kvpacked,}_func`` of the ``flash_attn``
  package (here the stand-in one; on a Mac, mtlflashattn's shim).
- ``xformers``, ``flash_attn_3``, ``flash_attn_4``: valid names in the real module, CUDA-only
  kernels; here they raise ``RuntimeError`` saying so (never another back end's result).
"""
import math
from typing import *

import torch
import torch.nn.functional as F

from . import config

__all__ = ['scaled_dot_product_attention']


def _naive_sdpa(q, k, v):
    q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))  # [N, H, L, C]
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.size(-1)))
    out = torch.softmax(scores, dim=-1) @ v
    return out.permute(0, 2, 1, 3)


def _forms(args, kwargs):
    """(q, k, v, packed): the three forms unpacked; ``packed`` keeps the packed tensors for the
    flash_attn kernels (``('qkv', qkv)``, ``('kv', q, kv)`` or ``None``)."""
    names = {1: ['qkv'], 2: ['q', 'kv'], 3: ['q', 'k', 'v']}
    count = len(args) + len(kwargs)
    assert count in names, f"Invalid number of arguments, got {count}, expected 1, 2, or 3"
    values = list(args) + [kwargs[n] for n in names[count][len(args):]]
    if count == 1:
        qkv = values[0]
        assert qkv.dim() == 5 and qkv.shape[2] == 3, f"Invalid shape for qkv, got {qkv.shape}"
        q, k, v = qkv.unbind(dim=2)
        return q, k, v, ('qkv', qkv)
    if count == 2:
        q, kv = values
        assert q.dim() == 4 and kv.dim() == 5 and q.shape[0] == kv.shape[0], \
            f"Invalid shapes, got {q.shape} and {kv.shape}"
        k, v = kv.unbind(dim=2)
        return q, k, v, ('kv', q, kv)
    q, k, v = values
    assert q.dim() == k.dim() == v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0], \
        f"Invalid shapes, got {q.shape}, {k.shape} and {v.shape}"
    return q, k, v, None


def scaled_dot_product_attention(*args, **kwargs):
    """Attention of dense tokens in the forms of the module docstring → ``[N, Lq, H, Cv]``."""
    q, k, v, packed = _forms(args, kwargs)
    if config.BACKEND == 'sdpa':
        out = F.scaled_dot_product_attention(q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3),
                                             v.permute(0, 2, 1, 3))
        return out.permute(0, 2, 1, 3)
    if config.BACKEND == 'naive':
        return _naive_sdpa(q, k, v)
    if config.BACKEND == 'flash_attn':
        import flash_attn
        if packed is not None and packed[0] == 'qkv':
            return flash_attn.flash_attn_qkvpacked_func(packed[1])
        if packed is not None:
            return flash_attn.flash_attn_kvpacked_func(packed[1], packed[2])
        return flash_attn.flash_attn_func(q, k, v)
    if config.BACKEND in ('xformers', 'flash_attn_3', 'flash_attn_4'):
        raise RuntimeError(f"attention back end {config.BACKEND!r} is a CUDA kernel the "
                           f"stand-in port does not have; set ATTN_BACKEND to sdpa, naive or "
                           f"flash_attn")
    raise ValueError(f"Unknown attention module: {config.BACKEND}")
