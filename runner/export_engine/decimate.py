"""Decimate to the target face count: fast-simplification (the quadric edge-collapse of
Sp4cerat's Fast-Quadric-Mesh-Simplification, as pyvista ships it), the QEM simplification the
port's o_voxel does with cumesh's ``simplify``.

The call runs in a child process (``stoppable``) so a cancel stops it. A mesh already at or
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


def decimate(vertices: np.ndarray, faces: np.ndarray, target: int, workdir, steps=None
             ) -> tuple[np.ndarray, np.ndarray]:
    """(vertices float32, faces int32) with about ``target`` faces (the input when it has no
    more). ``workdir``: a folder for the child's hand-over files. Raises ``ExportCancelled``
    (the child killed) when ``steps``' cancel flag is set."""
    from .stoppable import call

    if len(faces) <= target:
        return vertices, faces
    out = call("runner.export_engine.decimate:simplify",
               {"vertices": vertices, "faces": faces}, {"target": int(target)}, workdir, steps)
    return out["vertices"], out["faces"]
