"""The body's surface: marching cubes (scikit-image's ``measure.marching_cubes``, Lewiner et al.)
of the field at the grid's resolution, one slab of z layers at a time, stitched into one closed
mesh.

Why slabs: the field of a 1024 grid is 10⁹ samples (4 GiB as float32) even cropped to the
body about a quarter of that; a slab of ``SLAB`` layers over the body's x/y extent is tens of MB,
and marching cubes is local, so consecutive slabs share one layer of samples and produce the
same vertices on it (the same two samples interpolated the same way). Those are merged by
position (our own code: a sort of the shared layer's vertex positions), so the stitched mesh is
as closed as one call on the whole volume would make it.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .body import BodyField

#: z layers per marching-cubes call (plus one shared with the next slab).
SLAB = 64
#: what a field sample exactly on the level becomes (voxels; far below the surface's accuracy).
_NUDGE = np.float32(1e-4)


def _merge_layer(prev_v: np.ndarray, prev_index: np.ndarray, new_v: np.ndarray,
                 new_on: np.ndarray) -> np.ndarray:
    """For the new slab's vertices on the shared layer (``new_on``, bool), the global index of
    the previous slab's vertex at the same position (``prev_v``/``prev_index``: the previous
    slab's vertices on that layer and their global indices). Raises ``RuntimeError`` when one
    has no twin (the slabs disagree: the stitching would leave a hole)."""
    key_prev = np.ascontiguousarray(prev_v[:, :2], np.float32).view(np.uint64).ravel()
    key_new = np.ascontiguousarray(new_v[new_on][:, :2], np.float32).view(np.uint64).ravel()
    order = np.argsort(key_prev)
    pos = np.searchsorted(key_prev[order], key_new)
    pos = np.minimum(pos, len(order) - 1)
    if len(order) == 0 or not (key_prev[order][pos] == key_new).all():
        raise RuntimeError("marching-cubes slabs do not agree on their shared layer")
    return prev_index[order][pos]


def march(field: BodyField, *, slab: int = SLAB,
          on_progress: Callable[[float], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Surface the field's zero level on the voxel grid.

    Args:
        field: the body (see ``body.py``).
        slab: z layers per marching-cubes call (≥ 2).
        on_progress: called with the fraction of slabs done, or None.

    Returns:
        ``(vertices, faces)``: float32 ``(V, 3)`` in voxel units of the grid (a voxel ``i`` spans
        ``[i, i + 1)``, its centre at ``i + 0.5``), int32 ``(F, 3)`` counter-clockwise seen from
        outside (outward normals).
    """
    from skimage.measure import marching_cubes

    if slab < 2:
        raise ValueError(f"slab must be at least 2 layers, got {slab}")
    y_lo, y_hi = field.y_range()
    nz = field.planar.shape[1]
    offset = np.array([field.x0 + 0.5, y_lo + 0.5, field.z0 + 0.5], np.float32)
    verts, faces, count = [], [], 0
    prev_layer = None  # (positions, global indices) of the last slab's top-layer vertices
    starts = list(range(0, nz - 1, slab))
    for n, k0 in enumerate(starts):
        k1 = min(k0 + slab + 1, nz)
        vol = field.slab(y_lo, y_hi, k0, k1)
        if vol.max() <= 0 or vol.min() >= 0:
            prev_layer = None
            continue
        # A sample exactly on the level puts a vertex on it from every edge that meets it, each
        # slab from its own side; off the level, a shared layer's vertices come only from its
        # own edges, which both slabs interpolate alike (kept in float64 until matched).
        vol[vol == 0] = _NUDGE
        v, f, _, _ = marching_cubes(vol, level=0.0, allow_degenerate=False)
        v = v.astype(np.float64)
        v[:, 2] += k0
        index = np.arange(count, count + len(v), dtype=np.int64)
        on_bottom = v[:, 2] == k0
        if prev_layer is not None and on_bottom.any():
            index[on_bottom] = _merge_layer(*prev_layer, v, on_bottom)
        keep = ~on_bottom if prev_layer is not None else np.ones(len(v), bool)
        # renumber the kept vertices consecutively
        index[keep] = count + np.arange(int(keep.sum()))
        verts.append(v[keep].astype(np.float32))
        faces.append(index[f])
        count += int(keep.sum())
        top = v[:, 2] == k1 - 1
        prev_layer = (v[top], index[top])
        if on_progress is not None:
            on_progress((n + 1) / len(starts))
    vertices = np.concatenate(verts) + offset
    faces = np.concatenate(faces).astype(np.int32)
    return vertices, faces[:, ::-1].copy() if _inward(vertices, faces) else faces


def _inward(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Whether the faces wind inwards (the mesh's signed volume is negative)."""
    a, b, c = (vertices[faces[:, i]].astype(np.float64) for i in range(3))
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum()) < 0
