"""Bake the PBR textures: each covered texel's surface point (the face's corners weighted by
the texel centre's barycentric coordinates, on the decimated surface the GLB carries) → the
voxels' trilinear sample there (``voxels.SparseVoxels``) → six 8-bit channels.

The port maps each texel back to the full decoded mesh through a BVH before sampling; the
bounded engine samples on the decimated surface itself — the one the GLB shows — and keeps no
BVH over the full mesh (that BVH is part of what the issue's 70 GB is made of). The two differ
by the decimation's displacement, a small fraction of a voxel at the default target.

Values are rounded to the nearest of 0..255 (the port truncates, a −0.5/255 bias).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .raster import chunks
from .voxels import SparseVoxels


@dataclass
class Baked:
    """``channels`` uint8 [T, T, 6] (base colour RGB, metallic, roughness, alpha; rows are v),
    ``covered`` bool [T, T] (texels a face covers), ``baked`` bool [T, T] (covered and sampled:
    a voxel within reach), ``orphans`` (covered texels with no voxel around their point)."""

    channels: np.ndarray
    covered: np.ndarray
    baked: np.ndarray
    orphans: int


def bake(vertices: np.ndarray, faces: np.ndarray, uv: np.ndarray, voxels: SparseVoxels,
         size: int, chunk_texels: int, steps=None) -> Baked:
    """Bake a ``size``² texture for the unwrapped mesh (``vertices`` [W, 3], ``faces`` [F, 3],
    ``uv`` [W, 2]) in chunks of about ``chunk_texels`` texels; ``steps``: progress and cancel
    after each chunk."""
    channels = np.zeros((size, size, voxels.channels), dtype=np.uint8)
    covered = np.zeros((size, size), dtype=bool)
    baked = np.zeros((size, size), dtype=bool)
    orphans = 0
    for face_ids, rows, cols, bary in chunks(uv, faces, size, chunk_texels):
        tri = vertices[faces[face_ids]].astype(np.float64)
        points = np.einsum("kj,kjd->kd", bary, tri)
        del tri
        values, found = voxels.sample(points)
        covered[rows, cols] = True
        baked[rows[found], cols[found]] = True
        channels[rows[found], cols[found]] = np.rint(np.clip(values[found], 0.0, 1.0) * 255)
        orphans += int((~found).sum())
        if steps is not None and len(face_ids):
            steps.progress(float(face_ids[-1] + 1) / len(faces))
    return Baked(channels, covered, baked & covered, orphans)
