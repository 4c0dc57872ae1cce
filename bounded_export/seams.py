"""Seam fill: every texel no face's sample reached takes the value of the nearest baked texel
(SciPy's exact Euclidean distance transform with ``return_indices``), so bilinear filtering
and mip-mapping at chart borders read chart colours, never black. The port inpaints with
OpenCV's Telea method (not bundled for Blender's Python); nearest-texel fill is the same idea
without the smoothing. The whole texture is filled, so no texel any face uses is left empty.
"""
from __future__ import annotations

import numpy as np


def fill(channels: np.ndarray, baked: np.ndarray) -> np.ndarray:
    """``channels`` [T, T, C] with every texel where ``baked`` is False set to its nearest
    baked texel's value (in place; returned). A texture with no baked texel is left as it is."""
    from scipy.ndimage import distance_transform_edt

    if baked.all() or not baked.any():
        return channels
    rows, cols = distance_transform_edt(~baked, return_distances=False, return_indices=True)
    for c in range(channels.shape[2]):
        plane = channels[..., c]
        plane[...] = plane[rows, cols]
    return channels
