"""Inflate the silhouette into a closed, rounded body (stage ``shape``).

Depth follows the silhouette through a Poisson equation, the inflation used for sketch-based
modelling and 2.5-D shading (e.g. Johnston, "Lumo", 2002): solve ``∇²h = -2`` inside the silhouette
with ``h = 0`` on its edge, then take ``depth = rim + scale · √h``. For a strip of half-width ``w``
this gives ``h = w² − x²``, a circular cross-section of radius ``w``: thin limbs are thin, the torso
is round, and depth grows with the local width, not with a global constant. A disc of radius R
comes out as a half-ellipsoid of depth 0.71 R. scipy's sparse direct solver (SuperLU) solves it.

The mesh: a front sheet (z = +depth) and a back sheet (z = −depth) over the grid's cell corners,
two triangles per cell each, joined along every silhouette edge by a wall of height ``2·rim``. Every
edge is shared by exactly two faces with opposite directions, so the mesh is watertight and
consistently wound (outward normals) by construction; :func:`grid.remove_pinches` keeps every
vertex manifold.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import trimesh
from scipy import sparse
from scipy.sparse.linalg import spsolve
from trimesh.smoothing import filter_taubin

from .grid import Grid

#: depth of the body relative to a round cross-section (1.0 = limbs as deep as they are wide).
DEFAULT_DEPTH_SCALE = 0.8
#: half-thickness of the rim where front and back meet, in cells.
RIM_CELLS = 0.5
#: Taubin smoothing of the silhouette outline (Taubin, "A signal processing approach to fair
#: surface design", SIGGRAPH 1995): passes, and the shrink / inflate factors of each pass. Turns
#: the cell staircase into a smooth outline while keeping its area; vertices move < 0.5 cell.
OUTLINE_PASSES = 4
OUTLINE_LAMBDA, OUTLINE_MU = 0.5, -0.53
#: then Taubin smoothing of the whole surface (trimesh.smoothing.filter_taubin, which follows
#: Vollmer et al. 1999): iterations and factors (1/λ − 1/ν = 0.077, inside their 0..0.1 range).
#: Removes the ripples the cell staircase leaves where the body curves steeply into the rim.
SURFACE_ITERATIONS = 10
SURFACE_LAMBDA, SURFACE_NU = 0.5, 0.52


@dataclass
class Body:
    """The inflated body in grid units (cells), before it is scaled to metres.

    Attributes:
        vertices: float64 ``(N, 3)``: x = column (right), y = −row (up), z = depth (towards the
            viewer on the front sheet).
        faces: int64 ``(F, 3)``, counter-clockwise seen from outside.
        rows, cols: float ``(N,)`` where each vertex sits on the grid, in cells (its corner; on the
            outline, the smoothed position), for texture coordinates: ``vertices[:, 0] == cols``
            and ``vertices[:, 1] == -rows``.
        front: bool ``(N,)`` True for the front sheet's vertices.
    """

    vertices: np.ndarray
    faces: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    front: np.ndarray


def corner_counts(cells: np.ndarray) -> np.ndarray:
    """How many of the four cells around each corner are in the silhouette: int ``(gh+1, gw+1)``."""
    p = np.pad(cells, 1).astype(np.int8)
    return p[:-1, :-1] + p[:-1, 1:] + p[1:, :-1] + p[1:, 1:]


def solve_height(cells: np.ndarray) -> np.ndarray:
    """Solve ``∇²h = −2`` on the interior corners, ``h = 0`` on the silhouette's edge.

    Args:
        cells: bool ``(gh, gw)`` silhouette cells.

    Returns:
        float64 ``(gh+1, gw+1)``: h at every corner (cells², 0 outside and on the edge).
    """
    counts = corner_counts(cells)
    interior = counts == 4
    h = np.zeros(counts.shape)
    n = int(interior.sum())
    if n == 0:
        return h
    index = np.full(counts.shape, -1, np.int64)
    index[interior] = np.arange(n)
    ii, jj = np.nonzero(interior)
    rows, cols = [np.arange(n)], [np.arange(n)]
    vals = [np.full(n, 4.0)]
    # Interior corners are never on the array's edge (they have four cells around them).
    for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        k = index[ii + di, jj + dj]
        ok = k >= 0
        rows.append(np.arange(n)[ok])
        cols.append(k[ok])
        vals.append(np.full(int(ok.sum()), -1.0))
    a = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(n, n))
    h[interior] = np.maximum(spsolve(a, np.full(n, 2.0)), 0.0)
    return h


def inflate_body(grid: Grid, *, depth_scale: float = DEFAULT_DEPTH_SCALE, rim: float = RIM_CELLS,
                 smooth: int = SURFACE_ITERATIONS,
                 on_progress: Callable[[float], None] | None = None) -> Body:
    """Build the closed body over the grid.

    Args:
        grid: the working grid (no diagonal-only contacts).
        depth_scale: multiplies √h (1.0 = circular cross-sections of thin parts).
        rim: half-thickness at the silhouette's edge, cells (> 0 keeps front and back apart).
        smooth: Taubin iterations over the whole surface (0 = none); the connectivity, and so
            watertightness, never changes.
        on_progress: called with the fraction done (0..1) after each step, or None.

    Returns:
        A :class:`Body` in grid units.
    """
    cells = grid.cells
    counts = corner_counts(cells)
    used = counts > 0
    report = on_progress or (lambda fraction: None)
    depth = rim + depth_scale * np.sqrt(solve_height(cells))
    report(0.5)
    n = int(used.sum())
    front_index = np.full(counts.shape, -1, np.int64)
    front_index[used] = np.arange(n)
    vr, vc = np.nonzero(used)
    d = depth[vr, vc]

    ci, cj = np.nonzero(cells)
    corners = (front_index[ci, cj], front_index[ci, cj + 1], front_index[ci + 1, cj + 1],
               front_index[ci + 1, cj])  # a, b, c and the bottom-left corner ("d" in the docs)
    front = _front_sheet(depth, ci, cj, corners)
    back = front[:, ::-1] + n
    u, v = _silhouette_edges(cells, ci, cj, corners)
    wall = np.concatenate([np.stack([v, u, u + n], 1), np.stack([v, u + n, v + n], 1)])

    x, y = smooth_outline(vc.astype(np.float64), vr.astype(np.float64), u, v)
    vertices = np.concatenate([np.stack([x, -y, d], axis=1), np.stack([x, -y, -d], axis=1)])
    faces = np.concatenate([front, back, wall]).astype(np.int64)
    report(0.7)
    if smooth > 0:
        mesh = trimesh.Trimesh(vertices, faces, process=False)
        filter_taubin(mesh, lamb=SURFACE_LAMBDA, nu=SURFACE_NU, iterations=smooth)
        vertices = np.asarray(mesh.vertices, dtype=np.float64)
    report(1.0)
    # Front and back vertices of one corner may drift apart in x, y while smoothing; each keeps
    # its own position for texture coordinates.
    return Body(
        vertices=vertices,
        faces=faces,
        rows=-vertices[:, 1].copy(),
        cols=vertices[:, 0].copy(),
        front=np.concatenate([np.ones(n, bool), np.zeros(n, bool)]),
    )


def _front_sheet(depth: np.ndarray, ci: np.ndarray, cj: np.ndarray, corners: tuple) -> np.ndarray:
    """Two triangles per cell ``(ci, cj)`` of the front sheet, over its corner vertex indices
    ``corners`` (top-left, top-right, bottom-right, bottom-left); each quad is split along the
    diagonal whose ends are higher (``depth``): closer to a convex surface."""
    a, b, c, e = corners
    main = depth[ci, cj] + depth[ci + 1, cj + 1] >= depth[ci, cj + 1] + depth[ci + 1, cj]
    t1 = np.where(main[:, None], np.stack([a, e, c], 1), np.stack([a, e, b], 1))
    t2 = np.where(main[:, None], np.stack([a, c, b], 1), np.stack([b, e, c], 1))
    return np.concatenate([t1, t2])


def _silhouette_edges(cells: np.ndarray, ci: np.ndarray, cj: np.ndarray,
                      corners: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The silhouette's edges ``(u, v)`` (front vertex indices), directed as the front sheet
    runs along them (counter-clockwise): each cell side with no cell beyond it."""
    a, b, c, e = corners
    p = np.pad(cells, 1)
    up = ~p[ci, cj + 1]
    down = ~p[ci + 2, cj + 1]
    left = ~p[ci + 1, cj]
    right = ~p[ci + 1, cj + 2]
    u = np.concatenate([b[up], e[down], a[left], c[right]])
    v = np.concatenate([a[up], c[down], e[left], b[right]])
    return u, v


def smooth_outline(x: np.ndarray, y: np.ndarray, u: np.ndarray, v: np.ndarray,
                   passes: int = OUTLINE_PASSES) -> tuple[np.ndarray, np.ndarray]:
    """Taubin-smooth the outline vertices in the image plane; other vertices stay.

    Args:
        x, y: float ``(N,)`` vertex positions (cells).
        u, v: int ``(E,)`` the outline's directed edges ``u → v``; every outline vertex has
            exactly one edge out and one in (no diagonal-only contacts).

    Returns:
        New ``(x, y)`` arrays.
    """
    if u.size == 0:
        return x, y
    nxt = np.empty(len(x), np.int64)
    prv = np.empty(len(x), np.int64)
    nxt[u], prv[v] = v, u
    p = np.stack([x, y], axis=1)
    for _ in range(passes):
        for factor in (OUTLINE_LAMBDA, OUTLINE_MU):
            p[u] += factor * ((p[prv[u]] + p[nxt[u]]) / 2 - p[u])
    return p[:, 0].copy(), p[:, 1].copy()
