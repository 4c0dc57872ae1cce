"""Stand-in of ``flex_gemm.ops.spconv`` (the port's vendored Metal flex_gemm): the submanifold
sparse convolution ``sparse_submanifold_conv3d`` and the algorithm settings the port's
``conv_flex_gemm`` back end sets before each call.

The real kernels are GPU implicit GEMMs over a hash map; the stand-in gathers every voxel's
kernel-offset neighbours (``standin_sparse.submanifold_neighbours``; zeros where a neighbour
is missing) into ``[N, K·Ci]`` and multiplies by the weight as ``[K·Ci, Co]`` at once.
``PIXAL3D_STANDIN_NO_FLEX_GEMM=1`` hides it, as the whole library is hidden.
"""
from __future__ import annotations

import os

import torch
from standin_sparse import submanifold_neighbours

if os.environ.get("PIXAL3D_STANDIN_NO_FLEX_GEMM", "").strip() == "1":
    raise ImportError("flex_gemm is hidden by PIXAL3D_STANDIN_NO_FLEX_GEMM=1 (stand-in)")

ALGORITHM = "masked_implicit_gemm_splitk"
HASHMAP_RATIO = 2.0


def set_algorithm(algorithm: str) -> None:
    """Record the algorithm name (the stand-in has one way to compute)."""
    global ALGORITHM
    ALGORITHM = algorithm


def set_hashmap_ratio(ratio: float) -> None:
    """Record the hash map's size ratio (the stand-in uses sorted keys, no hash map)."""
    global HASHMAP_RATIO
    HASHMAP_RATIO = ratio


def sparse_submanifold_conv3d(feats, coords, shape, weight, bias, neighbor_cache, dilation):
    """feats [N, Ci] at coords [N, 4]; weight [Co, Kd, Kh, Kw, Ci]; bias [Co] or None;
    ``neighbor_cache`` from an earlier call on the same coords (or None); dilation 3-tuple.
    Returns (out [N, Co] in feats' dtype, the neighbour cache)."""
    co, kd, kh, kw, ci = weight.shape
    if neighbor_cache is None:
        src, tgt, kernel = submanifold_neighbours(coords, (kd, kh, kw), tuple(dilation))
        neighbor_cache = (src.to(feats.device), tgt.to(feats.device), kernel.to(feats.device))
    src, tgt, kernel = neighbor_cache
    n, count = feats.shape[0], kd * kh * kw
    gathered = torch.zeros(n, count, ci, dtype=feats.dtype, device=feats.device)
    gathered[tgt, kernel] = feats[src]
    out = gathered.reshape(n, count * ci) @ weight.reshape(co, count * ci).t()
    if bias is not None:
        out = out + bias
    return out, neighbor_cache
