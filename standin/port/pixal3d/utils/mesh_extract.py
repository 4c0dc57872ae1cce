"""Stand-in of the port's ``pixal3d/utils/mesh_extract.py``: the pure-PyTorch flexible dual grid
mesh extraction the Mac port runs (``flexible_dual_grid_to_mesh``), and — not in the port — the
stand-in's voxel-surface mesher the stand-in o_voxel remeshes with (``voxel_surface_to_mesh``).

``flexible_dual_grid_to_mesh`` follows o_voxel's (TRELLIS.2 ``o-voxel/o_voxel/convert/
flexible_dual_grid.py``) at inference: one vertex per voxel at ``(coords + dual_vertices) ·
voxel_size + aabb[0]``; for every voxel and axis whose ``intersected`` flag is set, the quad of
the four voxels around the grid edge at the voxel's far corner along that axis (offsets x:
(0,0,0) (0,0,1) (0,1,1) (0,1,0); y: (0,0,0) (1,0,0) (1,0,1) (0,0,1); z: (0,0,0) (0,1,0) (1,1,0)
(1,0,0)), kept when all four exist; each quad split into two triangles along the diagonal whose
split weights' product is larger (``w0·w2 > w1·w3``: 0-1-2, 0-2-3; else 0-1-3, 3-1-2), or, with no
split weight, along the one whose two triangles' normals agree more. The voxel look-up uses
sorted keys and ``searchsorted`` (the port's replacement for o_voxel's CUDA hash map).
``PIXAL3D_FDG_CAP_PARTIAL_QUADS`` (read at each call; off unless set) adds one triangle for a
quad with exactly three of its four voxels, as the port's; ``PIXAL3D_FDG_VERBOSE`` prints counts.
"""
from __future__ import annotations

import os
from typing import Union

import numpy as np
import torch

_EDGE_OFFSETS = ((((0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0)),
                  ((0, 0, 0), (1, 0, 0), (1, 0, 1), (0, 0, 1)),
                  ((0, 0, 0), (0, 1, 0), (1, 1, 0), (1, 0, 0))))
_SPLIT_1 = (0, 1, 2, 0, 2, 3)
_SPLIT_2 = (0, 1, 3, 3, 1, 2)
_TRIANGLE_WITHOUT = ((3, 1, 2), (0, 2, 3), (0, 1, 3), (0, 1, 2))  # the missing corner → the rest


def _flag(name: str) -> bool:
    value = os.environ.get(name)
    return value is not None and value.strip().lower() not in {"0", "false", "no", "off", ""}


def cap_partial_quads() -> bool:
    """The ``PIXAL3D_FDG_CAP_PARTIAL_QUADS`` switch, read from the environment at extraction
    time as the port's ``mesh_extract.py`` does (``generate_mps._configure_fdg_environment``
    sets it)."""
    return _flag("PIXAL3D_FDG_CAP_PARTIAL_QUADS")


def _grid(aabb, voxel_size, grid_size, device):
    """(aabb [2, 3] float32, voxel_size [3] float32, grid_size [3] int64) from the caller's
    forms (lists, arrays or tensors; one of voxel_size / grid_size)."""
    aabb = torch.as_tensor(np.asarray(aabb, dtype=np.float32) if not torch.is_tensor(aabb)
                           else aabb, dtype=torch.float32, device=device)
    if voxel_size is not None:
        size = torch.as_tensor(np.broadcast_to(np.asarray(voxel_size, np.float32), (3,)).copy(),
                               device=device) if not torch.is_tensor(voxel_size) else voxel_size
        grid = ((aabb[1] - aabb[0]) / size).round().long()
    else:
        if grid_size is None:
            raise ValueError("Either voxel_size or grid_size must be provided")
        grid = torch.as_tensor(np.broadcast_to(np.asarray(grid_size, np.int64), (3,)).copy(),
                               device=device) if not torch.is_tensor(grid_size) \
            else grid_size.long()
        size = (aabb[1] - aabb[0]) / grid.float()
    return aabb, size, grid


def _lookup(coords: torch.Tensor, queries: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Row of each query voxel ([..., 3]) among ``coords`` [N, 3], −1 where absent or off the
    grid."""
    c = coords.long()
    q = queries.long().reshape(-1, 3)
    inside = ((q >= 0) & (q < grid)).all(dim=1)
    keys = (c[:, 0] * grid[1] + c[:, 1]) * grid[2] + c[:, 2]
    order = torch.argsort(keys)
    ordered = keys[order]
    want = (q[:, 0].clamp(min=0) * grid[1] + q[:, 1].clamp(min=0)) * grid[2] \
        + q[:, 2].clamp(min=0)
    at = torch.searchsorted(ordered, want).clamp_(max=max(len(ordered) - 1, 0))
    found = inside & (ordered[at] == want) if len(ordered) else torch.zeros_like(inside)
    return torch.where(found, order[at], torch.full_like(want, -1)).reshape(queries.shape[:-1])


def flexible_dual_grid_to_mesh(coords: torch.Tensor, dual_vertices: torch.Tensor,
                               intersected_flag: torch.Tensor,
                               split_weight: Union[torch.Tensor, None],
                               aabb, voxel_size=None, grid_size=None, train: bool = False):
    """Mesh of a flexible dual grid (see the module docstring).

    coords int [N, 3] (voxels on the grid), dual_vertices float [N, 3] (in voxel units),
    intersected_flag bool [N, 3], split_weight float [N, 1] or None; aabb [[min], [max]];
    voxel_size or grid_size (int or 3 values). Returns (vertices float32 [N, 3], faces int64
    [F, 3]) on coords' device — every voxel's vertex, used or not, as o_voxel's (none when no
    face is made, as the port's). Raises
    RuntimeError for ``train=True`` (not supported by the pure-PyTorch extractor, as the port's)
    and ValueError without voxel_size and grid_size."""
    if train:
        raise RuntimeError("Training mode is not supported by the pure PyTorch mesh extractor")
    device = coords.device
    aabb, size, grid = _grid(aabb, voxel_size, grid_size, device)
    offsets = torch.tensor(_EDGE_OFFSETS, dtype=torch.long, device=device)  # [3, 4, 3]
    corners = coords.long().reshape(-1, 1, 1, 3) + offsets  # [N, 3, 4, 3]
    connected = corners[intersected_flag.bool()]  # [M, 4, 3]
    rows = _lookup(coords, connected, grid)  # [M, 4]
    present = rows >= 0
    quads = rows[present.all(dim=1)]
    vertices = (coords.float() + dual_vertices.float()) * size + aabb[0].reshape(1, 3)
    pieces = [torch.zeros(0, 3, dtype=torch.long, device=device)]
    if len(quads):
        split_1 = quads[:, list(_SPLIT_1)]
        split_2 = quads[:, list(_SPLIT_2)]
        if split_weight is None:
            first = _alignment(vertices, split_1) > _alignment(vertices, split_2)
        else:
            w = split_weight.reshape(-1)[quads]
            first = w[:, 0] * w[:, 2] > w[:, 1] * w[:, 3]
        pieces.append(torch.where(first[:, None], split_1, split_2).reshape(-1, 3))
    partial = present.sum(dim=1) == 3
    if cap_partial_quads() and bool(partial.any()):
        missing = (~present[partial]).long().argmax(dim=1)
        keep = torch.tensor(_TRIANGLE_WITHOUT, dtype=torch.long, device=device)[missing]
        pieces.append(rows[partial].gather(1, keep))
    faces = torch.cat(pieces)
    if len(faces) == 0:  # the port's extractor gives no vertices either then
        vertices = vertices[:0]
    if _flag("PIXAL3D_FDG_VERBOSE"):
        print(f"[FDG] Extracted mesh: voxels={len(coords):,}, intersections={len(rows):,}, "
              f"full_quads={len(quads):,}, partial_tris={int(partial.sum()):,}, "
              f"faces={len(faces):,}")
    return vertices, faces


def _alignment(vertices: torch.Tensor, triangles: torch.Tensor) -> torch.Tensor:
    """|n0 · n1| of a quad's two triangles (``triangles`` [L, 6], the split's six corners)."""
    t = vertices[triangles]
    n0 = torch.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0], dim=1)
    n1 = torch.cross(t[:, 2] - t[:, 1], t[:, 3] - t[:, 1], dim=1)
    return (n0 * n1).sum(dim=1).abs()


def voxel_surface_to_mesh(occupied: torch.Tensor):
    """The boundary of an occupancy grid (not in the port: the stand-in o_voxel's remesh and
    tests use it): every face between an occupied and an empty cell becomes two triangles,
    wound outwards, vertices on the cell corners of the [-0.5, 0.5]³ box. Written by hand:
    trimesh's marching cubes needs scikit-image, which this project does not install.

    occupied: bool [R, R, R] -> (vertices float32 [V, 3], faces int32 [F, 3]) as tensors."""
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
