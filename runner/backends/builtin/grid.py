"""The working grid: the full-resolution matte resampled to square cells the mesh is built on.

A cell is one quad of the mesh. The grid covers the matte's bounding box with at most
``max_cells`` cells along its longer side; a cell is in the silhouette when at least half of the
full-resolution pixels under it are (area resampling with Pillow's BOX filter).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image
from scipy import ndimage

from .errors import EmptyMatteError

#: default cells along the longer side of the silhouette's bounding box (see docs/builtin.md).
DEFAULT_MAX_CELLS = 320
#: 8-connected pieces smaller than this many cells after resampling are dropped.
MIN_PIECE_CELLS = 3


@dataclass
class Grid:
    """Silhouette cells and where they sit in the input image.

    Attributes:
        cells: bool ``(gh, gw)``; True = the cell is in the silhouette.
        x0, y0: full-resolution pixel coordinates of the grid's top-left corner (pixel edges).
        cell: full-resolution pixels per cell side (float ≥ 1).
    """

    cells: np.ndarray
    x0: float
    y0: float
    cell: float

    def corner_pixels(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Full-resolution pixel coordinates ``(x, y)`` of cell corners ``(row, col)``."""
        return self.x0 + cols * self.cell, self.y0 + rows * self.cell


def make_grid(mask: np.ndarray, max_cells: int = DEFAULT_MAX_CELLS) -> Grid:
    """Resample a full-resolution matte to the working grid.

    Args:
        mask: bool ``(H, W)`` matte (True = character).
        max_cells: cells along the longer side of the matte's bounding box (≥ 8). Images smaller
            than that keep one cell per pixel.

    Returns:
        A :class:`Grid` with no diagonal-only contacts between cells (see :func:`remove_pinches`).

    Raises:
        EmptyMatteError: nothing of the silhouette survives resampling.
    """
    if max_cells < 8:
        raise ValueError(f"max_cells must be at least 8, got {max_cells}")
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        raise EmptyMatteError("The matte is empty.", "Use an image with a visible character.")
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    cell = max(1.0, max(r1 - r0, c1 - c0) / max_cells)
    gh, gw = math.ceil((r1 - r0) / cell), math.ceil((c1 - c0) / cell)
    if 2 * min(r1 - r0, c1 - c0) + 1 < cell:
        # No cell can be half covered (a pixel to spare for rounding), so the grid would come
        # out empty. Said before padding: with a cell of thousands of px (a 32 × 2 000 000 px
        # picture) the padded matte would be tens of GB.
        raise _too_thin()
    pad = math.ceil(cell) + 1
    padded = np.pad(mask, pad).astype(np.float32)
    box = (c0 + pad, r0 + pad, c0 + pad + gw * cell, r0 + pad + gh * cell)
    coverage = np.asarray(Image.fromarray(padded, "F").resize((gw, gh), Image.Resampling.BOX,
                                                              box=box))
    cells = coverage >= 0.5
    labels, n = ndimage.label(cells, structure=np.ones((3, 3), bool))
    if n:
        sizes = np.bincount(labels.ravel())
        sizes[0] = 0
        cells = (sizes >= min(MIN_PIECE_CELLS, sizes.max()))[labels] & cells
    cells = remove_pinches(cells)
    if not cells.any():
        raise _too_thin()
    return Grid(cells=cells, x0=float(c0), y0=float(r0), cell=float(cell))


def _too_thin() -> EmptyMatteError:
    return EmptyMatteError(
        "The character's silhouette is too thin to build a body from.",
        "Use a larger image, or one where the character covers more of the picture.",
    )


def remove_pinches(cells: np.ndarray) -> np.ndarray:
    """Fill cells until no two silhouette cells touch only at a corner.

    A 2×2 block ``[[1, 0], [0, 1]]`` (or its mirror) makes a vertex shared by two separate
    fans, which is not manifold; filling one of the two empty cells joins them along an edge.

    Args:
        cells: bool ``(gh, gw)``.

    Returns:
        A new bool array of the same shape, a superset of ``cells``.
    """
    out = cells.copy()
    while True:
        a, b = out[:-1, :-1], out[:-1, 1:]
        c, d = out[1:, :-1], out[1:, 1:]
        main = a & d & ~b & ~c
        anti = b & c & ~a & ~d
        if not (main.any() or anti.any()):
            return out
        out[:-1, 1:] |= main
        out[:-1, :-1] |= anti
