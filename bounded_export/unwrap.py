"""UV unwrap in bounded pieces: xatlas charts and packs batches of spatially coherent patches;
the batches' atlases are then packed side by side into one square (our own shelf packer:
xatlas cannot pack already-packed atlases without charting them again).

Why pieces: one xatlas call on 1,000,000 faces was still running after 14 minutes (measured here),
and its chart solver's cost grows faster than the chart: measured here on a bumpy sphere,
patches of 50,000 faces took 412 µs a face, patches of 2,500 faces 6–23 µs a face. So:

1. **Patches**: the faces are split by recursive median cuts of their centroids along the
   longest axis until each patch has at most ``PATCH_FACES`` faces (spatially compact pieces;
   a chart never crosses a patch border, which adds seams along patch borders).
2. **Batches**: consecutive patches (the cut order keeps them neighbours) up to the budget's
   ``batch_faces`` go to one ``xatlas.Atlas``, one ``add_mesh`` per patch, so xatlas charts
   the patches on its worker threads (all cores) and packs them at one global texel density
   (``texels_per_unit`` from the total area and ``FILL`` — the share of the square charts are
   expected to cover).
3. **Packing**: the batch atlases (rectangles in texels) are placed on shelves, tallest first,
   ``PAD`` texels apart, and every UV is divided by the side of the square they fill.

Each batch runs in a child process (``stoppable``): one xatlas call cannot be interrupted, and
its time depends on the geometry (a few to a few hundred µs a face), so a cancel kills the
running batch's process. Progress is reported after every batch.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

PATCH_FACES = 2500
PAD = 1          # texels between charts (xatlas padding, plus its bilinear guard texel) and
                 # between batch atlases
FILL = 0.55      # expected share of the square that charts cover


@dataclass
class Unwrapped:
    """The unwrapped mesh: ``vertices`` float32 [W, 3] (split along UV seams), ``faces`` int32
    [F, 3], ``uv`` float32 [W, 2] in 0..1 with v growing downwards (image rows, glTF's
    convention), ``source`` int64 [W] (the vertex of the input mesh each came from),
    ``charts`` (count), ``batches`` (count), ``utilization`` (share of the square covered)."""

    vertices: np.ndarray
    faces: np.ndarray
    uv: np.ndarray
    source: np.ndarray
    charts: int
    batches: int
    utilization: float


def patches(vertices: np.ndarray, faces: np.ndarray, limit: int = PATCH_FACES) -> list:
    """Face-index arrays of at most ``limit`` faces each, by recursive median cuts of the
    face centroids along the longest axis, in cut order (neighbours stay adjacent)."""
    centres = vertices[faces].mean(axis=1)
    out, stack = [], [np.arange(len(faces))]
    while stack:
        idx = stack.pop()
        if len(idx) <= limit:
            out.append(idx)
            continue
        pts = centres[idx]
        axis = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
        half = len(idx) // 2
        part = np.argpartition(pts[:, axis], half)
        stack.append(idx[part[half:]])
        stack.append(idx[part[:half]])
    return out


def batches(parts: list, limit: int) -> list:
    """Consecutive patches grouped into lists of at most ``limit`` faces (at least one patch)."""
    out, current, count = [], [], 0
    for part in parts:
        if current and count + len(part) > limit:
            out.append(current)
            current, count = [], 0
        current.append(part)
        count += len(part)
    if current:
        out.append(current)
    return out


def texels_per_unit(vertices: np.ndarray, faces: np.ndarray, texture: int) -> float:
    """Texels per unit length so the charts cover about ``FILL`` of a ``texture``² square."""
    from bounded_export.cleanup import face_areas

    area = float(face_areas(vertices, faces).sum())
    return float(np.sqrt(FILL * texture * texture / max(area, 1e-12)))


def chart_batch(vertices, faces, sizes, tpu) -> dict:
    """xatlas on one batch (run in a child process by ``_chart``): ``vertices`` float32
    [n, 3] and ``faces`` [m, 3] of the batch, ``sizes`` [p] the face count of each patch (the
    faces are the patches one after the other), ``tpu`` texels per unit. Returns ``vmap``
    (each output vertex's batch vertex, per patch one after the other), ``faces`` (into the
    output vertices of the batch), ``uv`` (texels) and ``meta`` = [width, height, charts]."""
    import xatlas

    atlas = xatlas.Atlas()
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    for begin, end in itertools.pairwise(bounds):
        used, local = np.unique(faces[begin:end], return_inverse=True)
        atlas.add_mesh(vertices[used], local.reshape(-1, 3).astype(np.uint32))
    pack = xatlas.PackOptions()
    pack.padding, pack.bilinear, pack.resolution = PAD, True, 0
    pack.texels_per_unit = float(tpu)
    atlas.generate(xatlas.ChartOptions(), pack)
    width, height = float(atlas.width), float(atlas.height)
    vmaps, out_faces, uvs, offset = [], [], [], 0
    for i, (begin, end) in enumerate(itertools.pairwise(bounds)):
        vmap, indices, uv = atlas.get_mesh(i)
        used = np.unique(faces[begin:end])
        vmaps.append(used[vmap.astype(np.int64)])
        out_faces.append(indices.astype(np.int64) + offset)
        uvs.append(uv * np.array([width, height], np.float32))
        offset += len(vmap)
    return {"vmap": np.concatenate(vmaps), "faces": np.concatenate(out_faces),
            "uv": np.concatenate(uvs), "meta": np.array([width, height, atlas.chart_count])}


def _chart(vertices, faces, group, tpu, workdir, steps) -> tuple:
    """One batch through ``chart_batch`` in a child process (``stoppable``: a cancel kills
    it): (output vertex sources into ``vertices``, faces, uv texels, width, height, charts)."""
    from bounded_export.stoppable import call

    order = np.concatenate(group)
    used, local = np.unique(faces[order], return_inverse=True)
    out = call("bounded_export.unwrap:chart_batch",
               {"vertices": vertices[used], "faces": local.reshape(-1, 3).astype(np.int32),
                "sizes": np.array([len(p) for p in group], np.int64)}, {"tpu": float(tpu)},
               workdir, steps)
    width, height, charts = out["meta"]
    return (used[out["vmap"]], out["faces"], out["uv"], float(width), float(height),
            int(charts))


def _shelves(sizes: np.ndarray, width: float, pad: float) -> tuple[np.ndarray, float]:
    """Offsets for ``sizes`` on shelves of ``width``, tallest first; and the square's side."""
    offsets = np.zeros_like(sizes)
    x = y = shelf = used_w = 0.0
    for i in np.argsort(-sizes[:, 1], kind="stable"):
        w, h = sizes[i]
        if x > 0 and x + w > width:
            x, y, shelf = 0.0, y + shelf + pad, 0.0
        offsets[i] = (x, y)
        x += w + pad
        used_w = max(used_w, x)
        shelf = max(shelf, h)
    return offsets, max(used_w, y + shelf)


def shelf_pack(sizes: list[tuple[float, float]], pad: float = PAD) -> tuple[np.ndarray, float]:
    """Offsets [n, 2] (x, y, texels) for rectangles ``sizes`` (w, h) on shelves, tallest first,
    ``pad`` apart; of 32 strip widths from the widest rectangle to all in one row, the one
    whose square is smallest. Returns (offsets, the side of that square)."""
    sizes = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
    low = float(sizes[:, 0].max() + pad)
    high = max(low, float((sizes[:, 0] + pad).sum()))
    best = None
    for width in np.linspace(low, high, 32):
        offsets, side = _shelves(sizes, float(width), pad)
        if best is None or side < best[1]:
            best = (offsets, side)
    return best


def unwrap(vertices: np.ndarray, faces: np.ndarray, texture: int, batch_faces: int,
           workdir, steps=None) -> Unwrapped:
    """Chart and pack ``faces`` for a ``texture``² texture in batches of at most
    ``batch_faces`` faces (``Unwrapped``; faces come out in patch order). ``workdir``: a
    folder for the child processes' files. ``steps``: progress and cancel (the running
    batch's child killed)."""
    tpu = texels_per_unit(vertices, faces, texture)
    groups = batches(patches(vertices, faces), batch_faces)
    pieces, done = [], 0
    for group in groups:
        pieces.append(_chart(vertices, faces, group, tpu, workdir, steps))
        done += sum(len(p) for p in group)
        if steps is not None:
            steps.progress(done / len(faces))
    offsets, side = shelf_pack([(p[3], p[4]) for p in pieces])
    sources, out_faces, uvs, base = [], [], [], 0
    for piece, offset in zip(pieces, offsets, strict=True):
        src, fcs, uv, _w, _h, _charts = piece
        sources.append(src)
        out_faces.append(fcs + base)
        uvs.append((uv + offset.astype(np.float32)) / np.float32(side))
        base += len(src)
    source = np.concatenate(sources)
    out_faces = np.concatenate(out_faces).astype(np.int32)
    uv = np.concatenate(uvs).astype(np.float32)
    covered = _uv_area(uv, out_faces)
    return Unwrapped(vertices[source], out_faces, uv, source,
                     sum(p[5] for p in pieces), len(groups), covered)


def _uv_area(uv: np.ndarray, faces: np.ndarray) -> float:
    a, b, c = uv[faces[:, 0]], uv[faces[:, 1]], uv[faces[:, 2]]
    cross = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    return float(np.abs(cross).sum() * 0.5)
