"""The asset's sparse PBR voxels: the shell of the surface, coloured from the picture.

Which voxels: every voxel a surface vertex lies in, grown by one voxel in all 26 directions
(``scipy.ndimage.binary_dilation``, one slab of z layers at a time so no dense grid³ exists).
The port's decoder keeps the voxels around its surface, and a trilinear sample anywhere on the
surface then finds all eight voxel centres around it (centres at ``i + 0.5``).

Their attributes (float32, 0..1, the port's layout): base colour 0–2 from the built-in backend's
texture (``make_texture``: the picture's trusted colours on the front, its blurred copy seen from
behind on the back), looked up at the voxel centre's picture position (front: ``y`` below the
mid-plane, towards −y); metallic 3 and roughness 4 from that colour (bright, unsaturated parts —
armour, blades — read as somewhat metallic and smoother, the rest as a rough dielectric);
alpha 5 = 1 (opaque, as a decoded character is).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import ndimage

from runner.backends.builtin.matte import Matte
from runner.backends.builtin.texture import (
    MAX_TEXTURE_SIZE,
    MIN_TEXTURE_SIZE,
    make_texture,
)

from .body import BodyField

#: z layers per dilation slab.
SLAB = 64
#: voxels coloured per chunk (bounds the temporary arrays to a few hundred MB).
CHUNK = 1 << 20


def shell(vertices: np.ndarray, resolution: int, *, slab: int = SLAB) -> np.ndarray:
    """The voxels the surface passes through, plus a one-voxel band.

    Args:
        vertices: float32 ``(V, 3)`` in voxel units.
        resolution: voxels per axis; the result is clipped to the grid.
        slab: z layers per dilation.

    Returns:
        int32 ``(N, 3)`` voxel indices ``x, y, z``, sorted by z, then x, then y (no repeats).
    """
    seed = np.unique(np.clip(np.floor(vertices).astype(np.int32), 0, resolution - 1), axis=0)
    lo, hi = np.maximum(seed.min(0) - 1, 0), np.minimum(seed.max(0) + 2, resolution)
    order = np.argsort(seed[:, 2], kind="stable")
    seed, zs = seed[order], seed[order][:, 2]
    out, cube = [], np.ones((3, 3, 3), bool)
    for za in range(int(lo[2]), int(hi[2]), slab):
        zb = min(za + slab, int(hi[2]))
        a, b = np.searchsorted(zs, [za - 1, zb + 1])
        if a == b:
            continue
        part = seed[a:b]
        occ = np.zeros((hi[0] - lo[0], hi[1] - lo[1], zb - za + 2), bool)
        occ[part[:, 0] - lo[0], part[:, 1] - lo[1], part[:, 2] - za + 1] = True
        grown = ndimage.binary_dilation(occ, cube)[:, :, 1:-1]
        idx = np.argwhere(grown).astype(np.int32)
        idx += np.array([lo[0], lo[1], za], np.int32)
        out.append(idx[np.lexsort((idx[:, 1], idx[:, 0], idx[:, 2]))])
    return np.concatenate(out)


def pbr_from_colour(rgb: np.ndarray) -> np.ndarray:
    """Metallic and roughness ``(N, 2)`` float32 in 0..1 from base colours ``(N, 3)`` in 0..1."""
    value = rgb.max(axis=1)
    saturation = np.where(value > 0, (value - rgb.min(axis=1)) / np.maximum(value, 1e-6), 0)
    metal = np.clip((value - 0.55) / 0.45, 0, 1) * (1 - saturation) ** 2
    metallic = 0.02 + 0.6 * metal
    roughness = 0.85 - 0.45 * metal - 0.1 * value
    return np.clip(np.stack([metallic, roughness], axis=1), 0, 1).astype(np.float32)


def colour_voxels(coords: np.ndarray, field: BodyField, rgba: np.ndarray, matte: Matte,
                  on_progress: Callable[[float], None] | None = None) -> np.ndarray:
    """The voxels' attributes: float32 ``(N, 6)`` (base colour, metallic, roughness, alpha).

    Args:
        coords: int ``(N, 3)`` voxel indices.
        field: the body (picture ↔ grid mapping and mid-plane).
        rgba: uint8 ``(H, W, 4)`` the picture the matte is of.
        matte: the built-in backend's matte of it.
        on_progress: called with the fraction done, or None.
    """
    size = int(np.clip(2 * field.resolution, MIN_TEXTURE_SIZE, MAX_TEXTURE_SIZE))
    texture = make_texture(rgba, matte, size)
    texels = np.asarray(texture.image, dtype=np.float32) / 255
    attrs = np.empty((len(coords), 6), np.float32)
    for start in range(0, len(coords), CHUNK):
        c = coords[start:start + CHUNK].astype(np.float64) + 0.5
        px, py = field.picture_xy(c[:, 0], c[:, 2])
        uv = texture.uv(px, py, back=c[:, 1] > field.y_mid)
        tx, ty = uv[:, 0] * size - 0.5, (1 - uv[:, 1]) * size - 0.5
        rgb = np.stack([ndimage.map_coordinates(texels[..., k], [ty, tx], order=1,
                                                mode="nearest") for k in range(3)], axis=1)
        rgb = np.clip(rgb, 0, 1)
        part = attrs[start:start + len(c)]
        part[:, :3] = rgb
        part[:, 3:5] = pbr_from_colour(rgb)
        part[:, 5] = 1.0
        if on_progress is not None:
            on_progress(min(1.0, (start + len(c)) / len(coords)))
    return attrs
