"""Decimation in spatial pieces, for a mesh whose one fast-simplification call does not fit the
budget (``budget.plan`` decides; ``decimate`` runs the single call otherwise).

1. ``split_file``: the cleaned mesh cut into ``pieces`` slabs of equal face count along its
   longest axis (each face goes to the slab of its centroid); each piece is written with its
   own compact vertex list. A vertex used by faces of two slabs is in both: on each side it
   lies on that piece's open border.
2. ``decimate_piece_file``: one piece in its own child process, decimated to its share of
   ``target · OVERSHOOT`` faces by pyfqmr (``Simplify.simplify_mesh``, the same
   Fast-Quadric-Mesh-Simplification algorithm fast-simplification wraps) with
   ``preserve_border=True``: no edge with an open-border vertex is collapsed (pyfqmr's
   ``Simplify.h``: ``if (v0.border || v1.border) continue``), so the piece's border vertices
   keep their exact coordinates (float32 → its float64 → float32) and every border edge stays
   (checked by tests/export_engine/test_decimate_pieces.py on open and closed meshes).
   fast-simplification 0.2.0 has the same flag (``simplify(..., preserve_border=True)``; tried
   here on an 853 k-face open slab: the same border vertices came back exactly, 288 B a face of
   growth against pyfqmr's 337), found after pyfqmr was measured at full size; moving the
   pieces onto it would drop a dependency and is left for a measured change.
3. ``stitch_file``: the decimated pieces concatenated and their vertices merged where the
   coordinates are exactly equal — the shared border vertices, which no piece moved. Distinct
   vertices of the cleaned input never share coordinates (cleanup merged them), so nothing
   else merges. Then one fast-simplification call on this much smaller mesh reaches
   ``target`` exactly, as the single-call path does; the border rows no piece could reduce are
   reduced there.

Each step is a ``stoppable`` child process reading and writing files in the export's work
folder, so a cancel kills it within 0.1 s and the export process never holds the full mesh.
Our own code: the slab split and the stitch (no library splits a mesh for bounded-memory
decimation); the decimation itself is the libraries'.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

OVERSHOOT = 1.25
"""Faces the pieces keep, as a multiple of the target: the final pass over the stitched mesh
then has room to reduce the pieces' locked borders evenly."""


def slab_bounds(centroids: np.ndarray, pieces: int) -> np.ndarray:
    """Cut values along one axis (float64 [pieces - 1]) that split ``centroids`` (float [F])
    into ``pieces`` slabs of about equal count (quantiles)."""
    return np.quantile(centroids, np.arange(1, pieces) / pieces)


def _centroid_axis(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    axis = int(np.argmax(np.ptp(vertices, axis=0)))
    column = vertices[:, axis]
    out = np.empty(len(faces), np.float32)
    step = 1 << 20
    for start in range(0, len(faces), step):
        f = faces[start:start + step]
        out[start:start + step] = (column[f[:, 0]] + column[f[:, 1]] + column[f[:, 2]]) / 3
    return out


def split(vertices: np.ndarray, faces: np.ndarray, pieces: int) -> list[tuple]:
    """``pieces`` (vertices float32 [V_i, 3], faces int32 [F_i, 3]) slabs of the mesh (see the
    module docstring); every face is in exactly one piece."""
    centre = _centroid_axis(vertices, faces)
    slab = np.searchsorted(slab_bounds(centre, pieces), centre, side="right")
    del centre
    remap = np.empty(len(vertices), np.int64)
    out = []
    for i in range(pieces):
        f = faces[slab == i]
        used = np.zeros(len(vertices), bool)
        used[f.ravel()] = True
        index = np.flatnonzero(used)
        remap[index] = np.arange(len(index))
        out.append((vertices[index], remap[f].astype(np.int32)))
    return out


def split_file(inp: str, workdir: str, pieces: int) -> dict:
    """The child's work: the mesh in ``inp`` split (``split``) and each piece written to
    ``workdir/piece-I.npz``. Returns ``{"faces": int64 [pieces]}`` (faces of each piece)."""
    with np.load(inp) as data:
        vertices, faces = data["vertices"], data["faces"]
    counts = []
    for i, (v, f) in enumerate(split(vertices, faces, pieces)):
        np.savez(Path(workdir) / f"piece-{i}.npz", vertices=v, faces=f)
        counts.append(len(f))
    return {"faces": np.asarray(counts, np.int64)}


AGGRESSIVENESS = 7
"""pyfqmr's threshold growth (``threshold = alpha · (iteration + K) ** aggressiveness``): its
documented default, the same as fast-simplification's ``agg``."""


def decimate_locked(vertices: np.ndarray, faces: np.ndarray, target: int) -> tuple:
    """(vertices float32 [V', 3], faces int32 [F', 3]) of the mesh (vertices float32 [V, 3],
    faces int [F, 3]) decimated to about ``target`` faces with its open-border vertices and
    edges kept exactly (pyfqmr's ``simplify_mesh(preserve_border=True)``; ``getMesh`` returns
    the compacted mesh: no unreferenced vertex). The returned normals are not used."""
    import pyfqmr

    if len(faces) <= target:
        return vertices, faces
    simplifier = pyfqmr.Simplify()
    simplifier.setMesh(np.asarray(vertices), np.asarray(faces, np.int32))
    del vertices, faces
    simplifier.simplify_mesh(target_count=int(target), aggressiveness=AGGRESSIVENESS,
                             preserve_border=True, verbose=False)
    vertices, faces, _normals = simplifier.getMesh()
    del simplifier, _normals
    return np.asarray(vertices, np.float32), np.asarray(faces, np.int32)


def decimate_piece_file(inp: str, out: str, target: int) -> dict:
    """The child's work: the piece in ``inp`` decimated (``decimate_locked``) to ``target``
    faces, written to ``out``. Returns ``{"faces"}``."""
    with np.load(inp) as data:
        vertices, faces = data["vertices"], data["faces"]
    vertices, faces = decimate_locked(vertices, faces, target)
    np.savez(out, vertices=vertices, faces=faces)
    return {"faces": np.int64(len(faces))}


def stitch(parts: list[tuple]) -> tuple:
    """(vertices float32, faces int32): the pieces (vertices, faces) concatenated, vertices
    with exactly equal coordinates merged (``cleanup.merge_vertices``: trimesh's
    ``unique_rows``), faces a merge made degenerate dropped."""
    from bounded_export.cleanup import merge_vertices

    offsets = np.cumsum([0] + [len(v) for v, _ in parts[:-1]])
    vertices = np.concatenate([v for v, _ in parts])
    faces = np.concatenate([f.astype(np.int64) + o
                            for (_, f), o in zip(parts, offsets, strict=True)])
    vertices, faces = merge_vertices(vertices, faces)
    ok = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    return vertices, np.ascontiguousarray(faces[ok], np.int32)


def stitch_file(workdir: str, pieces: int, out: str, target: int) -> dict:
    """The child's work: ``workdir/piece-I.out.npz`` stitched (``stitch``), then decimated to
    ``target`` by fast-simplification (``decimate.simplify``, its twin faces dropped),
    written to ``out``. Returns ``{"stitched", "faces", "twins"}`` (faces before and after the
    final pass; faces ``drop_twin_faces`` removed)."""
    from bounded_export.decimate import simplify

    parts = []
    for i in range(pieces):
        with np.load(Path(workdir) / f"piece-{i}.out.npz") as data:
            parts.append((data["vertices"], data["faces"]))
    vertices, faces = stitch(parts)
    del parts
    stitched = len(faces)
    result = simplify(vertices, faces, target) if stitched > target \
        else {"vertices": vertices, "faces": faces}
    twins = result.pop("twins", np.int64(0))
    np.savez(out, **result)
    return {"stitched": np.int64(stitched), "faces": np.int64(len(result["faces"])),
            "twins": np.int64(twins)}


def piece_targets(counts, target: int) -> list[int]:
    """Each piece's target: its share (by faces, ``counts``) of ``target · OVERSHOOT``."""
    total = float(sum(counts))
    return [max(1, int(np.ceil(target * OVERSHOOT * c / total))) for c in counts]


def decimate_in_pieces(inp: Path, out: Path, target: int, pieces: int, workdir: Path,
                       steps) -> dict:
    """The pieced decimation (module docstring) of the mesh file ``inp`` to the mesh file
    ``out`` (``target`` faces), each step a ``stoppable`` child process; ``steps``: the
    export's ``Steps`` (a ``progress`` event after each piece, with ``pieces``; cancel
    checks). Returns ``{"pieces", "piece_faces", "stitched", "faces", "twins"}``. Raises
    ``ExportCancelled``, ``RuntimeError`` (a child failed)."""
    from bounded_export.stoppable import call

    workdir = Path(workdir)
    counts = call("bounded_export.pieces:split_file", None,
                  {"inp": str(inp), "workdir": str(workdir), "pieces": int(pieces)},
                  workdir, steps)["faces"].tolist()
    for i, piece_target in enumerate(piece_targets(counts, target)):
        steps.progress(0.05 + 0.8 * i / pieces, force=True, pieces=pieces, piece=i + 1)
        piece = workdir / f"piece-{i}.npz"
        call("bounded_export.pieces:decimate_piece_file", None,
             {"inp": str(piece), "out": str(workdir / f"piece-{i}.out.npz"),
              "target": piece_target}, workdir, steps)
        piece.unlink()
    steps.progress(0.85, force=True, pieces=pieces, piece=pieces)
    done = call("bounded_export.pieces:stitch_file", None,
                {"workdir": str(workdir), "pieces": int(pieces), "out": str(out),
                 "target": int(target)}, workdir, steps)
    for i in range(pieces):
        (workdir / f"piece-{i}.out.npz").unlink(missing_ok=True)
    return {"pieces": int(pieces), "piece_faces": [int(c) for c in counts],
            "stitched": int(done["stitched"]), "faces": int(done["faces"]),
            "twins": int(done["twins"])}
