"""A small, exactly known asset in the port's ``save_mesh_checkpoint`` format, for the bounded
export engine's tests and measurements (``bounded_export``): a bumpy sphere and the
sparse voxels of a shell around it, coloured by a smooth function of position.

Not what ships; not a character (the full-size character generator is
another module of ``standin/``). What it gives a test: the surface (``radius_at``) and the
colour (``colour_at``) as formulas, so a GLB's geometry and texture can be checked against the
truth, and any size from a few thousand faces (seconds) to millions (measurements).

Layout (the keys ``_write_mesh_npz`` of ``standin/port/generate_mps.py`` writes, as the real
port): ``vertices`` float32 [V, 3] in the unit box ``[-0.5, 0.5]³``, ``faces`` int32 [F, 3],
``coords`` int32 [N, 4] = batch 0, x, y, z on the ``resolution`` grid, ``attrs`` float32 [N, 6]
= base colour RGB, metallic, roughness, alpha in 0..1, ``origin`` float32 [3] = (-0.5, -0.5,
-0.5), ``voxel_size`` float32 = 1 / resolution, ``resolution`` int32. Voxel (x, y, z) spans
``[origin + i·voxel_size, origin + (i + 1)·voxel_size)`` per axis; its value is the colour at
its centre (i + 0.5).

Command line: ``python -m standin.sphere_asset OUT.npz [--subdivisions 5] [--resolution 128]
[--shell 2] [--overwrite]`` writes one (``main``; ``--help`` lists the sizes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

RADIUS = 0.38
BUMP = 0.04


def radius_at(directions: np.ndarray) -> np.ndarray:
    """Surface radius (unit-box units) along unit ``directions`` [M, 3] → [M]."""
    d = np.asarray(directions, dtype=np.float64)
    return RADIUS + BUMP * np.sin(5.0 * d[:, 0]) * np.cos(4.0 * d[:, 1]) * np.cos(3.0 * d[:, 2])


def colour_at(points: np.ndarray) -> np.ndarray:
    """The six attributes (RGB, metallic, roughness, alpha; 0..1) at ``points`` [M, 3] → [M, 6]
    float32: smooth (a period of about 0.3 unit-box units, hundreds of voxels at 1024)."""
    p = np.asarray(points, dtype=np.float64)
    out = np.empty((len(p), 6), dtype=np.float32)
    out[:, 0] = 0.5 + 0.4 * np.sin(20.0 * p[:, 0])
    out[:, 1] = 0.5 + 0.4 * np.sin(17.0 * p[:, 1] + 1.0)
    out[:, 2] = 0.5 + 0.4 * np.cos(23.0 * p[:, 2])
    out[:, 3] = 0.25 + 0.2 * np.sin(9.0 * p[:, 1])
    out[:, 4] = 0.6 + 0.3 * np.cos(11.0 * p[:, 0])
    out[:, 5] = 1.0
    return out


def sphere_mesh(subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    """(vertices float32 [V, 3], faces int32 [F, 3]) of the bumpy sphere: trimesh's icosphere
    (20·4^subdivisions faces: 5 → 20,480; 7 → 327,680; 9 → 5,242,880), pushed to
    ``radius_at``."""
    import trimesh

    ico = trimesh.creation.icosphere(subdivisions=int(subdivisions))
    unit = np.asarray(ico.vertices, dtype=np.float64)
    vertices = (unit * radius_at(unit)[:, None]).astype(np.float32)
    return vertices, np.asarray(ico.faces, dtype=np.int32)


def shell_voxels(resolution: int, shell: float = 2.0) -> np.ndarray:
    """int32 [N, 3] grid cells whose centre lies within ``shell`` voxels of the surface
    (radially), built one x-slab at a time (never a dense grid³ in memory)."""
    res = int(resolution)
    size = 1.0 / res
    centres = (np.arange(res) + 0.5) * size - 0.5
    outer = RADIUS + BUMP + (shell + 1) * size
    keep = np.flatnonzero(np.abs(centres) <= outer)
    yy, zz = np.meshgrid(centres[keep], centres[keep], indexing="ij")
    iy, iz = np.meshgrid(keep, keep, indexing="ij")
    out = []
    for ix in keep:
        p = np.stack([np.full(yy.size, centres[ix]), yy.ravel(), zz.ravel()], axis=1)
        r = np.linalg.norm(p, axis=1)
        near = np.abs(r - radius_at(p / np.maximum(r, 1e-12)[:, None])) <= shell * size
        if near.any():
            out.append(np.stack([np.full(int(near.sum()), ix), iy.ravel()[near],
                                 iz.ravel()[near]], axis=1))
    return np.concatenate(out).astype(np.int32)


def make_sphere_asset(path, *, subdivisions: int = 5, resolution: int = 128,
                      shell: float = 2.0) -> Path:
    """Write the asset ``.npz`` at ``path`` (as ``np.savez``, the port's own writer) and return
    the path. ``subdivisions``: the mesh's (see ``sphere_mesh``); ``resolution``: the grid."""
    vertices, faces = sphere_mesh(subdivisions)
    cells = shell_voxels(resolution, shell)
    size = 1.0 / resolution
    attrs = colour_at((cells + 0.5) * size - 0.5)
    coords = np.concatenate([np.zeros((len(cells), 1), np.int32), cells], axis=1)
    path = Path(path)
    np.savez(str(path), vertices=vertices, faces=faces, coords=coords, attrs=attrs,
             origin=np.full(3, -0.5, np.float32), voxel_size=np.float32(size),
             resolution=np.int32(resolution))
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m standin.sphere_asset",
        description="Write a bumpy-sphere asset (.npz, the port's mesh-checkpoint format) for "
                    "the bounded export engine's tests and measurements; prints one JSON line "
                    "(path, faces, voxels) on stdout.")
    p.add_argument("output", type=Path, help="the .npz to write")
    p.add_argument("--subdivisions", type=int, default=5, choices=range(0, 11), metavar="S",
                   help="icosphere subdivisions, 20·4^S faces: 5 → 20,480 (default), "
                        "7 → 327,680, 8 → 1,310,720, 9 → 5,242,880 (about 1.3 GB of memory)")
    p.add_argument("--resolution", type=int, default=128,
                   help="the voxel grid's cells per axis, 8 to 2048 (default 128)")
    p.add_argument("--shell", type=float, default=2.0,
                   help="voxels kept within this many cells of the surface (default 2)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return p


def main(argv=None) -> int:
    """The command line (module docstring). Exit 0 with the JSON line; 2 (argparse) for a bad
    value, an output not ending in ``.npz`` or one that exists without ``--overwrite``."""
    p = _parser()
    a = p.parse_args(argv)
    if a.output.suffix != ".npz":
        p.error(f"the output must end in .npz (numpy adds it otherwise): {a.output}")
    if a.output.exists() and not a.overwrite:
        p.error(f"{a.output} exists; pass --overwrite to replace it")
    if not 8 <= a.resolution <= 2048:
        p.error(f"--resolution {a.resolution} must be from 8 to 2048")
    if not 0.5 <= a.shell <= 16:
        p.error(f"--shell {a.shell} must be from 0.5 to 16 voxels")
    path = make_sphere_asset(a.output, subdivisions=a.subdivisions, resolution=a.resolution,
                             shell=a.shell)
    with np.load(path) as data:
        facts = {"path": str(path), "faces": int(data["faces"].shape[0]),
                 "voxels": int(data["coords"].shape[0])}
    print(json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
