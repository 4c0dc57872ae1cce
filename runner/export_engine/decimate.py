"""Decimate to the target face count: fast-simplification (the quadric edge-collapse of
Sp4cerat's Fast-Quadric-Mesh-Simplification, as pyvista ships it), the QEM simplification the
port's o_voxel does with cumesh's ``simplify``.

The call runs in a child process (``simplify_file`` through ``stoppable``, reading and writing
files in the export's work folder) so a cancel stops it. A mesh already at or
below the target is left as it is. The library reaches the requested count exactly on the
meshes measured (5.24 M → 1,000,000 faces); the result is checked by the caller's quality
figures, not assumed.
"""
from __future__ import annotations

import numpy as np


def simplify(vertices: np.ndarray, faces: np.ndarray, target: int) -> dict:
    """The child's work: ``{"vertices": float32 [V', 3], "faces": int32 [F', 3]}``."""
    import fast_simplification

    reduction = 1.0 - float(target) / float(len(faces))
    v, f = fast_simplification.simplify(np.asarray(vertices, np.float32),
                                        np.asarray(faces, np.int32), reduction)
    return {"vertices": np.asarray(v, np.float32), "faces": np.asarray(f, np.int32)}


def simplify_file(inp: str, out: str, target: int) -> dict:
    """The child's work on files: the mesh in ``inp`` decimated to ``target`` faces, written
    to ``out``. Returns ``{"faces"}``."""
    with np.load(inp) as data:
        vertices, faces = data["vertices"], data["faces"]
    result = simplify(vertices, faces, target) if len(faces) > target \
        else {"vertices": vertices, "faces": faces}
    del vertices, faces
    np.savez(out, **result)
    return {"faces": np.int64(len(result["faces"]))}
