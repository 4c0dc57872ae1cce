"""What a Pixal3D run's GLB looks like against the asset it was made from: the base colour the
GLB shows at points on its surface against the colour of the asset's nearest voxel there.

The GLB is read by the glTF specification (``tests.export_engine.glbread``, not through the
library that wrote it); its points are taken back to the asset's frame with each engine's own
output transform, so a GLB in the wrong place fails too:

- ``bounded`` (``bounded_export/glb.py``): glTF's Y-up from the asset's Z-up, (x, y, z)
  → (x, z, −y);
- ``port`` (the stand-in o_voxel's ``to_glb``, then the bridge's default ``pixal3d`` output
  transform, diag(−1, 1, −1)): (x, y, z) → (−x, z, y).
"""
from __future__ import annotations

import numpy as np

from tests.export_engine.glbread import read_glb, surface_samples, texel_lookup

TO_ASSET = {
    "bounded": lambda p: np.column_stack([p[:, 0], -p[:, 2], p[:, 1]]),
    "port": lambda p: np.column_stack([-p[:, 0], p[:, 2], p[:, 1]]),
}


def colour_errors(glb, asset, engine: str, count: int = 4000, seed: int = 3) -> dict:
    """``count`` random points on the GLB's surface: ``errors`` (the largest of |R|, |G|, |B|
    between the GLB's bilinear base colour there and the nearest voxel's base colour, 0..255,
    float [count]), ``voxels_away`` (that voxel's centre's distance, in voxels), and
    ``nonblack`` (the share of the base-colour texture's texels brighter than 8/255)."""
    from scipy.spatial import cKDTree

    glb = read_glb(glb)
    with np.load(asset) as data:
        size = float(data["voxel_size"])
        centres = data["origin"].astype(np.float64) + (data["coords"][:, -3:] + 0.5) * size
        colours = data["attrs"][:, :3].astype(np.float64) * 255
    positions = TO_ASSET[engine](np.asarray(glb["positions"], np.float64))
    points, uv = surface_samples(positions, glb["faces"], glb["uv"], count, seed=seed)
    away, nearest = cKDTree(centres).query(points)
    shown = texel_lookup(glb["base"], uv)[:, :3]
    return {"errors": np.abs(shown - colours[nearest]).max(axis=1), "voxels_away": away / size,
            "nonblack": float((glb["base"][..., :3].max(axis=-1) > 8).mean())}


def assert_shows_the_voxels(glb, asset, engine: str, *, within: float = 24.0,
                            share: float = 0.8, median: float = 12.0) -> dict:
    """At least ``share`` of the points within ``within``/255 of the nearest voxel's colour,
    and the median error at most ``median``/255 (the stand-in's voxels hold one colour per
    latent cell, so points near a cell's border may read a blend of two). Returns the
    figures (``colour_errors``)."""
    got = colour_errors(glb, asset, engine)
    errors = got["errors"]
    close = float((errors <= within).mean())
    assert got["nonblack"] > 0.5, f"{glb}: only {got['nonblack']:.1%} of the texture is lit"
    assert close >= share and np.median(errors) <= median, (
        f"{glb}: {close:.1%} of the points within {within}/255 of their voxel's colour, "
        f"median {np.median(errors):.1f}, p90 {np.percentile(errors, 90):.1f}")
    return got
