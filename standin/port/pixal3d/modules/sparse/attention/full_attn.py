"""Stand-in of ``pixal3d.modules.sparse.attention.full_attn`` (Pixal3D-mac 0be9e69a):
``sparse_scaled_dot_product_attention`` with the port's call forms — ``(qkv)``, ``(q, kv)``,
``(q, k, v)`` — and its ``sdpa`` / ``naive`` back ends.

Mirrored from the port (names, control flow and working memory; code written here): every
form pads q, k and v into zero-filled ``[batch, max_len, heads, channels]`` tensors; ``naive``
then computes ``softmax(q kᵀ · scale) v`` in fp32 over chunks of ``_chunk = 2048`` queries into
a preallocated ``[batch, heads, L, channels]`` output, so two ``[batch, heads, 2048, L_kv]``
fp32 matrices (the scores and their softmax) are alive at once — 3.9 GiB at 21,500 tokens and
12 heads. The output is permuted back and the batches concatenated.
"""
import math
from typing import *

import torch

from .. import SparseTensor, config

__all__ = [
    'sparse_scaled_dot_product_attention',
]


def _unpack(args, kwargs):
    """(q [T_Q, H, Ci], k [T_KV, H, Ci], v [T_KV, H, Co], q_seqlen, kv_seqlen, s, dense_shape)"""
    names = {1: ['qkv'], 2: ['q', 'kv'], 3: ['q', 'k', 'v']}[len(args) + len(kwargs)]
    values = list(args) + [kwargs[name] for name in names[len(args):]]
    if len(values) == 1:
        qkv = values[0]
        q, k, v = qkv.feats.unbind(dim=1)
        seqlen = [sl.stop - sl.start for sl in qkv.layout]
        return q, k, v, seqlen, seqlen, qkv, None
    q = values[0]
    if isinstance(q, SparseTensor):
        s, dense_shape = q, None
        q_seqlen = [sl.stop - sl.start for sl in q.layout]
        q = q.feats
    else:
        s, dense_shape = None, q.shape
        N, L, H, C = q.shape
        q_seqlen = [L] * N
        q = q.reshape(N * L, H, C)
    if len(values) == 2:
        kv = values[1]
        if isinstance(kv, SparseTensor):
            kv_seqlen = [sl.stop - sl.start for sl in kv.layout]
            k, v = kv.feats.unbind(dim=1)
        else:
            N, L, _, H, C = kv.shape
            kv_seqlen = [L] * N
            k, v = kv.reshape(N * L, 2, H, C).unbind(dim=1)
    else:
        k, v = values[1], values[2]
        if isinstance(k, SparseTensor):
            kv_seqlen = [sl.stop - sl.start for sl in k.layout]
            k, v = k.feats, v.feats
        else:
            N, L, H, CI = k.shape
            kv_seqlen = [L] * N
            k, v = k.reshape(N * L, H, CI), v.reshape(N * L, H, -1)
    return q, k, v, q_seqlen, kv_seqlen, s, dense_shape


def sparse_scaled_dot_product_attention(*args, **kwargs):
    assert len(args) + len(kwargs) in (1, 2, 3), "expected 1, 2 or 3 arguments"
    q, k, v, q_seqlen, kv_seqlen, s, dense_shape = _unpack(args, kwargs)
    device = q.device
    batch_size = len(q_seqlen)
    heads = q.shape[-2]
    q_channels = q.shape[-1]
    v_channels = v.shape[-1]
    max_q_len = max(q_seqlen)
    max_kv_len = max(kv_seqlen)

    q_padded = torch.zeros(batch_size, max_q_len, heads, q_channels, device=device, dtype=q.dtype)
    k_padded = torch.zeros(batch_size, max_kv_len, heads, q_channels, device=device, dtype=k.dtype)
    v_padded = torch.zeros(batch_size, max_kv_len, heads, v_channels, device=device, dtype=v.dtype)
    q_offset = kv_offset = 0
    for batch_idx, (q_len, kv_len) in enumerate(zip(q_seqlen, kv_seqlen, strict=True)):
        q_padded[batch_idx, :q_len] = q[q_offset:q_offset + q_len]
        k_padded[batch_idx, :kv_len] = k[kv_offset:kv_offset + kv_len]
        v_padded[batch_idx, :kv_len] = v[kv_offset:kv_offset + kv_len]
        q_offset += q_len
        kv_offset += kv_len
    q_padded = q_padded.permute(0, 2, 1, 3)
    k_padded = k_padded.permute(0, 2, 1, 3)
    v_padded = v_padded.permute(0, 2, 1, 3)

    if config.ATTN == 'naive':
        orig_dtype = q_padded.dtype
        scale = 1.0 / math.sqrt(q_channels)
        qf = q_padded.float()
        kt = k_padded.float().transpose(-2, -1)
        vf = v_padded.float()
        Bn, Hn, Lq, _ = qf.shape
        out_padded = torch.empty(Bn, Hn, Lq, v_channels, device=qf.device, dtype=torch.float32)
        _chunk = 2048
        for _s in range(0, Lq, _chunk):
            _e = min(_s + _chunk, Lq)
            a = torch.matmul(qf[:, :, _s:_e], kt) * scale
            a = a.softmax(dim=-1)
            out_padded[:, :, _s:_e] = torch.matmul(a, vf)
        out_padded = out_padded.to(orig_dtype)
    elif config.ATTN == 'sdpa':
        out_padded = torch.nn.functional.scaled_dot_product_attention(q_padded, k_padded,
                                                                      v_padded)
    else:
        raise ValueError(f"Unknown attention module: {config.ATTN}")
    out_padded = out_padded.permute(0, 2, 1, 3)
    out = torch.cat([out_padded[i, :q_len] for i, q_len in enumerate(q_seqlen)], dim=0)
    if s is not None:
        return s.replace(out)
    return out.reshape(dense_shape[0], dense_shape[1], heads, -1)
