"""Full-size test assets without weights: a character-shaped asset in the port's mesh-checkpoint
format (``save_mesh_checkpoint``'s ``.npz``) built from a picture, for the export engine's tests
(small grids) and benchmark (the port's 1024 grid). Not part of the product.

    python -m standin.asset PICTURE -o ASSET.npz [--resolution 1024]

What it builds (``build_asset``):

1. the picture's matte (the built-in backend's ``compute_matte``), the picture first scaled up
   (Pillow, bicubic) when the character spans fewer pixels than the grid has cells for it;
2. the body: the built-in backend's inflated silhouette (its grid and Poisson height, as a
   library) as a scalar field on the grid, with a relief from the picture's detail
   (``body.py``);
3. its surface: marching cubes at the grid's resolution, in slabs (``surface.py``);
4. the voxels: the surface's shell plus a one-voxel band, coloured from the picture, with
   metallic / roughness / alpha (``voxels.py``).

The asset (``write_asset``; keys, dtypes and meaning as the port's ``_write_mesh_npz`` in
``standin/port/generate_mps.py`` and TRELLIS.2's ``MeshWithVoxel``):

- ``vertices`` float32 ``[V, 3]`` in the port's frame: the grid's cube ``[-0.5, 0.5]³``, x right
  (the picture's columns), z up (its rows, upwards), y the depth with the character's front
  towards −y (o_voxel's ``to_glb`` turns it to glTF's +Z: (x, y, z) → (x, z, −y));
- ``faces`` int32 ``[F, 3]``, counter-clockwise seen from outside, a closed manifold surface;
- ``coords`` int32 ``[N, 3]`` voxel indices x, y, z on the ``resolution`` grid (what the port
  writes: ``v.coords[:, 1:]``), or ``[N, 4]`` with a leading batch column 0 (``coords_layout=
  "bxyz"``); in a shuffled order by default (the decoder's order is not sorted);
- ``attrs`` float32 ``[N, 6]`` in 0..1: base colour 0–2, metallic 3, roughness 4, alpha 5;
- ``origin`` float32 ``[3]`` = −0.5, ``voxel_size`` float32 = 1 / resolution, ``resolution``
  int32. Voxel ``i`` spans ``origin + [i, i + 1) · voxel_size``, its centre at ``i + 0.5``.

No ``fdg_*`` keys: the export reads none of them. At 1024 from
``tests/data/images/typical_humanoid_mech.png``: about 7.9 M faces (the real decoded mesh: about
8.6 M, Pixal3D-mac's requirements notes) — see docs/pixal3d.md.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .body import RELIEF, body_field
from .surface import march
from .voxels import colour_voxels, shell

__all__ = ["ASSET_KEYS", "DEFAULT_DEPTH_SCALE", "Asset", "build_asset", "write_asset"]

#: the keys ``write_asset`` writes, in the port's order.
ASSET_KEYS = ("vertices", "faces", "coords", "attrs", "origin", "voxel_size", "resolution")
#: depth of the body relative to round cross-sections: a character is about as deep as wide
#: (the built-in backend flattens to 0.8 for its own reasons).
DEFAULT_DEPTH_SCALE = 1.0
#: the asset's fill: the character's longer side spans this share of the grid.
ASSET_FILL = 0.95


@dataclass
class Asset:
    """A generated asset: ``arrays`` (the ``.npz``'s, see the module docstring) and ``facts``
    (``vertices``, ``faces``, ``voxels`` counts, ``resolution``, ``picture``, ``seconds`` per
    step)."""

    arrays: dict
    facts: dict = field(default_factory=dict)


def _picture(path: str | os.PathLike, resolution: int, fill: float):
    """The picture as RGBA and its matte, scaled up first when the character spans fewer pixels
    than ``fill · resolution`` (so the grid gets one cell per voxel)."""
    from PIL import Image

    from runner.backends.builtin.matte import compute_matte
    from runner.images.reading import load_image

    image, info = load_image(path)
    matte = compute_matte(image, had_alpha=info.had_alpha)
    rows, cols = np.flatnonzero(matte.mask.any(1)), np.flatnonzero(matte.mask.any(0))
    span = max(rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1)
    factor = fill * resolution / span
    if factor > 1:
        size = (math.ceil(image.width * factor), math.ceil(image.height * factor))
        image = image.resize(size, Image.Resampling.BICUBIC)
        matte = compute_matte(image, had_alpha=info.had_alpha)
    return np.asarray(image), matte


def build_asset(picture: str | os.PathLike, resolution: int = 1024, *,
                fill: float = ASSET_FILL, depth_scale: float = DEFAULT_DEPTH_SCALE,
                relief: float = RELIEF, coords_layout: str = "xyz", shuffle: bool = True,
                seed: int = 0, on_progress: Callable[[str, float], None] | None = None) -> Asset:
    """Build a character-shaped asset from ``picture`` on a ``resolution`` grid.

    Args:
        picture: an image file the runner accepts (``runner.images.reading.load_image``).
        resolution: voxels per axis (16 to 2048; the port's grids are 512, 1024, 1536).
        fill, depth_scale, relief: the body (``body.body_field``).
        coords_layout: ``"xyz"`` (``[N, 3]``, the port's) or ``"bxyz"`` (``[N, 4]``, batch 0).
        shuffle: voxels in a seeded random order (True) or sorted by z, x, y.
        seed: the shuffle's seed.
        on_progress: called with ``(step, fraction)``, steps ``surface`` and ``voxels``.

    Returns:
        An :class:`Asset`.

    Raises:
        ValueError: an argument out of range. ``meshfacts.errors.RunnerError``: a picture the
        runner refuses. ``EmptyMatteError``: no character in it.
    """
    if not 16 <= resolution <= 2048:
        raise ValueError(f"resolution must be 16 to 2048 voxels, got {resolution}")
    if coords_layout not in ("xyz", "bxyz"):
        raise ValueError(f"coords_layout must be 'xyz' or 'bxyz', got {coords_layout!r}")
    report = on_progress or (lambda step, fraction: None)
    seconds, t = {}, time.perf_counter()
    rgba, matte = _picture(picture, resolution, fill)
    body = body_field(matte, resolution, rgba=rgba, fill=fill, depth_scale=depth_scale,
                      relief=relief)
    seconds["field"], t = time.perf_counter() - t, time.perf_counter()
    verts, faces = march(body, on_progress=lambda f: report("surface", f))
    seconds["surface"], t = time.perf_counter() - t, time.perf_counter()
    coords = shell(verts, resolution)
    if shuffle:
        coords = coords[np.random.default_rng(seed).permutation(len(coords))]
    attrs = colour_voxels(coords, body, rgba, matte, lambda f: report("voxels", f))
    seconds["voxels"] = time.perf_counter() - t
    if coords_layout == "bxyz":
        coords = np.concatenate([np.zeros((len(coords), 1), np.int32), coords], axis=1)
    arrays = {
        "vertices": (verts / np.float32(resolution) - np.float32(0.5)).astype(np.float32),
        "faces": faces.astype(np.int32), "coords": coords.astype(np.int32), "attrs": attrs,
        "origin": np.full(3, -0.5, np.float32), "voxel_size": np.float32(1.0 / resolution),
        "resolution": np.int32(resolution)}
    facts = {"picture": str(picture), "resolution": resolution, "vertices": len(verts),
             "faces": len(faces), "voxels": len(coords), "coords_layout": coords_layout,
             "fill": fill, "depth_scale": depth_scale, "relief": relief, "seconds": seconds}
    return Asset(arrays, facts)


def write_asset(path: str | os.PathLike, asset: Asset) -> int:
    """Write ``asset`` to ``path`` as the port does (``np.savez``, uncompressed), through a
    temporary name in the same folder, renamed into place. Returns the file's size, bytes."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.part.npz")
    try:
        np.savez(str(tmp), **{k: asset.arrays[k] for k in ASSET_KEYS})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path.stat().st_size
