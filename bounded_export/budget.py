"""The memory budget (``--export-budget SIZE``) → piece sizes, and the check that an asset can
be exported within it at all. Our own model (no library plans memory for this chain); its
figures were measured on this machine (Linux, 2 cores) with the bumpy-sphere assets of
``standin/sphere_asset.py`` (``python -m bench.export_engine`` repeats the full-size runs:
bench/results/2026-12-01/export_engine/):

- the mesh steps hold the input mesh as its ``.npy`` headers say it is stored (``mesh_bytes``:
  vertices and faces at their stored dtypes, plus the float32 / int32 copies the engine makes of
  any other dtype) plus cleanup's temporaries (sorting, grouping, the vertex graph:
  ``CLEANUP_BYTES_PER_FACE``, measured on closed surfaces, where there are about half as many
  vertices as faces; each vertex beyond that costs ``CLEANUP_BYTES_PER_VERTEX``), and
  fast-simplification's
  own structures (``DECIMATE_BYTES_PER_FACE`` of input faces: 5.24 M faces → 1 M grew the
  process by 1.5 GB; on the 7.9 M-face asset of ``standin.asset`` at 1024 the decimation's
  child process peaked at about 2.7 GB, the export's tree at 3.08 GiB). Both run in child
  processes that read their input from files, so the export process holds no full mesh then;
- the orient step between them (``orient.py``, a child process too) holds the cleaned mesh and
  its edge sort and face graph (``ORIENT_BYTES_PER_FACE``), below the decimation's figure;
- the voxels are read only for the bake: ``coords`` and ``attrs`` as stored, their int32 /
  float32 copies when stored otherwise, and the sort's int64 key and order
  (``VOXEL_INDEX_BYTES``) — ``VOXEL_BYTES`` a voxel for the port's int32 / float32 arrays;
- the unwrap holds the decimated mesh and one batch of faces inside xatlas
  (``UNWRAP_BYTES_PER_FACE``, measured 1.31 M faces in one atlas: 0.5 GB);
- the bake holds the texture planes (``TEXTURE_BYTES_PER_TEXEL``: six uint8 channels, the
  coverage masks, the writer's border distance) and one chunk of texels in flight
  (``BAKE_BYTES_PER_TEXEL``:
  surface point, eight corner keys, look-ups and weights, the sampled attributes);
- the seam fill's distance transform holds ``SEAM_BYTES_PER_TEXEL`` over the whole texture.

- the decimation, when its one fast-simplification call does not fit (``DECIMATE_BYTES_PER_FACE``
  over the input's faces), runs in ``decimate_pieces`` spatial pieces (``pieces.py``): the
  split (``SPLIT_BYTES_PER_FACE`` over the input in one child), one piece at a time in its own
  child (pyfqmr: ``PIECE_BASE`` + ``PIECE_BYTES_PER_FACE`` over the piece's faces), then
  the stitch and final fast-simplification pass over about ``OVERSHOOT`` × the target. The
  pieces are as few as fit ``PIECE_SHARE`` of the budget. The default budget's runs keep the
  one call (the method and figures measured for it); only a budget too small for it takes the
  pieces, and the ``decimate`` stage event says so (``method``, ``pieces``).

Piece sizes: faces per unwrap batch and texels per bake chunk are a quarter (``HEADROOM``: the
model's margin) of what is left of the budget after what the step must hold, divided by the
per-piece cost, clamped to a useful range
(``UNWRAP_BATCH``, ``BAKE_CHUNK``). When even the smallest pieces do not fit, or the file
alone is larger than the budget, ``check`` raises ``BadAsset`` before anything is read.
"""
from __future__ import annotations

from dataclasses import dataclass

from bounded_export.errors import AssetTooLarge, BudgetTooSmall
from meshfacts.units import format_size

GIB = 1 << 30
DEFAULT_BUDGET = 3 * GIB
MIN_BUDGET = 256 << 20
PYTHON_BASE = 120 << 20           # the interpreter with numpy, scipy, trimesh, xatlas loaded
MESH_BYTES_PER_FACE = 18          # float32 vertices (about F / 2 of them) + int32 faces
VERTEX_BYTES = 12                 # one float32 vertex as the engine holds it
FACE_BYTES = 12                   # one int32 face
CLEANUP_BASE = 96 << 20           # cleanup's own tables beyond the interpreter, and
CLEANUP_BYTES_PER_FACE = 180      # per face: a line through the measured cleanup peaks, 420.6 MiB
#   at 1.31 M faces (sphere, 400M test run) and 1.55 GiB at 7.9 M (standin.asset, 2G bench), is
#   198 MB + 186 B a face; the 200 B a face used before predicted 392 MiB for the first, below
#   the measured peak, so a 400M budget was overrun. These leave 7-10 % above both.
CLEANUP_BYTES_PER_VERTEX = 80     # per vertex beyond F / 2: merge_vertices' row hashes, their
#   argsort and inverse (int64 each), the graph's labels and the compact's index; a hand-made
#   asset of 200 M vertices and a few faces took cleanup to 15.8 GiB, 85 B a vertex with the
#   vertices themselves (12 B)
ORIENT_BYTES_PER_FACE = 190       # the orient step's child per face of the cleaned mesh (its
#   vertices, about half as many, included): the half-edge keys, their order and sorted copy
#   (int64 each, three a face), then the double cover's graph in SciPy's CSR and its transpose.
#   Measured 2026-12-06 by ``python -m bench.export_orient``: the child's VmHWM 301 MB at
#   1,310,720 faces, 1.42 GB at the 7.9 M of ``standin.asset`` at 1024 (169 B a face over a
#   79 MB base: bench/results/2026-12-06/export_orient/); 12 % above that line.
DECIMATE_BYTES_PER_FACE = 340       # 7.9 M faces: the child peaked at about 2.7 GB
VOXEL_BYTES = 52                  # int32 x, y, z + six float32 + VOXEL_INDEX_BYTES
VOXEL_INDEX_BYTES = 16            # the int64 sort key and its order
UNWRAP_BYTES_PER_FACE = 400
TEXTURE_BYTES_PER_TEXEL = 16
BAKE_BYTES_PER_TEXEL = 400
SEAM_BYTES_PER_TEXEL = 24
OUT_BYTES_PER_FACE = 120          # the decimated, unwrapped mesh with UVs and normals
SPLIT_BYTES_PER_FACE = 60         # the slab split: the mesh, centroids, slab labels, one piece
PIECE_BASE = 40 << 20             # a piece's child: ``python -m bounded_export.stoppable``
#   with numpy and pyfqmr imported (VmHWM 37 MiB here)
PIECE_BYTES_PER_FACE = 560        # pyfqmr per face of the piece (its vertices, about half as
#   many, included): setMesh builds vector<vector<>> copies of the arrays, then the simplifier's
#   own vertices, triangles and refs. Measured 2026-12-01 on this machine: piece 1 of 3
#   (2,634,006 faces, 1,319,214 vertices) of the 7.9 M-face ``standin.asset`` mesh at 1024,
#   its child (decimate_piece_file → 416,666 faces, 7.9 s) peaked at VmHWM 1,433,156 kB =
#   the base + 542 B a face; the full-size ``--export-budget 2G`` run then planned 4 pieces of
#   1.98 M faces (predicted 1.18 GiB) and peaked at 1.06 GiB while one ran.
PIECE_SHARE = 0.75                # share of the budget one piece's process tree may take
MAX_PIECES = 64
UNWRAP_BATCH = (20_000, 250_000)
HEADROOM = 0.25                   # share of the room left that one piece may take
BAKE_CHUNK = (1 << 14, 1 << 16)  # at most ~0.2 s a chunk here: the cancel's latency


@dataclass(frozen=True)
class Plan:
    """Piece sizes and the predicted peak (bytes) of each step for one asset and budget."""

    budget: int
    unwrap_batch_faces: int
    bake_chunk_texels: int
    peaks: dict
    decimate_pieces: int = 0
    """0: the decimation is one fast-simplification call; N ≥ 2: it runs in N pieces."""

    @property
    def peak(self) -> int:
        return max(self.peaks.values())


def _clamp(value: float, bounds: tuple[int, int]) -> int:
    return int(min(max(value, bounds[0]), bounds[1]))


def check_file(file_bytes: int, budget: int | None = None) -> int:
    """The budget in bytes (None: ``DEFAULT_BUDGET``), after refusing a budget below
    ``MIN_BUDGET`` (``BudgetTooSmall``, a bad lever: ``ExportLevers.check`` refuses it first)
    and a file larger than the budget (``AssetTooLarge``) — from its size alone, before reading
    it."""
    budget = DEFAULT_BUDGET if budget is None else int(budget)
    if budget < MIN_BUDGET:
        raise BudgetTooSmall(budget, MIN_BUDGET)
    if file_bytes > budget:
        raise AssetTooLarge(f"the file is {format_size(file_bytes)}, larger than the export "
                            f"budget of {format_size(budget)}; it was not read",
                            "Raise --export-budget, or check that this is the asset you meant.",
                            budget)
    return budget


def pieced_decimation(faces: int, target: int, budget: int) -> tuple[int, int]:
    """(pieces, predicted peak in bytes) of the decimation in pieces of ``faces`` input faces
    to ``target`` within ``budget``: the fewest pieces (2 to ``MAX_PIECES``) whose one-piece
    process tree fits ``PIECE_SHARE`` of the budget; the peak is the largest of the split, a
    piece and the final pass (the export process's ``PYTHON_BASE`` beside each child)."""
    from bounded_export.pieces import OVERSHOOT

    room = budget * PIECE_SHARE - PYTHON_BASE - PIECE_BASE
    per_piece = max(room / PIECE_BYTES_PER_FACE, 1.0)
    pieces = int(min(max(-(-faces // int(per_piece)), 2), MAX_PIECES))
    stitched = min(faces, int(target * OVERSHOOT * 1.05))  # + the locked borders' rows
    peak = max(2 * PYTHON_BASE + SPLIT_BYTES_PER_FACE * faces,
               PYTHON_BASE + PIECE_BASE + PIECE_BYTES_PER_FACE * -(-faces // pieces),
               2 * PYTHON_BASE + DECIMATE_BYTES_PER_FACE * stitched)
    return pieces, peak


SUGGEST_STEP = 256 << 20           # the over-budget hint's budgets are whole steps of this
SUGGEST_MARGIN = 1.1              # above the plan's peak, before rounding up to a step
SUGGEST_MAX = 1 << 40             # budgets tried for the hint; beyond it, whole GiB as before


def suggest_budget(peak: int, **sizes) -> int:
    """The budget (bytes) the over-budget hint names: the first whole ``SUGGEST_STEP`` at or
    above ``peak`` × ``SUGGEST_MARGIN`` at which ``plan(**sizes, budget=…)`` fits — the plan's
    pieces grow with the budget, so each candidate is planned again, not assumed; when none up
    to ``SUGGEST_MAX`` fits, ``peak`` rounded up to whole GiB. ``sizes``: ``plan``'s
    keywords but ``budget``."""
    step = -(-int(peak * SUGGEST_MARGIN) // SUGGEST_STEP) * SUGGEST_STEP
    while step <= SUGGEST_MAX:
        try:
            plan(**sizes, budget=step, suggest=False)
            return step
        except AssetTooLarge:
            step += SUGGEST_STEP
    return -(-peak // GIB) * GIB


def budget_flag(size: int) -> str:
    """``size`` bytes (a whole MiB) as ``--export-budget`` takes it: ``2G``, ``768M``."""
    return f"{size // GIB}G" if size % GIB == 0 else f"{size >> 20}M"


def asset_sizes(members: dict) -> dict:
    """``plan``'s size keywords (``faces``, ``voxels``, ``vertices``, ``mesh_bytes``,
    ``voxel_bytes``) from the asset's members as their ``.npy`` headers describe them
    (``asset.inspect_asset``: ``Member`` with ``shape``, ``dtype``, ``nbytes``), no array read.
    ``mesh_bytes``: vertices and faces as stored, plus the float32 / int32 copies the engine
    makes of any other dtype; ``voxel_bytes``: ``coords`` and ``attrs`` likewise, plus the
    sort's ``VOXEL_INDEX_BYTES`` a voxel. ``fdg_*`` members are never read: the file's size
    (``check_file``) is all they cost."""
    vertices, faces = members["vertices"], members["faces"]
    coords, attrs = members["coords"], members["attrs"]
    count_v, count_f, count_n = vertices.shape[0], faces.shape[0], coords.shape[0]

    def copy(member, kind: str, itemsize: int, width: int) -> int:
        same = member.dtype.kind == kind and member.dtype.itemsize == itemsize
        return 0 if same else member.shape[0] * width * itemsize

    mesh = vertices.nbytes + faces.nbytes + copy(vertices, "f", 4, 3) + copy(faces, "i", 4, 3)
    voxel = coords.nbytes + attrs.nbytes + copy(coords, "i", 4, 3) \
        + copy(attrs, "f", 4, attrs.shape[1]) + VOXEL_INDEX_BYTES * count_n
    return {"faces": count_f, "voxels": count_n, "vertices": count_v, "mesh_bytes": mesh,
            "voxel_bytes": voxel}


def plan(*, faces: int, voxels: int, target: int, texture: int, file_bytes: int,
         budget: int | None = None, suggest: bool = True, vertices: int | None = None,
         mesh_bytes: int | None = None, voxel_bytes: int | None = None) -> Plan:
    """The plan for an asset of ``faces`` input faces, ``vertices`` vertices (None: ``faces``
    / 2, a closed surface's) and ``voxels`` voxels exported to ``target`` faces and a
    ``texture``² texture within ``budget`` bytes (None: the default). ``mesh_bytes`` and
    ``voxel_bytes``: what reading the mesh and the voxels holds (``asset_sizes``; None: the
    port's float32 / int32 arrays). Raises ``AssetTooLarge`` (a ``BadAsset``, ``key`` None)
    when it cannot fit (``check_file`` first); its hint names the budget that would
    (``suggest_budget``; not searched when ``suggest`` is False, as inside that search)."""
    budget = check_file(file_bytes, budget)
    vertices = faces // 2 if vertices is None else vertices
    mesh_bytes = VERTEX_BYTES * vertices + FACE_BYTES * faces if mesh_bytes is None \
        else mesh_bytes
    voxel_bytes = VOXEL_BYTES * voxels if voxel_bytes is None else voxel_bytes
    out_faces = min(target, faces)
    mesh = PYTHON_BASE + mesh_bytes
    texels = texture * texture
    held_bake = PYTHON_BASE + OUT_BYTES_PER_FACE * out_faces + voxel_bytes \
        + TEXTURE_BYTES_PER_TEXEL * texels
    room_unwrap = budget - PYTHON_BASE - OUT_BYTES_PER_FACE * out_faces
    batch = _clamp(room_unwrap * HEADROOM / UNWRAP_BYTES_PER_FACE, UNWRAP_BATCH)
    chunk = _clamp((budget - held_bake) * HEADROOM / BAKE_BYTES_PER_TEXEL, BAKE_CHUNK)
    extra_vertices = max(vertices - faces // 2, 0)
    peaks = {
        "load": mesh + voxel_bytes,
        "cleanup": mesh + CLEANUP_BASE + CLEANUP_BYTES_PER_FACE * faces
        + CLEANUP_BYTES_PER_VERTEX * extra_vertices,
        # the cleaned mesh in the orient child (the interpreter's base too) beside the export
        "orient": 2 * PYTHON_BASE + ORIENT_BYTES_PER_FACE * faces
        + VERTEX_BYTES * extra_vertices,
        # the cleaned mesh: unused and duplicate vertices gone
        "decimate": PYTHON_BASE + MESH_BYTES_PER_FACE * faces + DECIMATE_BYTES_PER_FACE * faces,
        "uv_unwrap": PYTHON_BASE + OUT_BYTES_PER_FACE * out_faces + UNWRAP_BYTES_PER_FACE * batch,
        "bake": held_bake + BAKE_BYTES_PER_TEXEL * chunk,
        "seams": held_bake + SEAM_BYTES_PER_TEXEL * texels,
    }
    pieces = 0
    if peaks["decimate"] > budget and faces > target:
        pieces, peaks["decimate"] = pieced_decimation(faces, target, budget)
    result = Plan(budget, batch, chunk, peaks, pieces)
    if result.peak > budget:
        step = max(peaks, key=peaks.get)
        need = suggest_budget(peaks[step], faces=faces, voxels=voxels, target=target,
                              texture=texture, file_bytes=file_bytes, vertices=vertices,
                              mesh_bytes=mesh_bytes, voxel_bytes=voxel_bytes) \
            if suggest else GIB
        also = ("" if step in ("load", "cleanup", "decimate") else
                " (or lower --texture-size / --decimation-target)")
        raise AssetTooLarge(f"the asset ({faces:,} faces, {vertices:,} vertices, {voxels:,} "
                            f"voxels) is too large for an export budget of "
                            f"{format_size(budget)}: its {step} step needs about "
                            f"{format_size(peaks[step])}; it was not read",
                            f"Give --export-budget {budget_flag(need)} or more{also}.", budget)
    return result
