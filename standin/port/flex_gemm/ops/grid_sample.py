"""Stand-in of ``flex_gemm.ops.grid_sample.grid_sample_3d``: sample a *sparse* voxel volume at
points without building the dense volume (sorted voxel keys, ``np.searchsorted``).

As the real library, trilinear over the voxels' centres (voxel ``i`` holds its value at
``i + 0.5`` in grid units, so a point at grid position ``q`` reads the eight voxels around
``q - 0.5``); a missing neighbour contributes nothing and the remaining weights are
renormalised; a point with none of its eight gets zeros.

``PIXAL3D_STANDIN_NO_FLEX_GEMM=1`` makes this module fail to import, as on a Mac whose
``flex_gemm`` build is missing: o_voxel then takes its dense fallback (tests use it to check
that the adapter refuses that fallback).
"""
from __future__ import annotations

import os

from standin_sparse import sparse_trilinear

if os.environ.get("PIXAL3D_STANDIN_NO_FLEX_GEMM", "").strip() == "1":
    raise ImportError("flex_gemm is hidden by PIXAL3D_STANDIN_NO_FLEX_GEMM=1 (stand-in)")


def grid_sample_3d(feats, coords, shape, grid, mode="trilinear"):
    """feats [N, C] at ``coords`` [N, 4] (batch, x, y, z); ``grid`` [1, M, 3] in voxel units.

    Returns [1, M, C]: the trilinear value over the occupied voxels around each point (zero
    where none is). ``shape`` is (B, C, D, H, W)."""
    return sparse_trilinear(feats, coords, shape, grid).unsqueeze(0)
