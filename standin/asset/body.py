"""The character's body as a scalar field on the asset's voxel grid.

The body is the built-in backend's inflated silhouette (``runner.backends.builtin``: its matte,
its working grid and its Poisson height, used here as a library): the picture's matte resampled
to one grid cell per voxel (``make_grid`` with ``fill · resolution`` cells along the longer side),
the height ``h`` of ``∇²h = −2`` inside it (``solve_height``), and a half-depth
``rim + depth_scale · √h`` at every cell, the built-in body's profile. Outside the silhouette the
field continues as minus the distance to it, so the zero level closes around the rim.

``BodyField.value(x, y, z)`` is ``G(x, z) − |y_c − y_mid|``: positive inside the body,
negative outside, zero on its surface, in voxel units, on the port's axes (x right, y depth with
the front towards −y, z up; see ``standin/asset/__init__.py``). It is evaluated one slab at a
time by ``surface.py``, so no dense ``resolution³`` array is ever built.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from runner.backends.builtin.grid import Grid, make_grid
from runner.backends.builtin.inflate import DEFAULT_DEPTH_SCALE, solve_height
from runner.backends.builtin.matte import Matte

#: share of the grid the character's longer side spans (TRELLIS-style assets fill their cube).
DEFAULT_FILL = 0.9
#: half-thickness of the body at its silhouette edge, voxels (a decoded thin part is ≥ 2 voxels).
RIM_VOXELS = 1.0
#: Gaussian smoothing of the planar field, voxels: turns the cell staircase of the outline into a
#: smooth curve (the decoded meshes are smooth at the voxel scale too).
SMOOTH_VOXELS = 0.8
#: cells of outside margin kept around the silhouette in the planar field.
MARGIN = 3
#: surface relief from the picture's detail: amplitude as a share of the grid (0.008 → about 8
#: voxels at 1024), band-pass of the picture's luminance between these Gaussian scales (shares
#: of the silhouette's longer side), tapered to nothing over TAPER voxels inside the rim. A
#: decoded character has folds, straps and hair at this scale; a plain inflated body has none.
RELIEF = 0.008
RELIEF_FINE, RELIEF_COARSE = 0.002, 0.02
TAPER = 4.0


@dataclass
class BodyField:
    """The planar half-depth field and where it sits on the voxel grid.

    Attributes:
        planar: float32 ``(nx, nz)``: ``G`` at voxel centres ``x0 + i + 0.5``, ``z0 + k + 0.5``
            (voxel units; > 0 inside the silhouette, where it is the body's half-depth).
        x0, z0: voxel index of ``planar[0, 0]``.
        y_mid: the body's mid-plane, voxel units (an integer: a boundary between voxels).
        resolution: voxels along each axis of the grid.
        grid: the built-in backend's working grid (cells ↔ picture pixels).
        rows: cells along the grid's height (``grid.cells.shape[0]``).
    """

    planar: np.ndarray
    x0: int
    z0: int
    y_mid: int
    resolution: int
    grid: Grid
    rows: int

    @property
    def half_depth(self) -> float:
        """The largest half-depth, voxels."""
        return float(self.planar.max())

    def y_range(self) -> tuple[int, int]:
        """Voxel indices ``[y_lo, y_hi)`` that hold the whole body and a margin of 2 voxels."""
        d = int(np.ceil(self.half_depth)) + 2
        return max(0, self.y_mid - d), min(self.resolution, self.y_mid + d)

    def slab(self, y_lo: int, y_hi: int, k_lo: int, k_hi: int) -> np.ndarray:
        """The field at voxel centres ``x0 + i``, ``y_lo..y_hi``, ``z0 + k_lo..z0 + k_hi``
        (ends exclusive): float32 ``(nx, y_hi − y_lo, k_hi − k_lo)``."""
        yc = np.arange(y_lo, y_hi, dtype=np.float32) + 0.5 - self.y_mid
        return self.planar[:, None, k_lo:k_hi] - np.abs(yc)[None, :, None]

    def picture_xy(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Picture pixel coordinates ``(px, py)`` of positions ``x``, ``z`` in voxel units."""
        cols = x - (self.x0 + MARGIN)
        rows = self.rows - (z - (self.z0 + MARGIN))
        return self.grid.corner_pixels(rows, cols)


def relief_map(rgba: np.ndarray, grid: Grid, amplitude: float) -> np.ndarray:
    """The picture's band-passed luminance at every cell centre, scaled to ``amplitude`` voxels
    (its standard deviation inside the silhouette): float ``(gh, gw)``."""
    lum = rgba[..., :3].astype(np.float32) @ np.array([0.2126, 0.7152, 0.0722], np.float32) / 255
    cells = grid.cells
    side = max(cells.shape) * grid.cell
    band = (ndimage.gaussian_filter(lum, RELIEF_FINE * side)
            - ndimage.gaussian_filter(lum, RELIEF_COARSE * side))
    rows, cols = np.mgrid[0:cells.shape[0], 0:cells.shape[1]].astype(np.float64) + 0.5
    px, py = grid.corner_pixels(rows, cols)
    values = ndimage.map_coordinates(band, [py - 0.5, px - 0.5], order=1, mode="nearest")
    spread = float(values[cells].std()) if cells.any() else 0.0
    return values * (amplitude / spread) if spread > 0 else np.zeros_like(values)


def body_field(matte: Matte, resolution: int, *, rgba: np.ndarray | None = None,
               fill: float = DEFAULT_FILL, depth_scale: float = DEFAULT_DEPTH_SCALE,
               rim: float = RIM_VOXELS, relief: float = RELIEF) -> BodyField:
    """Build the body's planar field for a ``resolution`` grid.

    Args:
        matte: the built-in backend's matte of the picture.
        resolution: voxels per axis (≥ 16).
        fill: share of the grid spanned by the silhouette's longer side (0 < fill ≤ 0.95).
        rgba: uint8 ``(H, W, 4)`` the picture the matte is of, for the surface relief, or None
            (no relief).
        depth_scale, rim: the body's profile, as ``inflate_body``'s (rim in voxels).
        relief: relief amplitude, share of the resolution (0 = none).

    Raises:
        ValueError: a resolution or fill out of range.
        EmptyMatteError: (from ``make_grid``) nothing of the silhouette survives resampling.
    """
    if resolution < 16:
        raise ValueError(f"resolution must be at least 16 voxels, got {resolution}")
    if not 0 < fill <= 0.95:
        raise ValueError(f"fill must be in (0, 0.95], got {fill}")
    # the margin and one voxel each side stay inside the grid, so the surface closes within it
    grid = make_grid(matte.mask, max(8, min(round(fill * resolution),
                                            resolution - 2 * MARGIN - 2)))
    cells = grid.cells
    h = solve_height(cells)
    centre_h = (h[:-1, :-1] + h[:-1, 1:] + h[1:, :-1] + h[1:, 1:]) / 4
    inside = np.pad(cells, MARGIN)
    body = depth_scale * np.sqrt(centre_h)
    if rgba is not None and relief > 0:
        body = body + relief_map(rgba, grid, relief * resolution) * np.clip(body / TAPER, 0, 1)
    depth = rim + np.maximum(np.pad(body, MARGIN), 0.0)
    outside = 0.5 - ndimage.distance_transform_edt(~inside)
    g = np.where(inside, depth, outside)
    g = ndimage.gaussian_filter(g, SMOOTH_VOXELS)
    # rows run down the picture, z up the grid: planar[i, k] = g[rows - 1 - k, i]
    planar = np.ascontiguousarray(g[::-1].T).astype(np.float32)
    nx, nz = planar.shape
    x0, z0 = (resolution - nx) // 2, (resolution - nz) // 2
    if x0 < 0 or z0 < 0 or planar.max() + 2 >= resolution / 2:
        raise ValueError(f"the body does not fit a {resolution} grid; lower fill ({fill})")
    return BodyField(planar=planar, x0=x0, z0=z0, y_mid=resolution // 2, resolution=resolution,
                     grid=grid, rows=int(cells.shape[0]))
