"""Bake the PBR textures: each covered texel's surface point (the face's corners weighted by
the texel centre's barycentric coordinates, on the decimated surface the GLB carries) → the
voxels' trilinear sample there (``voxels.SparseVoxels``) → six 8-bit channels.

The port maps each texel back to the full decoded mesh through a BVH before sampling; the
bounded engine samples on the decimated surface itself — the one the GLB shows — and keeps no
BVH over the full mesh (that BVH is part of what the issue's 70 GB is made of). The two differ
by the decimation's displacement, a small fraction of a voxel at the default target.

Texels whose centre lies up to ``GROW`` texels outside a face are baked too (from the face's
plane extended), a texel inside a face winning over such a border texel: bilinear filtering at
a chart's edge then reads that chart's own colour, not the seam fill's (measured on the 7.9 M
asset before this: points on faces touching a UV seam read back p99 106/255 against 5.7/255
inside the charts). Values are rounded to the nearest of 0..255 (the port truncates, a
−0.5/255 bias).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bounded_export.raster import chunks
from bounded_export.voxels import SparseVoxels

GROW = 1.0  # texels baked outside each face (its conservative border)


@dataclass
class Baked:
    """``channels`` uint8 [T, T, 6] (base colour RGB, metallic, roughness, alpha; rows are v),
    ``covered`` bool [T, T] (texels whose centre a face covers: the texels the surface uses),
    ``baked`` bool [T, T] (given a value: covered or on a face's border, with a voxel within
    reach), ``used`` (covered texels), ``orphans`` (covered texels with no voxel around their
    point: the seam fill gives them a colour, ``coverage``)."""

    channels: np.ndarray
    covered: np.ndarray
    baked: np.ndarray
    orphans: int
    used: int = 0


def bake(vertices: np.ndarray, faces: np.ndarray, uv: np.ndarray, voxels: SparseVoxels,
         size: int, chunk_texels: int, steps=None) -> Baked:
    """Bake a ``size``² texture for the unwrapped mesh (``vertices`` [W, 3], ``faces`` [F, 3],
    ``uv`` [W, 2]) in chunks of about ``chunk_texels`` texels; ``steps``: progress and cancel
    after each chunk."""
    channels = np.zeros((size, size, voxels.channels), dtype=np.uint8)
    covered = np.zeros((size, size), dtype=bool)
    baked = np.zeros((size, size), dtype=bool)
    best = np.full((size, size), np.inf, dtype=np.float32)  # outside distance of the writer
    for face_ids, rows, cols, bary, outside in chunks(uv, faces, size, chunk_texels, GROW):
        if steps is not None:
            steps.check()  # between the chunk's raster and its look-ups, too
        take = outside < best[rows, cols]  # a texel inside a face beats a border texel
        order = np.argsort(-outside[take], kind="stable")  # nearest written last
        face_ids, rows, cols = face_ids[take][order], rows[take][order], cols[take][order]
        bary, outside = bary[take][order], outside[take][order]
        tri = vertices[faces[face_ids]].astype(np.float64)
        points = np.einsum("kj,kjd->kd", bary, tri)
        del tri
        values, found = voxels.sample(points)
        best[rows, cols] = outside
        inner = outside == 0
        covered[rows[inner], cols[inner]] = True
        baked[rows, cols] = found
        channels[rows[found], cols[found]] = np.rint(np.clip(values[found], 0.0, 1.0) * 255)
        if steps is not None and len(face_ids):
            steps.progress(float(face_ids.max() + 1) / len(faces))
    # a texel's first inner write stands (a later one is not nearer), so ``baked`` says
    # whether the point that gave it its value found a voxel
    used = int(np.count_nonzero(covered))
    orphans = used - int(np.count_nonzero(covered & baked))
    return Baked(channels, covered, baked, orphans, used)
