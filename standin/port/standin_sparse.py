"""Sparse trilinear sampling for the stand-in port (not a module of the real port): the stand-in
``flex_gemm``'s ``grid_sample_3d`` and the stand-in ``o_voxel``'s dense fallback give the same
values from the voxels without a dense volume. Convention of the real flex_gemm sampler: voxel
``i`` holds its value at ``i + 0.5`` in grid units, so a point at grid position ``q`` reads the
eight voxels around ``q - 0.5``; a missing neighbour contributes nothing and the remaining
weights are renormalised; a point with none of its eight gets zeros."""
from __future__ import annotations

import numpy as np
import torch


def sparse_trilinear(feats, coords, shape, grid):
    """feats [N, C] at ``coords`` [N, 4] (batch, x, y, z), ``shape`` (B, C, D, H, W),
    ``grid`` [..., 3] points in voxel units → [M, C] (see the module docstring)."""
    size = np.array([int(s) for s in shape[2:5]], dtype=np.int64)
    c = coords[:, 1:4].long().cpu().numpy()
    key = (c[:, 0] * size[1] + c[:, 1]) * size[2] + c[:, 2]
    order = np.argsort(key)
    keys = key[order]
    values = feats.detach().cpu().float().numpy()[order]
    q = grid.reshape(-1, 3).detach().cpu().double().numpy() - 0.5
    base = np.floor(q).astype(np.int64)
    frac = q - base
    total = np.zeros((len(q), values.shape[1]))
    weight = np.zeros(len(q))
    for corner in range(8):
        step = np.array([corner >> 2 & 1, corner >> 1 & 1, corner & 1])
        cell = base + step
        inside = ((cell >= 0) & (cell < size)).all(axis=1)
        want = (cell[:, 0] * size[1] + cell[:, 1]) * size[2] + cell[:, 2]
        at = np.clip(np.searchsorted(keys, want), 0, max(len(keys) - 1, 0))
        hit = inside & (len(keys) > 0) & (keys[at] == want if len(keys) else False)
        w = np.prod(np.where(step == 1, frac, 1.0 - frac), axis=1) * hit
        total += w[:, None] * values[at]
        weight += w
    found = weight > 1e-12
    total[found] /= weight[found, None]
    total[~found] = 0.0
    return torch.from_numpy(total).to(feats.dtype)


#: Largest box (cells) the neighbour map indexes with a dense table; larger ones use sorted keys.
DENSE_TABLE_CELLS = 1 << 22


def submanifold_neighbours(coords: torch.Tensor, kernel_size, dilation):
    """The neighbour map of a submanifold sparse convolution: ``(src, tgt, kernel)`` int64 [E]
    on the CPU — for each kernel offset in turn (``kernel = kz·Kh·Kw + ky·Kw + kx``), the voxels
    ``tgt`` in ascending order whose neighbour ``tgt + offset`` exists, that neighbour's row
    being ``src``. The offset of ``(kz, ky, kx)`` is ``((kz − Kd//2)·dz, (ky − Kh//2)·dy,
    (kx − Kw//2)·dx)`` on coords ``(x, y, z)``: the pairing and order of the port's ``conv_none``
    map, which loops over voxels in Python.

    All offsets are looked up at once: in a dense table of rows over the voxels' bounding box
    (grown by the kernel's reach) when it has at most ``DENSE_TABLE_CELLS`` cells, else by
    ``torch.searchsorted`` in the sorted keys. coords: int [N, 4] (batch, x, y, z), unique rows;
    kernel_size, dilation: 3-tuples (d, h, w). Written by hand: no CPU library here offers a
    sparse-convolution neighbour map."""
    kd, kh, kw = kernel_size
    dz, dy, dx = dilation
    c = coords.detach().cpu().long()
    n = c.shape[0]
    if n == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty.clone(), empty.clone()
    reach = torch.tensor([(kd // 2) * dz, (kh // 2) * dy, (kw // 2) * dx])
    low = c[:, 1:].min(0).values - reach
    xyz = c[:, 1:] - low  # every neighbour lands in [0, span): no key wraps
    span = xyz.max(0).values + reach + 1
    grid = torch.stack(torch.meshgrid(torch.arange(kd), torch.arange(kh), torch.arange(kw),
                                      indexing="ij"), dim=-1).reshape(-1, 3)
    offsets = (grid - torch.tensor([kd // 2, kh // 2, kw // 2])) * torch.tensor([dz, dy, dx])
    strides = torch.tensor([span[1] * span[2], span[2], 1])
    base = c[:, 0] * int(span.prod()) + xyz @ strides  # [N]
    want = base[None, :] + (offsets @ strides)[:, None]  # [K, N]
    cells = int(span.prod()) * (int(c[:, 0].max()) + 1)
    if cells <= DENSE_TABLE_CELLS:
        table = torch.full((cells,), -1, dtype=torch.long)
        table[base] = torch.arange(n)
        rows = table[want]
        kernel, tgt = torch.nonzero(rows >= 0, as_tuple=True)
        return rows[kernel, tgt], tgt, kernel
    order = torch.argsort(base)
    ordered = base[order]
    at = torch.searchsorted(ordered, want).clamp_(max=n - 1)
    kernel, tgt = torch.nonzero(ordered[at] == want, as_tuple=True)
    return order[at[kernel, tgt]], tgt, kernel
