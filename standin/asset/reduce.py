"""Fewer faces of the same asset: the surface decimated (fast-simplification's quadric edge
collapse) to a face count, the voxels, grid and frame unchanged — so an export benchmark can
vary the input's faces alone (1, 2, 5 M of one character on one 1024 grid)."""
from __future__ import annotations

import numpy as np


def reduce_faces(arrays: dict, faces: int) -> dict:
    """A copy of the asset ``arrays`` (``standin.asset``'s keys) with its mesh decimated to
    about ``faces`` faces (within 1 %); the voxels are shared, not copied.

    Raises ``ValueError`` when ``faces`` is not below the asset's own count."""
    import fast_simplification

    have = len(arrays["faces"])
    if not 0 < faces < have:
        raise ValueError(f"faces must be between 1 and the asset's {have:,}, got {faces:,}")
    v, f = fast_simplification.simplify(arrays["vertices"], arrays["faces"],
                                        target_reduction=1.0 - faces / have)
    return {**arrays, "vertices": np.ascontiguousarray(v, np.float32),
            "faces": np.ascontiguousarray(f, np.int32)}


def main(argv=None) -> int:
    """``python -m standin.asset.reduce ASSET.npz -o OUT.npz --faces N``: write the asset with
    its mesh decimated to about N faces; prints the face count written."""
    import argparse
    from pathlib import Path

    from . import ASSET_KEYS, Asset, write_asset

    p = argparse.ArgumentParser(prog="python -m standin.asset.reduce", description=__doc__)
    p.add_argument("asset", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument("--faces", type=int, required=True)
    a = p.parse_args(argv)
    with np.load(str(a.asset)) as data:
        arrays = {k: data[k] for k in ASSET_KEYS}
    try:
        reduced = reduce_faces(arrays, a.faces)
    except ValueError as exc:
        p.error(str(exc))
    write_asset(a.output, Asset(reduced))
    print(len(reduced["faces"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
