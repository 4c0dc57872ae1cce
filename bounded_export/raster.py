"""Rasterise the UV layout: which face covers each texel, and where on the face.

Our own numpy code, in bounded chunks: the port rasterises with nvdiffrast / mtldiffrast on the
GPU, and the CPU libraries we bundle have no rasteriser that returns a face id and barycentric
coordinates per pixel (Pillow's ``ImageDraw`` fills polygons with one colour). A texel
``(row, col)`` is covered by a face when its centre ``(col + 0.5, row + 0.5)`` (in texels, v
growing with the row) lies inside the face's UV triangle (edges included).

Faces are taken in chunks whose bounding boxes hold at most ``chunk_texels`` candidate texels
together (a face larger than that is its own chunk), so the temporaries are bounded by the
budget, not by the texture or the mesh.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

EDGE_EPS = 1e-7


def _boxes(px: np.ndarray, grow: float = 0.0
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per face [F, 3, 2] texel-space corners → first column, first row, columns, rows of the
    texel centres its bounding box (grown by ``grow`` texels) may contain."""
    lo = np.ceil(px.min(axis=1) - 0.5 - grow).astype(np.int64)
    hi = np.floor(px.max(axis=1) - 0.5 + grow).astype(np.int64)
    n = np.maximum(hi - lo + 1, 0)
    return lo[:, 0], lo[:, 1], n[:, 0], n[:, 1]


def chunks(uv: np.ndarray, faces: np.ndarray, size: int, chunk_texels: int,
           grow: float = 0.0) -> Iterator:
    """Yield ``(face_ids int64 [k], rows int64 [k], cols int64 [k], bary float64 [k, 3],
    outside float64 [k])`` for the texels of consecutive face chunks of a ``size``² texture
    whose centre lies inside a face (``outside`` 0) or within ``grow`` texels outside it
    (``outside``: that distance; the barycentric coordinates then extrapolate the face's
    plane) — the bake's conservative border, so that bilinear filtering at a chart's edge reads
    its own face's colour."""
    starts = _chunk_starts(uv, faces, size, chunk_texels, grow)
    for begin, end in itertools.pairwise(starts):
        yield _raster(uv, faces, size, begin, end, grow)


def _chunk_starts(uv, faces, size, chunk_texels, grow=0.0) -> list[int]:
    """Face indices where chunks begin (and ``len(faces)``): cuts of the running count of
    candidate texels every ``chunk_texels`` (a chunk overshoots by at most one face)."""
    counts = np.empty(len(faces), dtype=np.int64)
    step = 1 << 18
    for begin in range(0, len(faces), step):
        _x, _y, nx, ny = _boxes(uv[faces[begin:begin + step]].astype(np.float64) * size, grow)
        counts[begin:begin + step] = nx * ny
    total = np.cumsum(counts)
    cuts = np.searchsorted(total, np.arange(chunk_texels, int(total[-1]) if len(total) else 0,
                                            chunk_texels), side="right")
    return [0] + sorted({int(c) for c in cuts if 0 < c < len(faces)}) + [len(faces)]


def _raster(uv, faces, size, begin, end, grow=0.0):
    ids = np.arange(begin, end)
    px = uv[faces[begin:end]].astype(np.float64) * size
    x0, y0, nx, ny = _boxes(px, grow)
    counts = nx * ny
    which = np.repeat(np.arange(len(ids)), counts)
    local = np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
    cols = x0[which] + local % np.maximum(nx[which], 1)
    rows = y0[which] + local // np.maximum(nx[which], 1)
    cx, cy = cols + 0.5, rows + 0.5
    a, b, c = px[which, 0], px[which, 1], px[which, 2]
    det = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    safe = np.where(np.abs(det) > 1e-18, det, 1.0)
    w1 = ((cx - a[:, 0]) * (c[:, 1] - a[:, 1]) - (cy - a[:, 1]) * (c[:, 0] - a[:, 0])) / safe
    w2 = ((b[:, 0] - a[:, 0]) * (cy - a[:, 1]) - (b[:, 1] - a[:, 1]) * (cx - a[:, 0])) / safe
    w0 = 1.0 - w1 - w2
    bary = np.stack([w0, w1, w2], axis=1)
    # distance (texels) outside each edge line: w_i times the height over the opposite edge
    heights = np.abs(det)[:, None] / np.maximum(np.stack(
        [np.hypot(*(c - b).T), np.hypot(*(a - c).T), np.hypot(*(b - a).T)], axis=1), 1e-18)
    outside = np.maximum((-bary * heights).max(axis=1), 0.0)
    outside[(bary >= -EDGE_EPS).all(axis=1)] = 0.0
    keep = ((np.abs(det) > 1e-18) & (outside <= grow) & (rows >= 0) & (rows < size)
            & (cols >= 0) & (cols < size))
    return ids[which[keep]], rows[keep], cols[keep], bary[keep], outside[keep]
