"""Face winding made consistent and outward (the ``orient`` step, after ``cleanup``, before the
decimation: every later step — normals, UVs, the bake, the GLB — sees outward faces).

Why: the port's flexible dual grid extraction (o_voxel's ``flexible_dual_grid_to_mesh``,
TRELLIS.2 ``o-voxel/o_voxel/convert/flexible_dual_grid.py``) makes each quad from the four
voxels around a crossed grid edge in one fixed order per axis, whichever side of the edge is
inside, so about half of the surface's faces come out wound inward. The port's own export
remeshes (orientation-free); this engine exports the input surface, so it must orient it.

How, in three array passes (our own code; the libraries' do not fit, see below):

1. **Edge pairs.** Every face's three edges keyed by their sorted vertex pair and sorted; an
   edge that exactly two faces share joins them. They agree when they run the edge in opposite
   directions, else one of them must be flipped. An edge of one face is open; an edge of three
   or more faces is non-manifold and joins none of them (as trimesh's ``face_adjacency``).
2. **Consistent winding** by SciPy's ``connected_components`` on the orientation double cover:
   each face is two nodes (as it is, flipped), an agreeing pair links same states, a
   disagreeing pair opposite states. A part (faces linked by shared edges) whose two states
   fall into two cover components is orientable; each face takes the state in the one with the
   smaller label. When a face's two states are linked the part cannot be wound consistently
   (a Möbius-like surface): its faces stay as they came and a ``warning`` says so.
3. **Outward**, per part, by its signed volume (the sum of ``det(a − c, b − c, d − c) / 6`` over
   its faces, ``c`` the part's area-weighted centroid) — negative: every face of the part is
   flipped. For a closed part this is its enclosed volume, whatever ``c``. For an open part
   (an edge of one face, or one that joins it to others only through a non-manifold edge) it
   is the volume of the cone from ``c`` to the surface: it decides a mostly closed part (a
   shell with holes, a half sphere), but not a flat or nearly flat sheet: when
   ``|volume| < OPEN_FLAT × area^1.5`` (or a closed part's volume is zero) the part has no
   outside; it keeps the winding most of its faces came with and a ``warning`` says so.
   Nested shells (a cavity inside a solid) are each oriented as solids of their own: the
   cavity's faces then point into the material; no ray test decides nesting.

Why not the libraries: trimesh's ``repair.fix_winding`` walks a networkx graph of the faces in
Python, one face pair at a time (measured by ``python -m bench.export_orient``: tens of µs and
hundreds of bytes a face, minutes and gigabytes at the ~8 M faces of a full-size asset, over
the 3 GiB default budget); its ``fix_normals`` does the same and then splits the mesh into
``Trimesh`` objects. The double cover keeps the work in two sorts and one SciPy call
(``ORIENT_BYTES_PER_FACE`` in ``budget``).

In the engine it runs in a child process (``orient_file``, through ``stoppable``), reading the
cleaned mesh and writing the oriented one, so a cancel kills it.
"""
from __future__ import annotations

import numpy as np

OPEN_FLAT = 1e-3
"""An open part whose ``|signed volume| / area^1.5`` is below this has no outside (a sphere's
ratio is 0.094, a cube's 0.068, a closed 1 × 1 × 0.01 plate's 0.0035)."""
SLICE = 1 << 18  # faces per slice of the per-face float64 temporaries (about 40 MB)


def edge_pairs(faces: np.ndarray, vertex_count: int) -> dict:
    """The faces each edge joins, from ``faces`` (int [F, 3]) over ``vertex_count`` vertices.

    Returns ``{"first", "second"}`` (int32 [P]: the two faces of each edge exactly two faces
    share), ``"same"`` (bool [P]: both run it in the same direction, so one must flip),
    ``"open"`` (int64: faces with an edge no other face has, repeated per edge),
    ``"nonmanifold"`` (int64: faces on an edge of three or more faces, repeated per edge),
    ``"nonmanifold_edges"`` (int: such edges)."""
    ends = np.roll(faces, -1, axis=1).reshape(-1)
    starts = faces.reshape(-1)
    forward = starts < ends
    key = np.minimum(starts, ends).astype(np.int64)
    key *= int(vertex_count)
    key += np.maximum(starts, ends)
    del ends
    order = np.argsort(key)
    key = key[order]
    begins = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    del key
    counts = np.diff(np.append(begins, len(order)))
    two = begins[counts == 2]
    h1, h2 = order[two], order[two + 1]
    many = np.repeat(counts > 2, counts)
    return {"first": (h1 // 3).astype(np.int32), "second": (h2 // 3).astype(np.int32),
            "same": forward[h1] == forward[h2],
            "open": order[begins[counts == 1]] // 3, "nonmanifold": order[many] // 3,
            "nonmanifold_edges": int(np.count_nonzero(counts > 2))}


def consistent(face_count: int, pairs: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flip bool [F], part int64 [F] numbered 0..C-1, orientable bool [C]): which faces to
    flip so that every pair of ``edge_pairs`` runs its edge in opposite directions, by
    connected components of the orientation double cover (module docstring). A face of a
    part that is not orientable is not flipped."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    first = 2 * pairs["first"]  # int32: 2F nodes fit below 2^31 for F up to 1 G faces
    second = 2 * pairs["second"] + pairs["same"].astype(np.int32)
    rows = np.concatenate([first, first + 1])
    cols = np.concatenate([second, second ^ 1])
    del first, second
    nodes = 2 * int(face_count)
    graph = coo_matrix((np.ones(len(rows), np.int8), (rows, cols)), shape=(nodes, nodes))
    del rows, cols
    _count, labels = connected_components(graph, directed=False)
    del graph
    labels = labels.reshape(-1, 2)
    flip = labels[:, 1] < labels[:, 0]
    chosen = np.minimum(labels[:, 0], labels[:, 1])
    twisted = labels[:, 0] == labels[:, 1]
    del labels
    _, part = np.unique(chosen, return_inverse=True)
    del chosen
    orientable = np.bincount(part, weights=twisted) == 0
    return flip & orientable[part], part.astype(np.int64), orientable


def flip_faces(faces: np.ndarray, which: np.ndarray) -> None:
    """Reverse the winding of ``faces[which]`` in place (corners 1 and 2 swapped)."""
    second = faces[which, 1]
    faces[which, 1] = faces[which, 2]
    faces[which, 2] = second


def part_volumes(vertices: np.ndarray, faces: np.ndarray, part: np.ndarray,
                 parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(signed volume float64 [C], area float64 [C]) of each part (``part`` int [F] over
    ``parts``), the volume taken about the part's area-weighted centroid ``c`` (module
    docstring), in one pass of slices of ``SLICE`` faces: with ``n = (b − a) × (d − a)``,
    ``det(a − c, b − c, d − c) = a · n − c · n``, so the sums of ``a · n`` and of ``n`` per part
    give it once ``c`` is known."""
    sums = np.zeros((8, parts))  # area, moment (3), a · n, n (3)
    for start in range(0, len(faces), SLICE):
        tri = vertices[faces[start:start + SLICE]].astype(np.float64)
        p = part[start:start + SLICE]
        normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        area = 0.5 * np.sqrt(np.einsum("ij,ij->i", normal, normal))
        centre = tri.sum(axis=1) * (area / 3.0)[:, None]
        columns = (area, *centre.T, np.einsum("ij,ij->i", tri[:, 0], normal), *normal.T)
        for row, weights in enumerate(columns):
            sums[row] += np.bincount(p, weights=weights, minlength=parts)
    area = sums[0]
    centroid = sums[1:4] / np.where(area > 0, area, 1.0)
    volume = (sums[4] - np.einsum("ij,ij->j", centroid, sums[5:8])) / 6.0
    return volume, area


def orient(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, dict]:
    """``faces`` (int [F, 3] over ``vertices`` float [V, 3]) wound consistently and outward
    (module docstring). Returns (faces int32 [F, 3], a new array; facts): ``parts``,
    ``open_parts``, ``flipped`` (faces whose winding changed), ``open_edges``,
    ``nonmanifold_edges``, and the parts whose outside could not be decided —
    ``twisted_parts`` / ``twisted_faces`` (not orientable) and ``flat_parts`` / ``flat_faces``
    (no signed volume) — each an int."""
    faces = np.array(faces, dtype=np.int32)
    pairs = edge_pairs(faces, len(vertices))
    flip, part, orientable = consistent(len(faces), pairs)
    parts = len(orientable)
    is_open = np.zeros(parts, bool)
    is_open[part[pairs["open"]]] = True
    is_open[part[pairs["nonmanifold"]]] = True
    facts = {"open_edges": len(pairs["open"]), "nonmanifold_edges": pairs["nonmanifold_edges"]}
    del pairs
    flip_faces(faces, flip)
    volume, area = part_volumes(vertices, faces, part, parts)
    ratio = np.abs(volume) / np.maximum(area, np.finfo(float).tiny) ** 1.5
    flat = orientable & ((volume == 0) | (is_open & (ratio < OPEN_FLAT)))
    # a flat part keeps the winding most of its faces came with
    came_flipped = np.bincount(part, weights=flip, minlength=parts)
    size = np.bincount(part, minlength=parts)
    turn = np.where(flat, came_flipped * 2 > size, orientable & (volume < 0))
    outward = turn[part]
    flip_faces(faces, outward)
    twisted = ~orientable
    facts.update(parts=parts, open_parts=int(is_open.sum()),
                 flipped=int(np.count_nonzero(flip ^ outward)),
                 twisted_parts=int(twisted.sum()), twisted_faces=int(size[twisted].sum()),
                 flat_parts=int(flat.sum()), flat_faces=int(size[flat].sum()))
    return faces, facts


def orient_file(inp: str, out: str) -> dict:
    """The child's work: the mesh in ``inp`` (``vertices``, ``faces``) oriented (``orient``)
    and written to ``out`` (uncompressed ``.npz``). Returns ``orient``'s facts as int64
    arrays."""
    with np.load(inp) as data:
        vertices, faces = data["vertices"], data["faces"]
    faces, facts = orient(vertices, faces)
    np.savez(out, vertices=vertices, faces=faces)
    return {key: np.int64(value) for key, value in facts.items()}


SOURCE = "the bounded export's orient step (bounded_export/orient.py)"


def undecided_warning(facts: dict) -> dict | None:
    """The ``warning`` event (``message``, ``source``, ``differs``) for ``orient``'s facts when
    some part's outside could not be decided (not orientable, or flat and open); None when
    every part was oriented."""
    from meshfacts.events import make

    twisted, flat = facts["twisted_parts"], facts["flat_parts"]
    if not twisted and not flat:
        return None
    faces = facts["twisted_faces"] + facts["flat_faces"]
    why = []
    if twisted:
        why.append(f"{twisted:,} cannot be wound consistently (a one-sided, Möbius-like surface:"
                   f" {facts['twisted_faces']:,} faces, left as they came)")
    if flat:
        why.append(f"{flat:,} are open and flat, with no inside ({facts['flat_faces']:,} "
                   "faces, wound as most of them came)")
    return make("warning", message=f"The export could not tell the outside of "
                f"{twisted + flat:,} of the mesh's {facts['parts']:,} parts: "
                f"{'; '.join(why)}. Their faces may show their back sides (dark with back-face "
                "culling; Blender's Face Orientation overlay shows them red).", source=SOURCE,
                differs=f"{faces:,} faces may be wound inward")
