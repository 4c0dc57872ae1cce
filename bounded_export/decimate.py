"""Decimate to the target face count: fast-simplification (the quadric edge-collapse of
Sp4cerat's Fast-Quadric-Mesh-Simplification, as pyvista ships it), the QEM simplification the
port's o_voxel does with cumesh's ``simplify``.

The call runs in a child process (``simplify_file`` through ``stoppable``, reading and writing
files in the export's work folder) so a cancel stops it. A mesh already at or
below the target is left as it is. The library reaches the requested count exactly on the
meshes measured (5.24 M → 1,000,000 faces); the result is checked by the caller's quality
figures, not assumed.

Twin faces: the library's edge collapse does not test the link condition (two vertices may
collapse while sharing more than their two opposite neighbours), so it can fold a valence-3
vertex into a two-face "pillow" — the same three vertices twice, opposite windings, hanging on
one edge of the surface, which that edge then shares with four faces (measured: 3 pillows in
500,000 faces on the pieced 5.24 M-face sphere, whose input was watertight; the stitched mesh
before this pass was watertight too). ``drop_twin_faces`` removes every copy of such a face
and the pillow's tip vertex: what is left is the surface without the fold (each pillow costs
2 of the target's faces).
"""
from __future__ import annotations

import numpy as np


def drop_twin_faces(vertices: np.ndarray, faces: np.ndarray) -> tuple:
    """(vertices, faces int32, twins): ``faces`` (int [F, 3]) without any face whose three
    vertices another face also has (every copy dropped, whatever the winding: a pillow leaves
    no fin), vertices no face uses any more dropped (``cleanup.compact``); ``twins``: faces
    dropped. Grouping by trimesh's ``unique_rows`` on the sorted corners."""
    from trimesh.grouping import unique_rows

    from bounded_export.cleanup import compact

    _keep, inverse = unique_rows(np.sort(faces, axis=1))
    single = np.bincount(inverse)[inverse] == 1
    if single.all():
        return vertices, np.asarray(faces, np.int32), 0
    vertices, kept = compact(vertices, faces[single])
    return vertices, kept, int(len(faces) - len(kept))


def simplify(vertices: np.ndarray, faces: np.ndarray, target: int) -> dict:
    """The child's work: ``{"vertices": float32 [V', 3], "faces": int32 [F', 3], "twins":
    int64}`` — fast-simplification to ``target`` faces, then its twin faces dropped
    (``drop_twin_faces``; ``twins`` of them, so ``target - twins`` faces)."""
    import fast_simplification

    reduction = 1.0 - float(target) / float(len(faces))
    v, f = fast_simplification.simplify(np.asarray(vertices, np.float32),
                                        np.asarray(faces, np.int32), reduction)
    v, f, twins = drop_twin_faces(np.asarray(v, np.float32), f)
    return {"vertices": v, "faces": np.asarray(f, np.int32), "twins": np.int64(twins)}


def simplify_file(inp: str, out: str, target: int) -> dict:
    """The child's work on files: the mesh in ``inp`` decimated to ``target`` faces, written
    to ``out``. Returns ``{"faces", "twins"}`` (``simplify``'s)."""
    with np.load(inp) as data:
        vertices, faces = data["vertices"], data["faces"]
    result = simplify(vertices, faces, target) if len(faces) > target \
        else {"vertices": vertices, "faces": faces}
    del vertices, faces
    twins = result.pop("twins", np.int64(0))
    np.savez(out, **result)
    return {"faces": np.int64(len(result["faces"])), "twins": np.int64(twins)}
