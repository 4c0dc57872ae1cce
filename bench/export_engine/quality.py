"""Quality of an exported GLB against the asset it came from (docs/benchmark.md, "Bounded export").

Each figure is measured with code of its own, independent of the export engine's
(``bounded_export``), so an error the engine makes is not made again here:

- ``face_count``: faces in the GLB against the decimation target (relative difference);
- ``surface_distance``: two-sided distance between the GLB's surface and the asset's mesh, in
  voxels of the asset's grid: points sampled uniformly by area on each surface, each point's
  exact distance to the other surface (nearest point on its nearest triangles);
- ``colour``: base colour read back from the GLB's texture (barycentric UV → texel, bilinear)
  at points sampled on its surface, against a trilinear sample of the asset's voxels there
  (``ReferenceVoxels``), per channel in 1/255;
- ``unfilled_texels``: texels that some face's bilinear look-ups read (the texel centres within
  one texel, in the max norm, of its UV triangle) and that hold no baked value — alpha below
  ``FILLED_ALPHA``, so this reading needs an opaque asset (``standin.asset`` makes alpha 1);
- ``topology``: the GLB's and the asset's meshes, their vertices welded at equal positions (the
  GLB's UV-seam copies), counted: edges of one face (open), edges of more than two faces
  (non-manifold), faces with the same three corners as another (twins), Euler number
  V − E + F (``topology``). The check: no non-manifold edge or twin face the asset lacks, and
  a closed asset gives a closed GLB with its Euler number (the pieced decimation once left
  three two-face pillows on a closed sphere: Euler number 5 for 2).

Axes: the GLB is +Y up as the port's o_voxel writes it, (x, y, z)port → (x, z, −y)glb, so a
GLB point comes back as (x, −z, y) (``to_port``). Voxel ``i`` spans ``origin + [i, i + 1) ·
voxel_size``, its value at its centre ``i + 0.5`` (the port's flex_gemm convention; the
engine's ``bounded_export/voxels.py`` states the same).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: alpha (of 255) below which a texel counts as unfilled (the assets are opaque: alpha 255).
FILLED_ALPHA = 128
#: nearest triangles tried per point, then more for the points whose answer is not proven.
CANDIDATES = 16
#: points handled per chunk (bounds the temporary arrays to a few hundred MB).
CHUNK = 1 << 16


def to_port(points: np.ndarray) -> np.ndarray:
    """GLB (+Y up) positions ``[N, 3]`` → the port's frame: (x, y, z) → (x, −z, y)."""
    p = np.asarray(points, dtype=np.float64)
    return np.stack([p[:, 0], -p[:, 2], p[:, 1]], axis=1)


@dataclass
class GlbMesh:
    """One GLB's mesh in the port's frame: ``vertices`` float64 ``[V, 3]``, ``faces`` int64
    ``[F, 3]``, ``uv`` float64 ``[V, 2]`` (v up, trimesh's), ``base`` uint8 ``[H, W, 4]``
    (the base colour texture, RGBA, rows top-down as stored) and ``metallic_roughness`` uint8
    ``[H, W, 3]`` or None."""

    vertices: np.ndarray
    faces: np.ndarray
    uv: np.ndarray
    base: np.ndarray
    metallic_roughness: np.ndarray | None


def read_glb(path: str | Path) -> GlbMesh:
    """Load a GLB written by the export (trimesh's glTF reader) as one mesh in the port's frame.

    Raises ``ValueError`` when it holds no textured mesh (no UVs or no base colour texture)."""
    import trimesh

    scene = trimesh.load(str(path), force="scene")
    meshes = [g for g in scene.dump() if isinstance(g, trimesh.Trimesh)]
    if len(meshes) != 1:
        raise ValueError(f"{path}: expected one mesh, found {len(meshes)}")
    mesh = meshes[0]
    visual = mesh.visual
    material = getattr(visual, "material", None)
    texture = getattr(material, "baseColorTexture", None)
    if getattr(visual, "uv", None) is None or texture is None:
        raise ValueError(f"{path}: the mesh has no UVs or no base colour texture")
    mr = getattr(material, "metallicRoughnessTexture", None)
    return GlbMesh(vertices=to_port(mesh.vertices), faces=np.asarray(mesh.faces, np.int64),
                   uv=np.asarray(visual.uv, np.float64),
                   base=np.asarray(texture.convert("RGBA")),
                   metallic_roughness=None if mr is None else np.asarray(mr.convert("RGB")))


def sample_surface(vertices: np.ndarray, faces: np.ndarray, count: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` points uniformly by area: ``(face index [count], barycentric [count, 3])``."""
    tri = vertices[faces]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    face = rng.choice(len(faces), size=count, p=area / area.sum())
    r1, r2 = np.sqrt(rng.random(count)), rng.random(count)
    bary = np.stack([1 - r1, r1 * (1 - r2), r1 * r2], axis=1)
    return face, bary


def _closest_on_triangles(p: np.ndarray, a: np.ndarray, b: np.ndarray,
                          c: np.ndarray) -> np.ndarray:
    """Distance from each point ``p [M, 3]`` to its triangle ``a, b, c [M, 3]`` (the region
    test of Ericson, "Real-Time Collision Detection", 5.1.5, vectorised)."""
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = (ab * ap).sum(1), (ac * ap).sum(1)
    bp = p - b
    d3, d4 = (ab * bp).sum(1), (ac * bp).sum(1)
    cp = p - c
    d5, d6 = (ab * cp).sum(1), (ac * cp).sum(1)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    denom = va + vb + vc
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(denom != 0, vb / denom, 0.0)
        w = np.where(denom != 0, vc / denom, 0.0)
        q = a + ab * v[:, None] + ac * w[:, None]  # inside the face
        t_ab = np.clip(d1 / (d1 - d3), 0, 1)
        t_ac = np.clip(d2 / (d2 - d6), 0, 1)
        t_bc = np.clip((d4 - d3) / ((d4 - d3) + (d5 - d6)), 0, 1)
    edges = [
        (d1 <= 0) & (d2 <= 0), (d3 >= 0) & (d4 <= d3), (d6 >= 0) & (d5 <= d6),
        (vc <= 0) & (d1 >= 0) & (d3 <= 0), (vb <= 0) & (d2 >= 0) & (d6 <= 0),
        (va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0)]
    points = [a, b, c, a + ab * np.nan_to_num(t_ab)[:, None], a + ac * np.nan_to_num(t_ac)[:, None],
              b + (c - b) * np.nan_to_num(t_bc)[:, None]]
    done = np.zeros(len(p), bool)
    for region, point in zip(edges, points, strict=True):
        take = region & ~done
        q[take] = point[take]
        done |= take
    return np.linalg.norm(p - q, axis=1)


class Surface:
    """Exact point-to-surface distances for a triangle mesh, through a k-d tree of its face
    centroids (scipy's ``cKDTree``): each point tries its ``CANDIDATES`` nearest centroids, and
    the answer is kept once it is proven (the next centroid is farther than the best distance
    plus the largest centroid-to-corner radius); unproven points try 8 × more. Our own code
    because trimesh's exact ``proximity`` builds an R-tree over every face, which for the
    asset's 8 M faces costs minutes and GBs."""

    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        from scipy.spatial import cKDTree

        self.vertices = np.asarray(vertices, np.float64)
        self.faces = np.asarray(faces, np.int64)
        tri = self.vertices[self.faces]
        centroid = tri.mean(axis=1)
        self.radius = float(np.linalg.norm(tri - centroid[:, None], axis=2).max())
        self.tree = cKDTree(centroid)

    def distance(self, points: np.ndarray) -> np.ndarray:
        """Distance of each point ``[M, 3]`` to the surface ``[M]`` (the mesh's units)."""
        out = np.empty(len(points))
        for s in range(0, len(points), CHUNK):
            p = np.asarray(points[s:s + CHUNK], np.float64)
            best, proven = self._try(p, CANDIDATES)
            if not proven.all():
                k = min(CANDIDATES * 8, len(self.faces))
                best[~proven], _ = self._try(p[~proven], k)
            out[s:s + len(p)] = best
        return out

    def _try(self, p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self.faces))
        dist, idx = self.tree.query(p, k=k)
        dist, idx = dist.reshape(len(p), k), idx.reshape(len(p), k)
        best = np.full(len(p), np.inf)
        for j in range(k):
            tri = self.vertices[self.faces[idx[:, j]]]
            best = np.minimum(best, _closest_on_triangles(p, tri[:, 0], tri[:, 1], tri[:, 2]))
        proven = (k == len(self.faces)) | (dist[:, -1] >= best + self.radius)
        return best, proven


class ReferenceVoxels:
    """The asset's sparse voxels for a reference trilinear sample, written for this check (not
    the engine's): keys ``(z·R + y)·R + x`` sorted once, looked up with ``np.searchsorted``;
    a point at grid position ``q`` (voxel units) mixes the eight voxel centres around it
    (centres at ``i + 0.5``); a corner with no voxel is left out and the others' weights
    renormalised (flex_gemm's rule); ``found`` is False where no corner exists."""

    def __init__(self, coords, attrs, origin, voxel_size: float, resolution: int):
        c = np.asarray(coords)
        c = c[:, -3:].astype(np.int64)  # [N, 4] batch, x, y, z or [N, 3] x, y, z
        self.res = int(resolution)
        self.origin = np.asarray(origin, np.float64)
        self.size = float(voxel_size)
        key = self._key(c)
        order = np.argsort(key)
        self.key = key[order]
        self.attrs = np.asarray(attrs, np.float32)[order]

    def _key(self, c: np.ndarray) -> np.ndarray:
        return (c[:, 2] * self.res + c[:, 1]) * self.res + c[:, 0]

    def sample(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Trilinear attributes at ``points [M, 3]`` (the port's frame): ``(values [M, C],
        found [M])``."""
        q = (np.asarray(points, np.float64) - self.origin) / self.size
        low = np.floor(q - 0.5).astype(np.int64)
        t = q - 0.5 - low
        acc = np.zeros((len(q), self.attrs.shape[1]))
        wsum = np.zeros(len(q))
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    cell = low + np.array([dx, dy, dz])
                    w = (np.where(dx, t[:, 0], 1 - t[:, 0]) * np.where(dy, t[:, 1], 1 - t[:, 1])
                         * np.where(dz, t[:, 2], 1 - t[:, 2]))
                    ok = ((cell >= 0) & (cell < self.res)).all(1)
                    k = self._key(np.where(ok[:, None], cell, 0))
                    pos = np.minimum(np.searchsorted(self.key, k), len(self.key) - 1)
                    hit = ok & (self.key[pos] == k)
                    w = np.where(hit, w, 0.0)
                    acc += w[:, None] * self.attrs[pos]
                    wsum += w
        found = wsum > 1e-9
        acc[found] /= wsum[found, None]
        return acc, found


def bilinear(image: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Bilinear texture read at ``uv [M, 2]`` (trimesh's v up; texel centres at (i + 0.5) / W,
    edges clamped): float ``[M, C]`` in the image's units."""
    from scipy import ndimage

    h, w = image.shape[:2]
    col = uv[:, 0] * w - 0.5
    row = (1.0 - uv[:, 1]) * h - 0.5
    return np.stack([ndimage.map_coordinates(image[..., ch].astype(np.float64), [row, col],
                                             order=1, mode="nearest")
                     for ch in range(image.shape[2])], axis=1)


def surface_distance(glb: GlbMesh, vertices: np.ndarray, faces: np.ndarray, voxel_size: float,
                     samples: int = 200_000, seed: int = 0) -> dict:
    """Two-sided distance (voxels): ``glb_to_asset`` and ``asset_to_glb``, each ``{"mean",
    "p99", "max"}`` over ``samples`` points, and ``both`` (the two pooled)."""
    rng = np.random.default_rng(seed)
    vertices = np.asarray(vertices, np.float64)
    faces = np.asarray(faces, np.int64)
    out = {}
    pooled = []
    for name, (src_v, src_f), dst in (
            ("glb_to_asset", (glb.vertices, glb.faces), (vertices, faces)),
            ("asset_to_glb", (vertices, faces), (glb.vertices, glb.faces))):
        face, bary = sample_surface(src_v, src_f, samples, rng)
        points = np.einsum("ij,ijk->ik", bary, src_v[src_f[face]])
        d = Surface(*dst).distance(points) / voxel_size
        pooled.append(d)
        out[name] = _stats(d)
    out["both"] = _stats(np.concatenate(pooled))
    return out


def _stats(d: np.ndarray) -> dict:
    return {"mean": float(d.mean()), "p99": float(np.percentile(d, 99)), "max": float(d.max())}


def colour(glb: GlbMesh, voxels: ReferenceVoxels, samples: int = 100_000,
           seed: int = 1) -> dict:
    """Base colour from the GLB's texture against the voxels' trilinear colour at ``samples``
    surface points, per channel, in 1/255: ``{"mean", "p99", "max", "max_channel_p99",
    "points", "not_found"}`` (``not_found``: points with no voxel around them, left out)."""
    rng = np.random.default_rng(seed)
    face, bary = sample_surface(glb.vertices, glb.faces, samples, rng)
    points = np.einsum("ij,ijk->ik", bary, glb.vertices[glb.faces[face]])
    uv = np.einsum("ij,ijk->ik", bary, glb.uv[glb.faces[face]])
    read = bilinear(glb.base[..., :3], uv)
    ref, found = voxels.sample(points)
    diff = np.abs(read[found] - np.clip(ref[found, :3], 0, 1) * 255)
    return {"mean": float(diff.mean()), "p99": float(np.percentile(diff, 99)),
            "max": float(diff.max()),
            "max_channel_p99": float(np.percentile(diff.max(axis=1), 99)),
            "points": int(found.sum()), "not_found": int((~found).sum())}


def unfilled_texels(glb: GlbMesh, chunk: int = 1 << 15) -> dict:
    """Texels a face's bilinear look-ups read that hold no baked value (alpha <
    ``FILLED_ALPHA``): ``{"used", "unfilled", "faces_touching_unfilled"}``. A texel is used by a
    face when its centre lies within one texel (max norm) of the face's UV triangle: the UV
    triangle with each edge moved out by the support of the unit square along its normal."""
    h, w = glb.base.shape[:2]
    alpha = glb.base[..., 3]
    tri = glb.uv[glb.faces] * np.array([w, -h]) + np.array([-0.5, h - 0.5])  # texel-centre units
    used = np.zeros((h, w), bool)
    bad_faces = 0
    for s in range(0, len(tri), chunk):
        t = tri[s:s + chunk]
        lo = np.floor(t.min(1) - 1).astype(np.int64)
        hi = np.ceil(t.max(1) + 1).astype(np.int64)
        span = hi - lo + 1
        n = span[:, 0] * span[:, 1]
        owner = np.repeat(np.arange(len(t)), n)
        local = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        px = lo[owner, 0] + local % span[owner, 0]
        py = lo[owner, 1] + local // span[owner, 0]
        inside = np.ones(len(owner), bool)
        area = np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0])
        sign = np.where(area >= 0, 1.0, -1.0)
        for i in range(3):
            a, b = t[:, i], t[:, (i + 1) % 3]
            e = b - a
            normal = np.stack([-e[:, 1], e[:, 0]], 1) * sign[:, None]  # inward
            length = np.maximum(np.linalg.norm(normal, axis=1), 1e-12)
            reach = (np.abs(normal).sum(1)) / length  # the unit square's support, max norm 1
            dist = ((px - a[owner, 0]) * normal[owner, 0]
                    + (py - a[owner, 1]) * normal[owner, 1]) / length[owner]
            inside &= dist >= -reach[owner] - 1e-9
        ok = inside & (px >= 0) & (px < w) & (py >= 0) & (py < h)
        used[py[ok], px[ok]] = True
        empty = ok & (alpha[np.clip(py, 0, h - 1), np.clip(px, 0, w - 1)] < FILLED_ALPHA)
        bad_faces += len(np.unique(owner[empty]))
    unfilled = used & (alpha < FILLED_ALPHA)
    return {"used": int(used.sum()), "unfilled": int(unfilled.sum()),
            "faces_touching_unfilled": int(bad_faces)}


def topology(vertices: np.ndarray, faces: np.ndarray) -> dict:
    """Edges and faces of the mesh (``vertices [V, 3]``, ``faces int [F, 3]``) with its
    vertices welded where the positions are exactly equal: ``{"faces", "open_edges",
    "nonmanifold_edges", "twin_faces", "euler", "closed"}`` (``closed``: every edge has two
    faces; ``euler``: V − E + F over the welded vertices faces use). Our own counting (numpy
    sorts), not the engine's trimesh grouping."""
    _, weld = np.unique(np.asarray(vertices, np.float64), axis=0, return_inverse=True)
    f = np.sort(weld.reshape(-1)[np.asarray(faces, np.int64)], axis=1)
    f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2])]  # faces a weld made degenerate
    n = int(f.max()) + 1 if len(f) else 0
    edges = np.concatenate([f[:, 0] * n + f[:, 1], f[:, 1] * n + f[:, 2], f[:, 0] * n + f[:, 2]])
    _, per_edge = np.unique(edges, return_counts=True)
    order = np.lexsort((f[:, 2], f[:, 1], f[:, 0]))
    same = (np.diff(f[order], axis=0) == 0).all(axis=1)
    twins = np.zeros(len(f), bool)
    twins[order[1:][same]] = twins[order[:-1][same]] = True
    used = len(np.unique(f))
    return {"faces": int(len(f)), "open_edges": int((per_edge == 1).sum()),
            "nonmanifold_edges": int((per_edge > 2).sum()), "twin_faces": int(twins.sum()),
            "euler": int(used - len(per_edge) + len(f)),
            "closed": bool(len(per_edge) and (per_edge == 2).all())}


def topology_kept(glb: dict, asset: dict) -> bool:
    """The check on two ``topology`` results: the GLB has no more non-manifold edges or twin
    faces than the asset, and is closed with the asset's Euler number when the asset is."""
    worse = (glb["nonmanifold_edges"] > asset["nonmanifold_edges"]
             or glb["twin_faces"] > asset["twin_faces"])
    return not worse and (not asset["closed"]
                          or (glb["closed"] and glb["euler"] == asset["euler"]))


#: the quality targets (voxels of the grid; 1/255 of base colour).
TARGETS = {"face_count": 0.02, "distance_mean": 0.5, "distance_p99": 2.0,
           "colour_mean": 3.0, "colour_p99": 16.0, "unfilled": 0}


def evaluate(asset_path: str | Path, glb_path: str | Path, target: int, *,
             distance_samples: int = 200_000, colour_samples: int = 100_000) -> dict:
    """Every quality figure of ``glb_path`` against ``asset_path`` (the ``.npz`` it came
    from) and the decimation ``target``, with ``checks`` (every name of :data:`CHECKS`) against
    :data:`TARGETS` (the distance targets on the pooled two-sided figures) and the asset's
    topology (``topology_kept``)."""
    data = np.load(str(asset_path))
    glb = read_glb(glb_path)
    size = float(data["voxel_size"])
    faces = len(glb.faces)
    dist = surface_distance(glb, data["vertices"], data["faces"], size, distance_samples)
    voxels = ReferenceVoxels(data["coords"], data["attrs"], data["origin"], size,
                             int(data["resolution"]))
    col = colour(glb, voxels, colour_samples)
    fill = unfilled_texels(glb)
    topo = {"glb": topology(glb.vertices, glb.faces),
            "asset": topology(data["vertices"], data["faces"])}
    face_error = abs(faces - target) / target
    checks = {
        "face count within 2 % of the target": face_error <= TARGETS["face_count"],
        "distance mean <= 0.5 voxel": dist["both"]["mean"] <= TARGETS["distance_mean"],
        "distance p99 <= 2 voxels": dist["both"]["p99"] <= TARGETS["distance_p99"],
        "colour mean <= 3/255": col["mean"] <= TARGETS["colour_mean"],
        "colour p99 <= 16/255": col["p99"] <= TARGETS["colour_p99"],
        "no used texel unfilled": fill["unfilled"] == 0,
        TOPOLOGY_CHECK: topology_kept(topo["glb"], topo["asset"]),
    }
    return {"faces": faces, "target": target, "face_error": face_error, "distance": dist,
            "colour": col, "texels": fill, "texture": list(glb.base.shape[:2]),
            "topology": topo, "checks": checks}


TOPOLOGY_CHECK = "topology as the asset's (closed, Euler number, no non-manifold edge)"
#: every check ``evaluate`` makes: the bench's analysis requires each (one not measured fails).
CHECKS = ("face count within 2 % of the target", "distance mean <= 0.5 voxel",
          "distance p99 <= 2 voxels", "colour mean <= 3/255", "colour p99 <= 16/255",
          "no used texel unfilled", TOPOLOGY_CHECK)
