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
