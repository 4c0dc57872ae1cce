"""Surface of a voxel occupancy grid as a triangle mesh (stand-in for the real FDG extractor).

Every face between an occupied and an empty cell becomes two triangles; vertices lie on the
cell corners of the [-0.5, 0.5]^3 box. Written by hand because trimesh's marching cubes needs
scikit-image, which this project does not install.
"""
from __future__ import annotations

import os

import numpy as np
import torch


def cap_partial_quads() -> bool:
    """The ``PIXAL3D_FDG_CAP_PARTIAL_QUADS`` switch, read from the environment at extraction
    time as the real ``mesh_extract.py`` does (``generate_mps._configure_fdg_environment`` sets
    it). The stand-in surface has no partial quads, so it changes nothing here."""
    return os.environ.get("PIXAL3D_FDG_CAP_PARTIAL_QUADS", "1") == "1"


def voxel_surface_to_mesh(occupied: torch.Tensor):
    """occupied: bool [R, R, R] -> (vertices float32 [V, 3], faces int32 [F, 3]) as tensors."""
    cap_partial_quads()
    occ = occupied.cpu().numpy().astype(bool)
    res = occ.shape[0]
    padded = np.pad(occ, 1)
    quads = []
    for axis in range(3):
        for sign in (1, -1):
            neighbour = np.roll(padded, -sign, axis=axis)[1:-1, 1:-1, 1:-1]
            cells = np.argwhere(occ & ~neighbour)
            if cells.size == 0:
                continue
            base = cells.astype(np.int64).copy()
            if sign > 0:
                base[:, axis] += 1
            u, v = [a for a in range(3) if a != axis]
            c0 = base.copy()
            c1 = base.copy()
            c1[:, u] += 1
            c2 = base.copy()
            c2[:, u] += 1
            c2[:, v] += 1
            c3 = base.copy()
            c3[:, v] += 1
            quad = np.stack([c0, c1, c2, c3], axis=1)
            if (sign > 0) != ((v - u) % 3 == 1):
                quad = quad[:, ::-1]
            quads.append(quad)
    if not quads:
        return torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int32)
    corners = np.concatenate(quads).reshape(-1, 3)
    unique, inverse = np.unique(corners, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1, 4)
    faces = np.concatenate([inverse[:, [0, 1, 2]], inverse[:, [0, 2, 3]]])
    vertices = unique.astype(np.float32) / res - 0.5
    return torch.from_numpy(vertices), torch.from_numpy(faces.astype(np.int32))
