"""Meshes made the way the port's decoder makes them: the stand-in port's flexible dual grid
extraction (``pixal3d.utils.mesh_extract.flexible_dual_grid_to_mesh``, o_voxel's fixed quad
order per axis, so about half the faces come out wound inward), fed the voxels of a solid —
the cells whose corners lie on both sides of its surface, each with its dual vertex on the
surface, and the crossed grid edges at their far corners. For the orient step's tests."""
from __future__ import annotations

import sys

import numpy as np

from standin import PORT_DIR


def _extract(coords: np.ndarray, dual: np.ndarray, crossed: np.ndarray, grid: int):
    import torch

    if str(PORT_DIR) not in sys.path:
        sys.path.insert(0, str(PORT_DIR))
    from pixal3d.utils.mesh_extract import flexible_dual_grid_to_mesh

    vertices, faces = flexible_dual_grid_to_mesh(
        torch.from_numpy(coords.astype(np.int64)), torch.from_numpy(dual.astype(np.float32)),
        torch.from_numpy(crossed), None, aabb=[[-0.5] * 3, [0.5] * 3], grid_size=grid)
    return vertices.numpy().astype(np.float32), faces.numpy().astype(np.int32)


def fdg_solid(inside, surface_point, grid: int):
    """(vertices float32 [V, 3], faces int32 [F, 3]) of the solid ``inside`` (points float
    [M, 3] → bool [M]) on a ``grid``³ grid over the unit box, each cell's dual vertex at
    ``surface_point`` (cell centres [M, 3] → points on the surface [M, 3]). Unused vertices
    are kept, as the port's extraction keeps them."""
    axis = np.arange(grid + 1) / grid - 0.5
    corners = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)
    solid = inside(corners.reshape(-1, 3)).reshape((grid + 1,) * 3)
    some = np.zeros((grid,) * 3, bool)
    every = np.ones((grid,) * 3, bool)
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                corner = solid[dx:dx + grid, dy:dy + grid, dz:dz + grid]
                some |= corner
                every &= corner
    coords = np.argwhere(some & ~every)
    x, y, z = coords.T
    far = solid[x + 1, y + 1, z + 1]
    crossed = np.stack([solid[x, y + 1, z + 1] != far, solid[x + 1, y, z + 1] != far,
                        solid[x + 1, y + 1, z] != far], axis=1)
    centres = (coords + 0.5) / grid - 0.5
    dual = (surface_point(centres) + 0.5) * grid - coords
    return _extract(coords, dual, crossed, grid)


def fdg_ball(grid: int = 32, centre=(0.0, 0.0, 0.0), radius=0.3):
    """A ball's FDG surface; ``radius``: a number or a function of unit directions [M, 3] →
    radii [M] (``standin.sphere_asset.radius_at``: the bumpy sphere)."""
    c = np.asarray(centre, np.float64)
    r = radius if callable(radius) else (lambda d: np.full(len(d), float(radius)))

    def direction(p):
        d = p - c
        return d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)

    return fdg_solid(lambda p: np.linalg.norm(p - c, axis=1) < r(direction(p)),
                     lambda p: c + direction(p) * r(direction(p))[:, None], grid)


def fdg_box(grid: int = 32, low=(-0.2, -0.25, -0.15), high=(0.25, 0.2, 0.1)):
    """An axis-aligned box's FDG surface, dual vertices at the cell centres."""
    lo, hi = np.asarray(low), np.asarray(high)
    return fdg_solid(lambda p: ((p > lo) & (p < hi)).all(axis=1), lambda p: p, grid)


def join(*meshes):
    """The meshes (vertices, faces) as one mesh (vertices, faces)."""
    offsets = np.cumsum([0] + [len(v) for v, _ in meshes[:-1]])
    return (np.concatenate([v for v, _ in meshes]).astype(np.float32),
            np.concatenate([f + o for (_, f), o in zip(meshes, offsets, strict=True)])
            .astype(np.int32))
