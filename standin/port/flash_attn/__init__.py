"""Stand-in of the ``flash_attn`` package (tests only): the call surface the port's attention
modules use — ``flash_attn_func``, ``flash_attn_qkvpacked_func``, ``flash_attn_kvpacked_func``
([batch, seq, heads, dim] layout) and their ``_varlen_`` forms (tokens of every sequence
concatenated, ``cu_seqlens`` the cumulative lengths) — in plain PyTorch.

On a Mac the port gets this package from mtlflashattn's guarded import shim (its README:
"a guarded ``flash_attn`` drop-in shim", Metal kernels that never form the ``Lq × Lk`` score
matrix). This stand-in does what such a fused kernel does, in tiles: for each block of
``QUERY_BLOCK`` queries it walks the keys in blocks of ``KEY_BLOCK`` with an online softmax
(running maximum, running sum, rescaled accumulator, all fp32), so at most one
``[heads, QUERY_BLOCK, KEY_BLOCK]`` fp32 tile of scores is alive; the output is cast to the
queries' dtype, as flash-attn returns it. It is not fast; it is the memory shape of a fused
kernel, and equals ``softmax(q kᵀ · scale) v`` to fp32 rounding.

Unsupported arguments (``dropout_p > 0``, ``causal=True``, ``window_size``, ``alibi_slopes``,
``return_attn_probs``) raise ``NotImplementedError``, as mtlflashattn's shim does, so a caller
never gets a silently different result.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

__version__ = "2.0.0-standin"

QUERY_BLOCK = 1024
KEY_BLOCK = 1024


def _refuse(dropout_p=0.0, causal=False, window_size=(-1, -1), alibi_slopes=None,
            return_attn_probs=False, **_):
    if dropout_p or causal or tuple(window_size) != (-1, -1) or alibi_slopes is not None \
            or return_attn_probs:
        raise NotImplementedError("the stand-in flash_attn computes plain non-causal attention "
                                  "only (no dropout, window, ALiBi or returned probabilities)")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            scale: Optional[float]) -> torch.Tensor:
    """One sequence: q [Lq, H, D], k [Lk, H, D], v [Lk, H, Dv] → [Lq, H, Dv] in q's dtype."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qh, kh, vh = (x.float().transpose(0, 1) for x in (q, k, v))  # [H, L, D]
    heads, lq, lk = qh.shape[0], qh.shape[1], kh.shape[1]
    out = torch.empty(heads, lq, vh.shape[-1], dtype=torch.float32, device=q.device)
    for qs in range(0, lq, QUERY_BLOCK):
        qb = qh[:, qs:qs + QUERY_BLOCK]
        rows = qb.shape[1]
        top = torch.full((heads, rows, 1), -math.inf, dtype=torch.float32, device=q.device)
        total = torch.zeros(heads, rows, 1, dtype=torch.float32, device=q.device)
        acc = torch.zeros(heads, rows, vh.shape[-1], dtype=torch.float32, device=q.device)
        for ks in range(0, lk, KEY_BLOCK):
            scores = torch.matmul(qb, kh[:, ks:ks + KEY_BLOCK].transpose(-1, -2)) * scale
            new_top = torch.maximum(top, scores.amax(dim=-1, keepdim=True))
            weights = torch.exp(scores - new_top)
            keep = torch.exp(top - new_top)
            total = total * keep + weights.sum(dim=-1, keepdim=True)
            acc = acc * keep + torch.matmul(weights, vh[:, ks:ks + KEY_BLOCK])
            top = new_top
        out[:, qs:qs + rows] = acc / total
    return out.transpose(0, 1).to(q.dtype)


def _varlen(q, k, v, cu_q, cu_k, scale):
    """Concatenated sequences: q [Tq, H, D], k/v [Tk, H, D*] split at ``cu_q``/``cu_k``."""
    cu_q, cu_k = [int(x) for x in cu_q.tolist()], [int(x) for x in cu_k.tolist()]
    if len(cu_q) != len(cu_k):
        raise ValueError(f"cu_seqlens_q has {len(cu_q) - 1} sequences, cu_seqlens_k "
                         f"{len(cu_k) - 1}")
    outs = [_attend(q[cu_q[i]:cu_q[i + 1]], k[cu_k[i]:cu_k[i + 1]], v[cu_k[i]:cu_k[i + 1]],
                    scale) for i in range(len(cu_q) - 1)]
    return torch.cat(outs, dim=0)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    """q [B, Lq, H, D], k [B, Lk, H, D], v [B, Lk, H, Dv] → [B, Lq, H, Dv]."""
    _refuse(dropout_p, causal, **kwargs)
    return torch.stack([_attend(q[b], k[b], v[b], softmax_scale) for b in range(q.shape[0])])


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    """qkv [B, L, 3, H, D] → [B, L, H, D]."""
    q, k, v = qkv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, **kwargs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    """q [B, Lq, H, D], kv [B, Lk, 2, H, D] → [B, Lq, H, D]."""
    k, v = kv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, **kwargs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    """q [Tq, H, D], k [Tk, H, D], v [Tk, H, Dv], ``cu_seqlens_*`` int32 [batch + 1] →
    [Tq, H, Dv]."""
    _refuse(dropout_p, causal, **kwargs)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, **kwargs):
    """qkv [T, 3, H, D], ``cu_seqlens`` int32 [batch + 1] → [T, H, D]."""
    _refuse(dropout_p, causal, **kwargs)
    q, k, v = qkv.unbind(dim=1)
    return _varlen(q, k, v, cu_seqlens, cu_seqlens, softmax_scale)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, **kwargs):
    """q [Tq, H, D], kv [Tk, 2, H, D] → [Tq, H, D]."""
    _refuse(dropout_p, causal, **kwargs)
    k, v = kv.unbind(dim=1)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale)
