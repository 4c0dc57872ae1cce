"""Stand-in of ``cumesh`` (the mesh library o_voxel drives): ``CuMesh`` as ``MeshBackend``,
``cuBVH`` as ``BVH`` and ``remeshing.remesh_narrow_band_dc`` as ``remesh_narrow_band_dc``.

Each operation does real, small work on the stand-in mesh (numpy, scipy, trimesh) and holds the
memory the real one would (``_memory``). Written by hand: the real library is Metal/CUDA code. What
is simplified: ``fill_holes``/``repair_non_manifold_edges``/``remove_small_connected_
components`` only inspect (the stand-in decoder's surfaces are closed and manifold);
``unify_face_orientations`` turns every face outwards with trimesh (the decoder's flexible dual
grid winds every quad of an axis the same way, so half its faces face in, as the real one's);
``simplify`` collapses shortest edges (a real simplifier, not QEM); the remesh rebuilds the surface
at ``resolution × 90/1024`` cells, inside being the cells the surface crosses and those they
enclose (no face orientation needed, as the real narrow band works on unsigned distance), without
projecting back; the BVH answers nearest-face queries from a k-d tree over face centres.
"""
from __future__ import annotations

import numpy as np
import torch

from . import _memory

REMESH_CELLS_PER_1024 = 90


def _np(t, dtype):
    return t.detach().cpu().numpy().astype(dtype) if torch.is_tensor(t) else np.asarray(t, dtype)


class MeshBackend:
    """A triangle mesh being cleaned: ``init``, ``read``, the cleanup operations, ``simplify``,
    ``uv_unwrap``; ``num_vertices``/``num_faces``."""

    def init(self, vertices, faces) -> None:
        self.vertices = _np(vertices, np.float32)
        self.faces = _np(faces, np.int64)
        self._held = _memory.per_face("mesh", len(self.faces))  # the backend's own copy
        self._normals = None

    @property
    def num_vertices(self) -> int:
        return int(len(self.vertices))

    @property
    def num_faces(self) -> int:
        return int(len(self.faces))

    def read(self):
        return torch.from_numpy(self.vertices.copy()), torch.from_numpy(self.faces.astype(np.int32))

    def _scratch(self, kind: str = "cleanup"):
        return _memory.per_face(kind, self.num_faces)

    def fill_holes(self, max_hole_perimeter: float = 3e-2) -> int:
        """Count boundary edges (a closed surface has none); returns that count."""
        with self._scratch("fill_holes"):
            edges = np.sort(self.faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
            _, counts = np.unique(edges, axis=0, return_counts=True)
            return int((counts == 1).sum())

    def remove_duplicate_faces(self) -> None:
        with self._scratch():
            _, keep = np.unique(np.sort(self.faces, axis=1), axis=0, return_index=True)
            self.faces = self.faces[np.sort(keep)]

    def repair_non_manifold_edges(self) -> None:
        with self._scratch():
            pass

    def remove_small_connected_components(self, min_area: float) -> None:
        with self._scratch():
            pass

    def unify_face_orientations(self) -> None:
        """Wind every face of a connected piece alike, outwards (trimesh's ``fix_normals``)."""
        import trimesh
        with self._scratch():
            mesh = trimesh.Trimesh(self.vertices, self.faces, process=False)
            trimesh.repair.fix_normals(mesh)
            self.faces = np.asarray(mesh.faces, dtype=np.int64)

    def simplify(self, target_num_faces: int, verbose: bool = False, options=None) -> None:
        """Collapse the shortest edges (midpoints) until at most ``target_num_faces`` real
        faces are left."""
        target = max(4, int(round(target_num_faces / _memory.GEOMETRY_FACTOR)))
        if self.num_faces <= target:
            return
        with self._scratch():
            self.vertices, self.faces = _collapse(self.vertices, self.faces, target)

    def compute_vertex_normals(self) -> None:
        import trimesh
        self._normals = np.asarray(trimesh.Trimesh(self.vertices, self.faces, process=False)
                                   .vertex_normals, dtype=np.float32)

    def read_vertex_normals(self):
        return torch.from_numpy(self._normals)

    def uv_unwrap(self, compute_charts_kwargs=None, return_vmaps=False, verbose=False):
        """Six cube-projection charts in a 3 × 2 atlas; every face gets its own three vertices.
        Returns (vertices [3F, 3], faces [3F/3, 3], uvs [3F, 2], vmaps [3F]) tensors."""
        with self._scratch("uv"):
            uvs = _cube_uvs(self.vertices, self.faces)
            vmaps = self.faces.reshape(-1)
            out_v = self.vertices[vmaps]
            out_f = np.arange(len(vmaps), dtype=np.int64).reshape(-1, 3)
        result = (torch.from_numpy(out_v), torch.from_numpy(out_f), torch.from_numpy(uvs),
                  torch.from_numpy(vmaps))
        return result if return_vmaps else result[:3]


def _unique_faces(f):
    f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])]
    _, keep = np.unique(np.sort(f, axis=1), axis=0, return_index=True)
    return f[np.sort(keep)]


def _shortest_independent_edges(v, f, need: int):
    edges = np.unique(np.sort(f[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1), axis=0)
    order = np.argsort(np.linalg.norm(v[edges[:, 0]] - v[edges[:, 1]], axis=1), kind="stable")
    used = np.zeros(len(v), dtype=bool)
    pick = []
    for a, b in edges[order]:
        if not (used[a] or used[b]):
            used[a] = used[b] = True
            pick.append((a, b))
            if len(pick) >= need:
                break
    return np.array(pick, dtype=np.int64).reshape(-1, 2)


def _collapse(vertices, faces, target: int):
    """Greedy shortest-edge collapse, rounds of edges sharing no vertex; returns compacted
    (vertices float32, faces int64) with at most ``target`` faces (fewer when a round also
    removes duplicates)."""
    v, f = vertices.astype(np.float64), faces.copy()
    while len(f) > target:
        pick = _shortest_independent_edges(v, f, max(1, (len(f) - target + 1) // 2))
        if len(pick) == 0:
            break
        remap = np.arange(len(v))
        remap[pick[:, 1]] = pick[:, 0]
        v[pick[:, 0]] = (v[pick[:, 0]] + v[pick[:, 1]]) / 2
        f = _unique_faces(remap[f])
    used, f = np.unique(f, return_inverse=True)
    return v[used].astype(np.float32), f.reshape(-1, 3)


def _cube_uvs(vertices, faces):
    tri = vertices[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    axis = np.abs(normal).argmax(axis=1)
    chart = axis * 2 + (normal[np.arange(len(axis)), axis] < 0)
    other = np.array([[1, 2], [0, 2], [0, 1]])[axis]
    uv = np.take_along_axis(tri, other[:, None, :].repeat(3, axis=1), axis=2) + 0.5
    uv = np.clip(uv, 0, 1) * 0.96 + 0.02
    cell = np.stack([chart % 3, chart // 3], axis=1)[:, None, :]
    return ((uv + cell) / np.array([3.0, 2.0])).reshape(-1, 2).astype(np.float32)


class BVH:
    """Nearest-face queries over a mesh (k-d tree over face centres); holds the real BVH's
    memory (128 B per real face) for as long as it lives."""

    def __init__(self, vertices, faces):
        from scipy.spatial import cKDTree
        self.vertices = _np(vertices, np.float32)
        self.faces = _np(faces, np.int64)
        self._held = _memory.per_face("bvh", len(self.faces))
        self._tree = cKDTree(self.vertices[self.faces].mean(axis=1))

    def unsigned_distance(self, points, return_uvw: bool = False):
        """(distance [M], face_id [M], uvw [M, 3]) of each point's nearest face (by centre)."""
        p = _np(points, np.float32)
        dist, face = self._tree.query(p)
        tri = self.vertices[self.faces[face]]
        uvw = _barycentric(p, tri)
        out = (torch.from_numpy(dist.astype(np.float32)), torch.from_numpy(face.astype(np.int64)))
        return out + (torch.from_numpy(uvw),) if return_uvw else out


def _barycentric(p, tri):
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    v0, v1, v2 = b - a, c - a, p - a
    d00, d01, d11 = (v0 * v0).sum(1), (v0 * v1).sum(1), (v1 * v1).sum(1)
    d20, d21 = (v2 * v0).sum(1), (v2 * v1).sum(1)
    den = np.where(np.abs(d00 * d11 - d01 * d01) < 1e-20, 1e-20, d00 * d11 - d01 * d01)
    v = (d11 * d20 - d01 * d21) / den
    w = (d00 * d21 - d01 * d20) / den
    uvw = np.clip(np.stack([1 - v - w, v, w], axis=1), 0, 1)
    return (uvw / np.maximum(uvw.sum(1, keepdims=True), 1e-12)).astype(np.float32)


def _crossed_cells(vertices, faces, center, extent: float, cells: int) -> np.ndarray:
    """bool [cells]³: the cells of the ``extent``-wide box around ``center`` that hold a sample
    of the surface (its vertices, face centres and edge midpoints; the decoder's faces are far
    smaller than a cell)."""
    v = _np(vertices, np.float64)
    tri = v[_np(faces, np.int64)]
    samples = np.concatenate([v, tri.mean(axis=1), (tri + np.roll(tri, 1, axis=1)).reshape(-1, 3)
                              / 2])
    index = np.floor(((samples - _np(center, np.float64)) / extent + 0.5) * cells).astype(np.int64)
    index = index[((index >= 0) & (index < cells)).all(axis=1)]
    crossed = np.zeros((cells,) * 3, dtype=bool)
    crossed[index[:, 0], index[:, 1], index[:, 2]] = True
    return crossed


def remesh_narrow_band_dc(vertices, faces, center, scale, resolution, band=1, project_back=0.0,
                          verbose=False, bvh=None):
    """Rebuild the surface on a grid: ``resolution`` (the real one's cells across ``scale`` =
    (resolution + 3·band)/resolution × the box) maps to ``resolution × 90/1024`` stand-in cells;
    a cell is inside when the surface crosses it or cells it crosses enclose it
    (``scipy.ndimage.binary_fill_holes``), whatever way the faces are wound. ``bvh`` is accepted
    and not needed. Holds 1,000 B per real output face while it works. Returns (vertices,
    faces) tensors."""
    from pixal3d.utils.mesh_extract import voxel_surface_to_mesh
    from scipy.ndimage import binary_fill_holes

    resolution = int(resolution)
    extent = float(scale) * resolution / (resolution + 3 * float(band))
    cells = max(4, int(round(resolution * REMESH_CELLS_PER_1024 / 1024)))
    inside = binary_fill_holes(_crossed_cells(vertices, faces, center, extent, cells))
    v, f = voxel_surface_to_mesh(torch.from_numpy(inside))
    with _memory.per_face("remesh", len(f)):
        v = v.double() * extent + torch.from_numpy(_np(center, np.float64))
    if verbose:
        print(f"[remesh] {cells} cells: {len(v):,} vertices, {len(f):,} faces")
    return v.float(), f
