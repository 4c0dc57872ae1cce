"""Stand-in of ``flex_gemm.ops.grid_sample.grid_sample_3d``: sample a *sparse* voxel volume at
points without building the dense volume (a hash of the occupied voxels, nearest voxel).

``PIXAL3D_STANDIN_NO_FLEX_GEMM=1`` makes this module fail to import, as on a Mac whose
``flex_gemm`` build is missing: o_voxel then takes its dense fallback (tests use it to check
that the adapter refuses that fallback).
"""
from __future__ import annotations

import os

import numpy as np
import torch

if os.environ.get("PIXAL3D_STANDIN_NO_FLEX_GEMM", "").strip() == "1":
    raise ImportError("flex_gemm is hidden by PIXAL3D_STANDIN_NO_FLEX_GEMM=1 (stand-in)")


def grid_sample_3d(feats, coords, shape, grid, mode="trilinear"):
    """feats [N, C] at ``coords`` [N, 4] (batch, x, y, z); ``grid`` [1, M, 3] in voxel units.

    Returns [1, M, C]: each point takes the features of the voxel that holds it (zero where no
    voxel does). ``shape`` is (B, C, D, H, W). The stand-in samples the nearest voxel; the real
    library interpolates trilinearly over the occupied neighbours.
    """
    size = np.array([int(s) for s in shape[2:5]], dtype=np.int64)
    c = coords[:, 1:4].long().cpu().numpy()
    key = (c[:, 0] * size[1] + c[:, 1]) * size[2] + c[:, 2]
    order = np.argsort(key)
    pts = np.clip(np.floor(grid.reshape(-1, 3).cpu().numpy()).astype(np.int64), 0, size - 1)
    want = (pts[:, 0] * size[1] + pts[:, 1]) * size[2] + pts[:, 2]
    pos = np.clip(np.searchsorted(key[order], want), 0, len(key) - 1)
    hit = key[order][pos] == want
    out = torch.zeros(len(want), feats.shape[1], dtype=feats.dtype)
    idx = torch.from_numpy(order[pos[hit]])
    out[torch.from_numpy(hit)] = feats.cpu()[idx]
    return out.unsqueeze(0)
