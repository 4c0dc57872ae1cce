"""Load and validate the port's saved asset (``save_mesh_checkpoint`` ``.npz``).

Members (the stand-in's ``_write_mesh_npz`` and the real port's writer):

========== ============ =================================================================
key        dtype        shape / meaning
========== ============ =================================================================
vertices   float        [V, 3], V ≥ 3, finite
faces      integer      [F, 3], F ≥ 1, each index in [0, V)
coords     integer      [N, 3] = x, y, z (what the port writes: the sparse tensor's
                        ``coords[:, 1:]``) or [N, 4] = batch, x, y, z (batch ignored);
                        x, y, z in [0, resolution)
attrs      float        [N, 6] = base colour RGB, metallic, roughness, alpha, each in 0..1
origin     float        [3], the grid's corner (voxel (0, 0, 0) spans origin..origin + size)
voxel_size float        scalar (or [3] equal values), > 0
resolution integer      scalar, 1..8192
fdg_*      any          optional (accepted, never read)
========== ============ =================================================================

Everything the file says about its arrays is checked from the zip directory and each member's
``.npy`` header before any array is read (``inspect_asset``), so a file that would not fit the
budget — e.g. 30 GB — is refused without reading it. Values (finite vertices, face indices,
coords on the grid, attrs in 0..1) are then checked in bounded slices as they are loaded; the
voxels' values are checked in the ``load`` step already, streamed from the zip in blocks of
``STREAM_ROWS`` rows (``check_voxels``: no array of the voxels' size), although the voxels
themselves are read only for the bake. A member that cannot be read (a bad CRC, cut short) is
refused the same way. Counts no decoder writes are refused from the headers too: more
vertices than three per face (the rest are used by no face) and no voxel. A mesh without one
face that has an area is refused in the ``load`` step (cleanup would keep nothing). Every
failure is ``BadAsset`` naming the key.
"""
from __future__ import annotations

import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bounded_export.errors import BadAsset

REQUIRED = ("vertices", "faces", "coords", "attrs", "origin", "voxel_size", "resolution")
CHANNELS = 6
MAX_RESOLUTION = 8192
ATTR_TOLERANCE = 1e-4  # float rounding of a 0..1 value written as float16/32
CHECK_SLICE = 1 << 20  # rows per validation slice (bounded temporaries)
STREAM_ROWS = 1 << 16  # rows per block of a member checked from its stream (``check_voxels``)


@dataclass(frozen=True)
class Member:
    """One array of the asset as its ``.npy`` header describes it."""

    key: str
    shape: tuple
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class Asset:
    """A validated asset: ``vertices`` float32 [V, 3], ``faces`` int32 [F, 3], ``coords``
    int32 [N, 3] (x, y, z), ``attrs`` float32 [N, 6], ``origin`` float64 [3], ``voxel_size``
    float, ``resolution`` int. ``path``: where it was read; ``boxes``: where its mesh and its
    voxels lie."""

    vertices: np.ndarray
    faces: np.ndarray
    coords: np.ndarray | None
    attrs: np.ndarray | None
    origin: np.ndarray
    voxel_size: float
    resolution: int
    path: Path
    boxes: object = None
    """``coverage.Boxes`` of the mesh and the voxels (``load_asset``)."""


READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)
"""What reading a damaged member raises: a bad CRC or a cut-short member (``BadZipFile``,
``EOFError``), bad deflate data (``zlib.error``), a broken ``.npy`` header or too few bytes for
its shape (``ValueError``), the disk (``OSError``)."""


def _damaged(key: str, exc: BaseException) -> BadAsset:
    """The ``BadAsset`` for member ``key`` that cannot be read (``exc``: one of
    ``READ_ERRORS``)."""
    return BadAsset(key, f"cannot be read: the file is damaged ({type(exc).__name__}: {exc})",
                    "The asset file is damaged (a bad copy or download, or a disk error): copy "
                    "it again, or export the asset again (Pixal3D's --keep-asset).")


def _read_header(f) -> tuple[tuple, bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the open ``.npy`` stream ``f`` (``f`` is left at
    the first data byte)."""
    version = np.lib.format.read_magic(f)
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, fortran, dtype = read(f)
    return tuple(int(n) for n in shape), bool(fortran), np.dtype(dtype)


def _header(archive: zipfile.ZipFile, name: str) -> Member:
    """The ``.npy`` header of member ``name`` (its first bytes only). Raises ``BadAsset``
    naming the key when it cannot be read."""
    try:
        with archive.open(name) as f:
            shape, _fortran, dtype = _read_header(f)
    except READ_ERRORS as exc:
        raise _damaged(name[:-4], exc) from None
    return Member(name[:-4], shape, dtype)


def inspect_asset(path: os.PathLike | str) -> dict[str, Member]:
    """The members of the asset at ``path`` from its zip directory and ``.npy`` headers (no
    array data read), with every required key present and of the right kind and shape.
    Raises ``BadAsset``."""
    path = Path(path)
    if not path.is_file():
        raise BadAsset(None, f"{path} is not a file", "Check the path of the asset (.npz).")
    if not zipfile.is_zipfile(path):
        raise BadAsset(None, f"{path.name} is not an .npz file (not a zip archive)")
    try:
        with zipfile.ZipFile(path) as archive:
            members = {}
            for name in archive.namelist():
                if name.endswith(".npy"):
                    members[name[:-4]] = _header(archive, name)
    except BadAsset:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # a damaged archive
        raise BadAsset(None, f"{path.name} cannot be read as an .npz ({exc})") from None
    for key in REQUIRED:
        if key not in members:
            raise BadAsset(key, "missing from the asset")
    _check_members(members)
    return members


def _kind_ok(member: Member, kinds: str) -> bool:
    return member.dtype.kind in kinds and member.dtype.fields is None


def _check_members(m: dict[str, Member]) -> None:
    """Kinds and shapes of the required members (headers only). Raises ``BadAsset``."""
    rules = (("vertices", "f", (3,), "float [V, 3]"), ("faces", "iu", (3,), "integer [F, 3]"),
             ("coords", "iu", (3, 4), "integer [N, 3] (x, y, z) or [N, 4] (batch, x, y, z)"))
    for key, kinds, widths, want in rules:
        member = m[key]
        if not _kind_ok(member, kinds) or len(member.shape) != 2 or member.shape[1] not in widths:
            raise BadAsset(key, f"is {member.dtype} {list(member.shape)}, must be {want}")
    attrs = m["attrs"]
    if not _kind_ok(attrs, "f") or len(attrs.shape) != 2:
        raise BadAsset("attrs", f"is {attrs.dtype} {list(attrs.shape)}, must be float [N, 6]")
    if attrs.shape[1] != CHANNELS:
        raise BadAsset("attrs", f"has {attrs.shape[1]} channels, must have {CHANNELS} (base "
                       "colour RGB, metallic, roughness, alpha)")
    if attrs.shape[0] != m["coords"].shape[0]:
        raise BadAsset("attrs", f"has {attrs.shape[0]:,} rows but coords has "
                       f"{m['coords'].shape[0]:,}: one row of attributes per voxel")
    if m["vertices"].shape[0] < 3 or m["faces"].shape[0] < 1:
        raise BadAsset("faces" if m["vertices"].shape[0] >= 3 else "vertices",
                       f"the mesh is empty ({m['vertices'].shape[0]:,} vertices, "
                       f"{m['faces'].shape[0]:,} faces)",
                       "The decoder produced no surface: generate the asset again.")
    _check_counts(m)
    if not _kind_ok(m["origin"], "f") or m["origin"].shape not in ((3,), (1, 3)):
        raise BadAsset("origin", f"is {m['origin'].dtype} {list(m['origin'].shape)}, must be "
                       "float [3]")
    if not _kind_ok(m["voxel_size"], "f") or m["voxel_size"].shape not in ((), (1,), (3,)):
        raise BadAsset("voxel_size", f"is {m['voxel_size'].dtype} "
                       f"{list(m['voxel_size'].shape)}, must be a float scalar")
    if not _kind_ok(m["resolution"], "iu") or m["resolution"].shape not in ((), (1,)):
        raise BadAsset("resolution", f"is {m['resolution'].dtype} "
                       f"{list(m['resolution'].shape)}, must be an integer scalar")


def _check_counts(m: dict[str, Member]) -> None:
    """Counts no decoder output has (headers only): more vertices than three per face (each
    face uses three, so the rest are used by none: a compressed file of a few MB can hold
    gigabytes of them, read for nothing) and no voxel at all. Raises ``BadAsset``."""
    from meshfacts.units import format_size

    count_v, count_f = m["vertices"].shape[0], m["faces"].shape[0]
    if count_v > 3 * count_f:
        raise BadAsset("vertices", f"holds {count_v:,} vertices, but its {count_f:,} faces use "
                       f"at most {3 * count_f:,}: {count_v - 3 * count_f:,} or more are used by "
                       f"no face ({format_size(m['vertices'].nbytes)} of vertices); it was not "
                       "read", "The port's decoder writes no unused vertices: export the asset "
                       "again, or drop the vertices no face uses before exporting it.")
    if m["coords"].shape[0] == 0:
        raise BadAsset("coords", "holds no voxels: the surface has no colours to take",
                       "The decoder produced no texture voxels: generate the asset again.")


def _read(archive: zipfile.ZipFile, key: str) -> np.ndarray:
    """The whole member ``key``. Raises ``BadAsset`` naming it when it cannot be read (a bad
    CRC, cut short, bad compressed data: ``READ_ERRORS``)."""
    try:
        with archive.open(key + ".npy") as f:
            return np.lib.format.read_array(f, allow_pickle=False)
    except READ_ERRORS as exc:
        raise _damaged(key, exc) from None


def read_members(path: os.PathLike | str, *keys: str) -> list[np.ndarray]:
    """The whole members ``keys`` (e.g. ``"vertices"``, ``"faces"``) of the asset at ``path``,
    in that order, without the value checks: for an asset :func:`load_asset` has validated
    (a step's child process reads it again). Raises ``BadAsset`` naming a member that cannot
    be read."""
    with zipfile.ZipFile(path) as archive:
        return [_read(archive, key) for key in keys]


def _scalars(archive: zipfile.ZipFile) -> tuple[np.ndarray, float, int]:
    origin = _read(archive, "origin").astype(np.float64).reshape(3)
    if not np.all(np.isfinite(origin)):
        raise BadAsset("origin", f"is not finite ({origin.tolist()})")
    size = _read(archive, "voxel_size").astype(np.float64).reshape(-1)
    if not np.all(np.isfinite(size)) or size.min() <= 0 or np.ptp(size) > 1e-6 * size.max():
        raise BadAsset("voxel_size", f"must be one positive, finite size, not {size.tolist()}")
    res = int(_read(archive, "resolution").reshape(-1)[0])
    if not 1 <= res <= MAX_RESOLUTION:
        raise BadAsset("resolution", f"is {res}, must be from 1 to {MAX_RESOLUTION}")
    return origin, float(size[0]), res


def _check_slices(key: str, array: np.ndarray, test, problem: str, tick=None) -> None:
    """Apply ``test(slice) -> bad row mask`` over bounded slices; raise on the first bad row.
    ``tick``: called before each slice (the caller's cancel check)."""
    for start in range(0, len(array), CHECK_SLICE):
        if tick is not None:
            tick()
        bad = test(array[start:start + CHECK_SLICE])
        if bad.any():
            row = start + int(np.argmax(bad))
            raise BadAsset(key, f"{problem} (row {row:,}: {array[row].tolist()})")


def _mesh(archive: zipfile.ZipFile) -> tuple[np.ndarray, np.ndarray]:
    vertices = _read(archive, "vertices")
    _check_slices("vertices", vertices, lambda s: ~np.isfinite(s).all(axis=1),
                  "holds NaN or infinite coordinates")
    vertices = vertices.astype(np.float32, copy=False)
    faces = _read(archive, "faces")
    count = len(vertices)
    _check_slices("faces", faces, lambda s: ((s < 0) | (s >= count)).any(axis=1),
                  f"indexes past the {count:,} vertices")
    faces = faces.astype(np.int32, copy=False)
    if not _any_area(vertices, faces):
        raise BadAsset("faces", f"none of the {len(faces):,} faces has an area (each repeats a "
                       "corner or has its corners on one line): there is no surface to export",
                       "The decoder produced no surface: generate the asset again.")
    return vertices, faces


def _any_area(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Whether some face has three distinct corners and an area > 0 (float64 from the
    float32 vertices, as ``cleanup`` computes it, so cleanup keeps at least that face),
    looked at in bounded slices, stopping at the first."""
    for start in range(0, len(faces), CHECK_SLICE):
        part = faces[start:start + CHECK_SLICE]
        tri = vertices[part].astype(np.float64)
        cross = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        distinct = (part[:, 0] != part[:, 1]) & (part[:, 1] != part[:, 2]) \
            & (part[:, 0] != part[:, 2])
        if (distinct & (np.einsum("ij,ij->i", cross, cross) > 0)).any():
            return True
    return False


def _voxels(archive: zipfile.ZipFile, res: int, tick=None) -> tuple[np.ndarray, np.ndarray]:
    coords = _read(archive, "coords")
    coords = coords[:, -3:]  # x, y, z (a leading batch column is dropped)
    _check_slices("coords", coords, lambda s: ((s < 0) | (s >= res)).any(axis=1),
                  f"lie outside the {res}³ grid", tick)
    xyz = np.ascontiguousarray(coords, dtype=np.int32)
    del coords
    attrs = _read(archive, "attrs")
    low, high = -ATTR_TOLERANCE, 1 + ATTR_TOLERANCE
    _check_slices("attrs", attrs, lambda s: ~((s >= low) & (s <= high)).all(axis=1),
                  "hold values outside 0..1 (or NaN)", tick)
    return xyz, attrs.astype(np.float32, copy=False)


def _stream_check(archive: zipfile.ZipFile, key: str, test, problem: str, tick=None,
                  first_column: int = 0, observe=None) -> None:
    """Check the 2-D member ``key`` without holding it: its ``.npy`` data is read from the zip
    stream ``STREAM_ROWS`` rows at a time (a C-order member; a Fortran-order one a column at a
    time), columns before ``first_column`` ignored, and ``test(block) -> bad row mask`` applied
    to each block; the member is read to its end, so the zip's CRC is checked too. Temporaries
    are one block (``STREAM_ROWS`` × width values), whatever the member's size. ``tick``:
    called before each block (the caller's cancel check); ``observe(block, column)``: called
    with each good block (``column`` None, or the column a Fortran-order block holds). Raises
    ``BadAsset`` naming ``key`` (the first bad row, or a member that cannot be read)."""
    try:
        with archive.open(key + ".npy") as f:
            shape, fortran, dtype = _read_header(f)
            rows, width = shape
            # (column range, rows) of each pass over the data, in file order
            passes = [(range(c, c + 1), c) for c in range(width)] if fortran \
                else [(range(width), None)]
            for cols, column in passes:
                for start in range(0, rows, STREAM_ROWS):
                    if tick is not None:
                        tick()
                    count = min(STREAM_ROWS, rows - start)
                    want = count * len(cols) * dtype.itemsize
                    data = f.read(want)
                    if len(data) != want:
                        raise EOFError(f"{key}.npy ends before its {rows:,} rows")
                    if column is not None and column < first_column:
                        continue
                    block = np.frombuffer(data, dtype).reshape(count, len(cols))
                    block = block[:, first_column:] if column is None else block
                    bad = test(block)
                    if bad.any():
                        row = int(np.argmax(bad))
                        where = "" if column is None else f", column {column}"
                        raise BadAsset(key, f"{problem} (row {start + row:,}{where}: "
                                            f"{block[row].tolist()})")
                    if observe is not None:
                        observe(block, None if column is None else column - first_column)
            if f.read(1):
                raise ValueError(f"{key}.npy holds more data than its header's {list(shape)}")
    except BadAsset:
        raise
    except READ_ERRORS as exc:
        raise _damaged(key, exc) from None


def check_voxels(archive: zipfile.ZipFile, res: int, tick=None) -> np.ndarray:
    """Validate ``coords`` (on the ``res``³ grid) and ``attrs`` (0..1, finite) streamed from
    ``archive`` (``_stream_check``: bounded memory, no array of the voxels' size), so a bad
    voxel is refused in the ``load`` step, not after the mesh steps. Returns the voxels' box:
    int64 [2, 3], the lowest and the highest x, y, z. Raises ``BadAsset``."""
    width = _header(archive, "coords.npy").shape[1]
    box = np.array([[res] * 3, [-1] * 3], dtype=np.int64)

    def observe(block, column):
        axes = slice(None) if column is None else slice(column, column + 1)
        box[0, axes] = np.minimum(box[0, axes], block.min(axis=0))
        box[1, axes] = np.maximum(box[1, axes], block.max(axis=0))

    _stream_check(archive, "coords", lambda s: ((s < 0) | (s >= res)).any(axis=1),
                  f"lie outside the {res}³ grid", tick, first_column=width - 3, observe=observe)
    low, high = -ATTR_TOLERANCE, 1 + ATTR_TOLERANCE
    _stream_check(archive, "attrs", lambda s: ~((s >= low) & (s <= high)).all(axis=1),
                  "hold values outside 0..1 (or NaN)", tick)
    return box


def load_asset(path: os.PathLike | str, *, voxels: bool = True, tick=None) -> Asset:
    """Read and validate the asset at ``path`` (``inspect_asset`` first). ``voxels=False``
    leaves ``coords``/``attrs`` None (read them later with ``load_voxels``: the mesh steps do
    not need them in memory) but still checks their values, streamed (``check_voxels``).
    ``tick``: called between slices (the caller's cancel check). The asset's ``boxes``
    (``coverage.Boxes``: the mesh's and the voxels' box) are checked to meet
    (``coverage.check_boxes``). Raises ``BadAsset``."""
    from bounded_export.coverage import Boxes, check_boxes, mesh_box

    path = Path(path)
    inspect_asset(path)
    with zipfile.ZipFile(path) as archive:
        origin, size, res = _scalars(archive)
        vertices, faces = _mesh(archive)
        coords = attrs = None
        if voxels:
            coords, attrs = _voxels(archive, res, tick)
            box = np.stack([coords.min(axis=0), coords.max(axis=0)]).astype(np.int64)
        else:
            box = check_voxels(archive, res, tick)
    boxes = Boxes(mesh_box(vertices, faces), box, origin, size, res)
    check_boxes(boxes)
    return Asset(vertices, faces, coords, attrs, origin, size, res, path, boxes)


def load_voxels(asset: Asset, tick=None) -> Asset:
    """``asset`` with its ``coords`` and ``attrs`` read from its file and validated
    (``tick`` called between slices)."""
    with zipfile.ZipFile(asset.path) as archive:
        asset.coords, asset.attrs = _voxels(archive, asset.resolution, tick)
    return asset
