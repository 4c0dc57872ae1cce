"""Mesh cleanup before decimation: merge duplicate vertices, drop degenerate and duplicate
faces, drop small connected components, drop unreferenced vertices.

Libraries: trimesh's grouping (``unique_rows``: hashing rows, the way ``Trimesh.merge_vertices``
and ``unique_faces`` work) and SciPy's ``connected_components`` on the vertex graph. The
``Trimesh`` object's own cleanup methods are not used because constructing one for millions of
faces builds caches (face normals, adjacency) the engine does not need. Each operation is one
pass over arrays of the mesh's size; the cancel flag is checked between them.

In the engine this runs in a child process (``clean_file``, through ``stoppable``): it reads the
mesh from the asset file itself, so the export process never holds the full mesh while it is
cleaned and decimated, and a cancel kills it.

The small-component threshold is the port's: o_voxel's ``remove_small_connected_components(
1e-5)``, a component whose surface area is below ``1e-5`` (unit-box units², the asset's own).
"""
from __future__ import annotations

import numpy as np

from bounded_export.asset import read_members

MIN_COMPONENT_AREA = 1e-5


def merge_vertices(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices with exactly equal coordinates become one; faces re-indexed."""
    from trimesh.grouping import unique_rows

    keep, inverse = unique_rows(vertices)
    return vertices[keep], inverse.astype(np.int32)[faces]


def drop_bad_faces(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Faces without repeated corners, with non-zero area, each kept once (whatever the
    winding of a duplicate)."""
    from trimesh.grouping import unique_rows

    ok = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    faces = faces[ok]
    faces = faces[face_areas(vertices, faces) > 0]
    keep, _ = unique_rows(np.sort(faces, axis=1))
    return faces[np.sort(keep)]


SLICE = 1 << 20  # faces per slice of the per-face temporaries (bounded memory)


def face_areas(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Area of each face (float64 [F]), computed in slices of ``SLICE`` faces."""
    out = np.empty(len(faces), dtype=np.float64)
    for start in range(0, len(faces), SLICE):
        tri = vertices[faces[start:start + SLICE]].astype(np.float64)
        cross = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        out[start:start + SLICE] = 0.5 * np.sqrt(np.einsum("ij,ij->i", cross, cross))
    return out


def drop_small_components(vertices: np.ndarray, faces: np.ndarray,
                          min_area: float = MIN_COMPONENT_AREA) -> np.ndarray:
    """Faces of the connected components (sharing vertices) whose area is at least
    ``min_area``; when every component is smaller, the largest is kept."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(vertices)
    rows = np.concatenate([faces[:, 0], faces[:, 1]])
    cols = np.concatenate([faces[:, 1], faces[:, 2]])
    graph = coo_matrix((np.ones(len(rows), np.int8), (rows, cols)), shape=(n, n))
    _count, labels = connected_components(graph, directed=False)
    face_label = labels[faces[:, 0]]
    area = np.bincount(face_label, weights=face_areas(vertices, faces))
    big = area >= min_area
    if not big.any():
        big[np.argmax(area)] = True
    return faces[big[face_label]]


def compact(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop vertices no face uses; faces re-indexed."""
    used, inverse = np.unique(faces, return_inverse=True)
    return vertices[used], inverse.reshape(faces.shape).astype(np.int32)


def clean(vertices: np.ndarray, faces: np.ndarray, steps=None) -> tuple[np.ndarray, np.ndarray]:
    """All of the above in order; ``steps`` (``Steps``) gets a progress event (and a cancel
    check) between operations. Returns (vertices float32 [V', 3], faces int32 [F', 3]).
    Raises ``BadAsset`` when no face is left."""
    ops = (lambda v, f: merge_vertices(v, f), lambda v, f: (v, drop_bad_faces(v, f)),
           lambda v, f: (v, drop_small_components(v, f)), compact)
    for i, op in enumerate(ops):
        vertices, faces = op(vertices, faces)
        if not len(faces):  # the load step refuses a mesh without an area; never an argmax
            from bounded_export.errors import BadAsset  # of nothing deeper down

            raise BadAsset("faces", "no face is left after the cleanup (every face repeats a "
                           "corner or has no area)", "The decoder produced no surface: "
                           "generate the asset again.")
        if steps is not None:
            steps.progress((i + 1) / len(ops), force=True)
    return vertices, faces


def clean_file(asset: str, out: str) -> dict:
    """The child's work: the mesh of the (already validated) asset file ``asset`` cleaned and
    written to ``out`` (``vertices``, ``faces``; uncompressed ``.npz``). Returns
    ``{"faces_in", "faces"}``."""
    vertices, faces = read_members(asset, "vertices", "faces")
    vertices = vertices.astype(np.float32, copy=False)
    faces = faces.astype(np.int32, copy=False)
    count = len(faces)
    vertices, faces = clean(vertices, faces)
    np.savez(out, vertices=vertices, faces=faces)
    return {"faces_in": np.int64(count), "faces": np.int64(len(faces))}
