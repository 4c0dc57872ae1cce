"""Trilinear sampling of the sparse voxels through a sorted-key lookup (never a dense grid³).

Each voxel's key is ``(x·R + y)·R + z`` (int64, ``R`` = resolution); the keys are sorted once
and every look-up is ``np.searchsorted`` — O(log N) per corner, memory O(N). Our own code: the
port uses flex_gemm's GPU hash map for the same job, and no CPU library offers a sparse
trilinear sample.

**Convention** — the port's (flex_gemm's ``grid_sample_3d``, called by o_voxel's ``to_glb``
with ``grid = (point − origin) / voxel_size``): voxel ``i`` spans ``[origin + i·s,
origin + (i + 1)·s)`` and its value sits at its centre, ``i + 0.5`` in grid units. A point at
grid position ``q`` is interpolated from the eight voxels around ``q − 0.5`` with the usual
trilinear weights. Sampling at the centres is what makes a surface lying inside a voxel read
that voxel's value (with corners at ``i`` every sample would be shifted half a voxel).

**Missing neighbours** (the voxels are a shell around the surface; a corner may be outside the
grid or absent): as flex_gemm, a missing corner contributes nothing and the remaining weights
are renormalised to sum to 1. When all eight are missing (the point is more than about a voxel
from every voxel) the sample is marked not found; the bake leaves that texel to the seam fill,
which gives it the nearest baked texel's value.
"""
from __future__ import annotations

import numpy as np


class SparseVoxels:
    """The asset's voxels for sampling: ``coords`` int [N, 3] (x, y, z), ``attrs`` float32
    [N, C], ``origin`` [3], ``voxel_size`` (float), ``resolution`` (int). Keeps the sorted
    keys (8 B a voxel) and the attributes in key order (a copy; the caller may drop its own)."""

    def __init__(self, coords, attrs, origin, voxel_size: float, resolution: int):
        self.resolution = int(resolution)
        self.origin = np.asarray(origin, dtype=np.float64).reshape(3)
        self.voxel_size = float(voxel_size)
        keys = self._key(np.asarray(coords, dtype=np.int64))
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        del keys
        self.attrs = np.ascontiguousarray(np.asarray(attrs, dtype=np.float32)[order])
        self.channels = self.attrs.shape[1]

    def _key(self, cells: np.ndarray) -> np.ndarray:
        r = self.resolution
        return (cells[:, 0] * r + cells[:, 1]) * r + cells[:, 2]

    def lookup(self, cells: np.ndarray) -> np.ndarray:
        """Row of each cell (int64 [M, 3]) in the attributes, or -1 where there is no voxel
        (or the cell is off the grid)."""
        return self._pair(cells)[0]

    def _pair(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of each cell and of its +z neighbour (-1 where absent): one search for both,
        as the neighbour's key is the next one in sorted order when it exists."""
        r, n = self.resolution, len(self.keys)
        inside_xy = ((cells[:, :2] >= 0) & (cells[:, :2] < r)).all(axis=1)
        z = cells[:, 2]
        keys = self._key(np.where(inside_xy[:, None], cells, 0))
        at = np.minimum(np.searchsorted(self.keys, keys), n - 1)
        here = inside_xy & (z >= 0) & (z < r) & (self.keys[at] == keys)
        up_at = np.minimum(at + here, n - 1)
        up = inside_xy & (z + 1 >= 0) & (z + 1 < r) & (self.keys[up_at] == keys + 1)
        return np.where(here, at, -1), np.where(up, up_at, -1)

    def sample(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Trilinear values at ``points`` (float [M, 3], the asset's units): (float32 [M, C],
        found bool [M]). Not-found rows are 0."""
        q = (np.asarray(points, dtype=np.float64) - self.origin) / self.voxel_size - 0.5
        base = np.floor(q)
        frac = (q - base).astype(np.float32)
        base = base.astype(np.int64)
        total = np.zeros((len(q), self.channels), dtype=np.float32)
        weight_sum = np.zeros(len(q), dtype=np.float32)
        for dx in (0, 1):
            wx = frac[:, 0] if dx else 1.0 - frac[:, 0]
            for dy in (0, 1):
                wxy = wx * (frac[:, 1] if dy else 1.0 - frac[:, 1])
                rows = self._pair(base + np.array([dx, dy, 0]))
                for dz, row in enumerate(rows):
                    w = wxy * (frac[:, 2] if dz else 1.0 - frac[:, 2])
                    w[row < 0] = 0.0
                    total += w[:, None] * self.attrs[np.maximum(row, 0)]
                    weight_sum += w
        found = weight_sum > 1e-12
        total[found] /= weight_sum[found, None]
        total[~found] = 0.0
        return total, found
