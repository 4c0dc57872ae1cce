"""Stand-in of ``pixal3d.modules.sparse.attention.full_attn`` (Pixal3D-mac 0be9e69a):
``sparse_scaled_dot_product_attention`` with the port's call forms — ``(qkv)``, ``(q, kv)``,
``(q, k, v)``, each of q and k/v sparse (a ``SparseTensor``: feats ``[T, (3|2,) H, C]``) or dense
(``[N, L, (2,) H, C]``) — and its back ends, picked by ``config.ATTN``:

- ``sdpa`` / ``naive`` (mirrored from the port: names, control flow and working memory; code
  written here): every form pads q, k and v into zero-filled ``[batch, max_len, heads,
  channels]`` tensors; ``sdpa`` runs ``F.scaled_dot_product_attention`` on them, ``naive``
  computes ``softmax(q kᵀ · scale) v`` in fp32 over chunks of ``_chunk = 2048`` queries into a
  preallocated ``[batch, heads, L, channels]`` output, so two ``[batch, heads, 2048, L_kv]``
  fp32 matrices (the scores and their softmax) are alive at once — 3.9 GiB at 21,500 tokens and
  12 heads. The output is permuted back and the batches concatenated.
- ``flash_attn``: the ``flash_attn`` package's varlen kernels (``flash_attn_varlen_
  {qkvpacked,kvpacked,}_func`` with cumulative sequence lengths, no padding), as the real
  module calls them; on a Mac the package is mtlflashattn's import shim, here the stand-in's
  (``flash_attn/``: tiles with an online softmax, never the whole score matrix).
- ``xformers``, ``flash_attn_3``, ``flash_attn_4``: valid names in the real module, CUDA-only
  kernels; here ``RuntimeError`` saying so.

Returns a sparse tensor with q's tokens (feats ``[T_Q, H, Cv]``) when q is sparse, else
``[N, L, H, Cv]``.
"""
import math
from typing import *

import torch

from .. import SparseTensor, config

__all__ = [
    'sparse_scaled_dot_product_attention',
]


def _unpack(args, kwargs):
    """(q [T_Q, H, Ci], k [T_KV, H, Ci], v [T_KV, H, Co], q_seqlen, kv_seqlen, s, dense_shape,
    packed): ``packed`` is ``('qkv', [T, 3, H, C])``, ``('kv', [T_KV, 2, H, C])`` or None."""
    names = {1: ['qkv'], 2: ['q', 'kv'], 3: ['q', 'k', 'v']}[len(args) + len(kwargs)]
    values = list(args) + [kwargs[name] for name in names[len(args):]]
    if len(values) == 1:
        qkv = values[0]
        q, k, v = qkv.feats.unbind(dim=1)
        seqlen = [sl.stop - sl.start for sl in qkv.layout]
        return q, k, v, seqlen, seqlen, qkv, None, ('qkv', qkv.feats)
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
    packed = None
    if len(values) == 2:
        kv = values[1]
        if isinstance(kv, SparseTensor):
            kv_seqlen = [sl.stop - sl.start for sl in kv.layout]
            kv = kv.feats
        else:
            N, L, _, H, C = kv.shape
            kv_seqlen = [L] * N
            kv = kv.reshape(N * L, 2, H, C)
        k, v = kv.unbind(dim=1)
        packed = ('kv', kv)
    else:
        k, v = values[1], values[2]
        if isinstance(k, SparseTensor):
            kv_seqlen = [sl.stop - sl.start for sl in k.layout]
            k, v = k.feats, v.feats
        else:
            N, L, H, CI = k.shape
            kv_seqlen = [L] * N
            k, v = k.reshape(N * L, H, CI), v.reshape(N * L, H, -1)
    return q, k, v, q_seqlen, kv_seqlen, s, dense_shape, packed


def _cumulative(seqlen, device):
    return torch.cat([torch.tensor([0]), torch.cumsum(torch.tensor(seqlen), dim=0)]).int().to(
        device)


def _flash(q, k, v, q_seqlen, kv_seqlen, packed):
    """The ``flash_attn`` back end: the package's varlen kernels on the unpadded tokens."""
    import flash_attn
    cu_q = _cumulative(q_seqlen, q.device)
    if packed is not None and packed[0] == 'qkv':
        return flash_attn.flash_attn_varlen_qkvpacked_func(packed[1], cu_q, max(q_seqlen))
    cu_kv = _cumulative(kv_seqlen, q.device)
    if packed is not None:
        return flash_attn.flash_attn_varlen_kvpacked_func(q, packed[1], cu_q, cu_kv,
                                                          max(q_seqlen), max(kv_seqlen))
    return flash_attn.flash_attn_varlen_func(q, k, v, cu_q, cu_kv, max(q_seqlen),
                                             max(kv_seqlen))


def _finish(out, s, dense_shape, heads):
    if s is not None:
        return s.replace(out)
    return out.reshape(dense_shape[0], dense_shape[1], heads, -1)


def _padded(q, k, v, q_seqlen, kv_seqlen):
    """q, k, v copied into zero-filled ``[batch, heads, max_len, channels]`` tensors."""
    batch, heads = len(q_seqlen), q.shape[-2]
    padded = [torch.zeros(batch, max(lens), heads, x.shape[-1], device=q.device, dtype=x.dtype)
              for x, lens in ((q, q_seqlen), (k, kv_seqlen), (v, kv_seqlen))]
    q_offset = kv_offset = 0
    for batch_idx, (q_len, kv_len) in enumerate(zip(q_seqlen, kv_seqlen, strict=True)):
        padded[0][batch_idx, :q_len] = q[q_offset:q_offset + q_len]
        padded[1][batch_idx, :kv_len] = k[kv_offset:kv_offset + kv_len]
        padded[2][batch_idx, :kv_len] = v[kv_offset:kv_offset + kv_len]
        q_offset += q_len
        kv_offset += kv_len
    return [x.permute(0, 2, 1, 3) for x in padded]


def _key_mask(kv_seqlen, device):
    """None when every sequence has the same key count (batch 1: what inference runs), else a
    ``[batch, 1, 1, max_len]`` bool mask of the real keys. The port pads without a mask (exact
    at batch 1 only); masking keeps the stand-in equal to the real models at any batch."""
    if len(set(kv_seqlen)) == 1:
        return None
    positions = torch.arange(max(kv_seqlen), device=device)
    return (positions[None] < torch.tensor(kv_seqlen, device=device)[:, None])[:, None, None]


def _naive(q_padded, k_padded, v_padded, mask):
    """The port's ``naive`` back end: fp32 ``softmax(q kᵀ · scale) v`` in 2,048-query chunks."""
    orig_dtype = q_padded.dtype
    scale = 1.0 / math.sqrt(q_padded.shape[-1])
    qf = q_padded.float()
    kt = k_padded.float().transpose(-2, -1)
    vf = v_padded.float()
    Bn, Hn, Lq, _ = qf.shape
    out_padded = torch.empty(Bn, Hn, Lq, vf.shape[-1], device=qf.device, dtype=torch.float32)
    _chunk = 2048
    for _s in range(0, Lq, _chunk):
        _e = min(_s + _chunk, Lq)
        a = torch.matmul(qf[:, :, _s:_e], kt) * scale
        if mask is not None:
            a = a.masked_fill(~mask, -math.inf)
        a = a.softmax(dim=-1)
        out_padded[:, :, _s:_e] = torch.matmul(a, vf)
    return out_padded.to(orig_dtype)


def sparse_scaled_dot_product_attention(*args, **kwargs):
    assert len(args) + len(kwargs) in (1, 2, 3), "expected 1, 2 or 3 arguments"
    q, k, v, q_seqlen, kv_seqlen, s, dense_shape, packed = _unpack(args, kwargs)
    if config.ATTN == 'flash_attn':
        return _finish(_flash(q, k, v, q_seqlen, kv_seqlen, packed), s, dense_shape,
                       q.shape[-2])
    if config.ATTN in ('xformers', 'flash_attn_3', 'flash_attn_4'):
        raise RuntimeError(f"sparse attention back end {config.ATTN!r} is a CUDA kernel the "
                           f"stand-in port does not have; set SPARSE_ATTN_BACKEND to naive, "
                           f"sdpa or flash_attn")
    if config.ATTN not in ('naive', 'sdpa'):
        raise ValueError(f"Unknown attention module: {config.ATTN}")
    q_padded, k_padded, v_padded = _padded(q, k, v, q_seqlen, kv_seqlen)
    mask = _key_mask(kv_seqlen, q.device)
    if config.ATTN == 'naive':
        out_padded = _naive(q_padded, k_padded, v_padded, mask)
    else:
        out_padded = torch.nn.functional.scaled_dot_product_attention(q_padded, k_padded,
                                                                      v_padded, attn_mask=mask)
    out_padded = out_padded.permute(0, 2, 1, 3)
    out = torch.cat([out_padded[i, :q_len] for i, q_len in enumerate(q_seqlen)], dim=0)
    return _finish(out, s, dense_shape, q.shape[-2])
