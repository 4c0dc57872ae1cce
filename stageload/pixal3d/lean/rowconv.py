"""A submanifold sparse convolution computed for a range of its output rows.

The port's pure-PyTorch sparse convolution (``pixal3d/modules/sparse/conv/conv_none.py``, the
back end ``config.CONV == 'none'`` that a Mac runs without Metal flex_gemm) builds the whole
neighbour map of a level — ``(src, tgt, kernel)``, one int64 triple per neighbour pair, about
ten pairs a voxel on a surface — and a whole ``[N, Co]`` output, adding ``feats[src] @ W[k]``
into it offset by offset in kernel order, then the bias. Output row ``i`` depends only on the
input rows of its neighbours, so any range of output rows can be computed alone: this module
finds a range's neighbours from the level's sorted voxel keys (16 bytes a voxel, against about
240 for the map and several times that while the port builds it) and adds the same products in
the same order (offsets ascending), so each row gets the same fp16 sums as the port's.

Layout read from the port's convolution (flex_gemm's): ``weight`` ``[Co, Kd, Kh, Kw, Ci]``,
``bias`` ``[Co]`` or None; kernel index ``k = (i·Kh + j)·Kw + l`` reaches the voxel at
``(x + (i − Kd//2)·d0, y + (j − Kh//2)·d1, z + (l − Kw//2)·d2)`` of coords ``(batch, x, y,
z)``. :mod:`stageload.pixal3d.lean.decoders` checks that on the live convolution before using
it (a probe against the port's own forward), so a port that differs falls back, not drifts.

Hand-written: no CPU library here offers a sparse-convolution neighbour lookup by ranges.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

CACHE_KEY = "stageload_lean_row_neighbours"
"""Where a level's :class:`VoxelIndex` is kept in the sparse tensor's spatial cache (the port's
own cache, per level; lean's key beside the port's neighbour maps)."""
MIN_ROWS = 8
"""Fewest rows a matrix product is given (a shorter one is padded): below 8 rows a product may
take another kernel (see :mod:`stageload.working_memory`)."""


@dataclass
class VoxelIndex:
    """A level's voxels as sorted keys: ``keys`` int64 [N] ascending, ``order`` int64 [N] (the
    row of each key), ``low`` [3] and ``span`` [3] (the key's box, grown by the kernel's reach,
    so no neighbour's key wraps), all on the CPU."""
    keys: torch.Tensor
    order: torch.Tensor
    low: torch.Tensor
    span: torch.Tensor
    reach: tuple

    def key_of(self, coords: torch.Tensor) -> torch.Tensor:
        """int64 keys [M] of ``coords`` [M, 4] (batch, x, y, z)."""
        c = coords.detach().cpu().long()
        xyz = c[:, 1:] - self.low
        return ((c[:, 0] * self.span[0] + xyz[:, 0]) * self.span[1] + xyz[:, 1]) * self.span[2] \
            + xyz[:, 2]


def voxel_index(coords: torch.Tensor, reach: tuple, rows: int = 1 << 20) -> VoxelIndex:
    """The sorted keys of ``coords`` [N, 4] for neighbours up to ``reach`` (3 ints) away;
    keys computed ``rows`` at a time (the int64 copy of the coords stays one range's)."""
    n = coords.shape[0]
    reach_t = torch.tensor(reach, dtype=torch.long)
    if n == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return VoxelIndex(empty, empty, reach_t, reach_t + 1, tuple(reach))
    xyz = coords[:, 1:]
    low = xyz.min(0).values.cpu().long() - reach_t
    span = xyz.max(0).values.cpu().long() - low + reach_t + 1
    index = VoxelIndex(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                       low, span, tuple(reach))
    keys = torch.empty(n, dtype=torch.long)
    for start in range(0, n, rows):
        keys[start:start + rows] = index.key_of(coords[start:start + rows])
    index.keys, index.order = torch.sort(keys)
    return index


def kernel_deltas(index: VoxelIndex, kernel: tuple, dilation: tuple) -> torch.Tensor:
    """Key offsets [K] of the kernel's taps in kernel order (see the module docstring)."""
    kd, kh, kw = kernel
    grid = torch.stack(torch.meshgrid(torch.arange(kd), torch.arange(kh), torch.arange(kw),
                                      indexing="ij"), dim=-1).reshape(-1, 3)
    steps = (grid - torch.tensor([kd // 2, kh // 2, kw // 2])) * torch.tensor(dilation)
    strides = torch.stack([index.span[1] * index.span[2], index.span[2], torch.tensor(1)])
    return steps @ strides


def range_pairs(index: VoxelIndex, deltas: torch.Tensor, coords: torch.Tensor, start: int,
                stop: int) -> tuple:
    """The neighbour pairs of output rows ``[start, stop)``: ``(src, tgt, bounds)`` — ``src``
    the input rows, ``tgt`` the output rows less ``start``, sorted by kernel offset then
    ``tgt``; offset ``k``'s pairs are ``[bounds[k], bounds[k + 1])``."""
    n = index.keys.shape[0]
    want = deltas[:, None] + index.key_of(coords[start:stop])[None, :]  # [K, rows]
    at = torch.searchsorted(index.keys, want).clamp_(max=max(n - 1, 0))
    kernel, tgt = torch.nonzero(index.keys[at] == want, as_tuple=True)
    src = index.order[at[kernel, tgt]]
    counts = torch.bincount(kernel, minlength=deltas.shape[0])
    bounds = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]).tolist()
    return src, tgt, bounds


def conv_index(x, conv) -> VoxelIndex:
    """The :class:`VoxelIndex` of sparse tensor ``x``'s level for ``conv``'s reach, from the
    port's spatial cache of ``x`` when there, else made and kept there (when ``x`` has one)."""
    _, kd, kh, kw, _ = conv.weight.shape
    dil = tuple(getattr(conv, "dilation", (1, 1, 1)))
    reach = ((kd // 2) * dil[0], (kh // 2) * dil[1], (kw // 2) * dil[2])
    get = getattr(x, "get_spatial_cache", None)
    key = f"{CACHE_KEY}_{reach}"
    found = get(key) if callable(get) else None
    if found is None:
        found = voxel_index(x.coords, reach)
        put = getattr(x, "register_spatial_cache", None)
        if callable(put):
            put(key, found)
    return found


def conv_rows(conv, feats: torch.Tensor, coords: torch.Tensor, index: VoxelIndex, start: int,
              stop: int, pre: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
              ) -> torch.Tensor:
    """Output rows ``[start, stop)`` of the submanifold convolution ``conv`` (``weight``
    ``[Co, Kd, Kh, Kw, Ci]``, ``bias``, ``dilation``) over input ``feats`` [N, Ci] at
    ``coords`` [N, 4]: ``[stop − start, Co]`` in ``feats``' dtype, the port's sums in the
    port's order. ``pre``: a per-row function applied to the input rows first (a norm and its
    activation), computed only at the rows this range reads — the same values as applying it
    to all of ``feats``, which then never exists whole."""
    co, kd, kh, kw, ci = conv.weight.shape
    count = kd * kh * kw
    dil = tuple(getattr(conv, "dilation", (1, 1, 1)))
    weights = conv.weight.reshape(co, count, ci).permute(1, 2, 0)
    src, tgt, bounds = range_pairs(index, kernel_deltas(index, (kd, kh, kw), dil), coords,
                                   start, stop)
    device = feats.device
    if pre is not None:
        rows, src = torch.unique(src, return_inverse=True)
        source = pre(feats.index_select(0, rows.to(device)))
    else:
        source = feats
    src, tgt = src.to(device), tgt.to(device)
    out = torch.zeros(stop - start, co, dtype=feats.dtype, device=device)
    for k in range(count):
        lo, hi = bounds[k], bounds[k + 1]
        if lo == hi:
            continue
        picked = src[lo:hi]
        if hi - lo < MIN_ROWS:  # padded with row 0, dropped after the product
            picked = torch.cat([picked, picked.new_zeros(MIN_ROWS - (hi - lo))])
        edge = (source.index_select(0, picked) @ weights[k])[:hi - lo]
        add_rows(out, tgt[lo:hi], edge)
    if conv.bias is not None:
        out = out + conv.bias
    return out


def add_rows(out: torch.Tensor, rows: torch.Tensor, edge: torch.Tensor) -> None:
    """``out[rows] += edge`` in place, ``rows`` int64 [m] distinct (one offset's targets),
    ``edge`` [m, Co] in ``out``'s dtype: each element gets one addition, rounded once to the
    dtype, as the port's ``+=`` does. On the CPU by ``index_put_(accumulate=True)``: with
    distinct rows that is the same single addition per element, without the fp16 gather and
    write-back that ``+=`` by advanced indexing makes (3-5 x the time of the product at the
    suite's sizes, torch 2.13); elsewhere (MPS, whose accumulating put was not run here) by
    ``+=``."""
    if out.device.type == "cpu":
        out.index_put_((rows,), edge, accumulate=True)
    else:
        out[rows] += edge
