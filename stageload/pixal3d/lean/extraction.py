"""The shape decoder's mesh extraction by voxel ranges (``--working-memory lean``).

What it replaces: the module-level ``flexible_dual_grid_to_mesh(coords, dual_vertices,
intersected_flag, split_weight, aabb, voxel_size=None, grid_size=None, train=False)`` that the
port's shape decoder (``pixal3d.models.sc_vaes.fdg_vae``, Pixal3D-mac 0be9e69a) calls once per
mesh; off CUDA it runs the port's pure-PyTorch ``pixal3d/utils/mesh_extract.py`` (read at
12b42371), which follows o_voxel's (TRELLIS.2 ``o-voxel/o_voxel/convert/flexible_dual_grid.py``)
at inference: one vertex per voxel, ``(coords + dual_vertices) · voxel_size + aabb[0]``; for
every voxel and axis whose ``intersected`` flag is set, the four voxels around the grid edge at
the voxel's far corner (:data:`EDGE_OFFSETS`), looked up among all voxels; a quad where all four
exist, split into two triangles by the split weights (``w0·w2 > w1·w3``: 0-1-2, 0-2-3; else
0-1-3, 3-1-2) or, without them, along the diagonal whose triangles' normals agree more; with
``PIXAL3D_FDG_CAP_PARTIAL_QUADS`` set, one triangle for each edge with exactly three voxels.

Where its peak is (its tensors, N voxels, M intersected edges): the corner coordinates of every
voxel's three edges ``[N, 3, 4, 3]`` (144 bytes a voxel in int32, 288 in int64), the selected
``[M, 4, 3]`` and their int64 copy for the look-up, the query keys, search positions, matches
and rows ``[M, 4]`` in int64, then the quads' two candidate splits ``[L, 6]`` — all at once over
the whole mesh: about 1.1 KB a fine voxel measured on the stand-in (``bench.pixal3d.
decode_memory --extraction``), ~6 GB at a character's 5.5 M fine voxels.

Lean (:func:`extract`) holds whole only what every range reads or what is the output: the
voxels' sorted keys and their rows (16 bytes a voxel, from one ``torch.sort`` of the port's
keys), the vertices (computed by ranges into one tensor: elementwise, so the same bits) and the
faces; the edges' corners, look-ups and splits run over ranges of voxels
(:func:`range_voxels`, from the working-memory budget). Triangles come out in the port's order:
the full quads' pairs edge by edge (voxel, then axis x, y, z), then the partial triangles in the
same edge order. The same vertices and faces, bit for bit and in the same order
(``tests/pixal3d/test_lean_extraction.py``). A voxel coordinate that appears twice would make
the look-up's choice depend on the sort: lean declines such an input (the decoder's voxels are
unique).

:func:`install` puts it on the decoder's module for one decode; every call that lean does not
compute goes to the port's function with a ``warning`` (``fallback: port_extraction``):
arguments outside the known signature, ``train=True``, CUDA tensors (native o_voxel's hash map
there), repeated voxels, or a probe — the port's function and lean's on the voxels around the
first one, in ranges of a few voxels — that differs in any bit. Not run on MPS (no Mac here):
the look-up, sort and elementwise arithmetic are exact integer or single-rounding operations,
so the device should not change them (the look-up runs on the CPU, as the port's does; the
vertices and splits on the tensors' device, as the port's); the probe checks it on the user's
own device, and an operation the device lacks (``NotImplementedError``) leaves the call to the
port's with a ``warning``.
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Callable, Optional

import numpy as np
import torch

from stageload.events import EventSink, emit
from stageload.hooks import CallHook, around_call
from stageload.pixal3d.lean.decoders import DECODER_BUDGET

EDGE_OFFSETS = (((0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0)),
                ((0, 0, 0), (1, 0, 0), (1, 0, 1), (0, 0, 1)),
                ((0, 0, 0), (0, 1, 0), (1, 1, 0), (1, 0, 0)))
"""Per axis (x, y, z), the four voxels around the edge at a voxel's far corner (o_voxel's)."""
SPLIT_1, SPLIT_2 = (0, 1, 2, 0, 2, 3), (0, 1, 3, 3, 1, 2)
WITHOUT = ((3, 1, 2), (0, 2, 3), (0, 1, 3), (0, 1, 2))
"""The triangle of a partial quad, by its missing corner (the port's)."""
BYTES_PER_VOXEL = 1536
"""A range's temporaries per voxel, all three edges intersected: per edge the corners (96
bytes in int64), bounds masks (36), keys and their intermediates (~130), search positions,
matches and rows (~100), the split candidates (~100 a quad), and the edge list (16)."""
PARAMETERS = ("coords", "dual_vertices", "intersected_flag", "split_weight", "aabb",
              "voxel_size", "grid_size", "train")
SIGNATURE = inspect.Signature(
    [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in PARAMETERS[:5]]
    + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
       for n, d in (("voxel_size", None), ("grid_size", None), ("train", False))])
"""The port's (and o_voxel's) signature, the one lean computes."""
SOURCE = "stageload.pixal3d.lean.extraction (--working-memory lean)"
PROBE_REACH, PROBE_RANGE = 3, 5
"""The probe: voxels within 3 of the first voxel (≤ 343), in ranges of 5."""


class Declined(Exception):
    """An input lean does not compute; the message is the ``cause``."""


def range_voxels(budget_bytes: int) -> int:
    """Voxels per range so a range's temporaries (:data:`BYTES_PER_VOXEL` each) fit
    ``budget_bytes`` (capped at the decoders' 64 MiB, ``DECODER_BUDGET``): a multiple of 64, at
    least 64 (43,648 at the cap)."""
    voxels = min(int(budget_bytes), DECODER_BUDGET) // BYTES_PER_VOXEL
    return max(64, voxels // 64 * 64)


def flag(name: str) -> bool:
    """An environment switch as the port reads it (unset, '', 0, false, no, off: off)."""
    value = os.environ.get(name)
    return value is not None and value.strip().lower() not in {"0", "false", "no", "off", ""}


def grid_of(aabb, voxel_size, grid_size, device) -> tuple:
    """(aabb float32 [2, 3], voxel_size [3], grid_size int64 [3]) from the forms the port takes
    (lists, tuples, arrays or tensors; one of voxel_size / grid_size), computed as the port's
    (the voxel size from the grid, or the grid from ``round`` of the box over the size). Raises
    :class:`Declined` for other forms."""
    if not torch.is_tensor(aabb):
        aabb = torch.tensor(np.asarray(aabb), dtype=torch.float32, device=device)
    if tuple(aabb.shape) != (2, 3):
        raise Declined(f"aabb of shape {tuple(aabb.shape)}, not [2, 3]")
    if voxel_size is not None:
        if not torch.is_tensor(voxel_size):
            values = np.broadcast_to(np.asarray(voxel_size, dtype=np.float32), (3,))
            voxel_size = torch.tensor(values.copy(), device=device)
        return aabb, voxel_size, ((aabb[1] - aabb[0]) / voxel_size).round().long()
    if grid_size is None:
        raise Declined("neither voxel_size nor grid_size")
    if not torch.is_tensor(grid_size):
        grid_size = torch.tensor(np.broadcast_to(np.asarray(grid_size), (3,)).copy(),
                                 dtype=torch.int32, device=device)
    return aabb, (aabb[1] - aabb[0]) / grid_size.float(), grid_size.long()


class VoxelIndex:
    """Every voxel's row by its coordinates: the port's linear keys ``(x·gy + y)·gz + z`` sorted
    once (``sorted`` and ``rows``, int64 [N] each), on the CPU as the port's look-up runs (it
    moves coordinates and queries there; :meth:`find` answers on the queries' device). Raises
    :class:`Declined` when a coordinate repeats."""

    def __init__(self, coords: torch.Tensor, grid: torch.Tensor):
        self.grid = [int(g) for g in grid.tolist()]
        keys = self.keys(coords.cpu())
        self.sorted, self.rows = torch.sort(keys)
        del keys
        if len(self.sorted) > 1 and bool((self.sorted[1:] == self.sorted[:-1]).any()):
            raise Declined("a voxel coordinate appears twice")

    def keys(self, xyz: torch.Tensor) -> torch.Tensor:
        _, gy, gz = self.grid
        return (xyz[..., 0].long() * gy + xyz[..., 1].long()) * gz + xyz[..., 2].long()

    def find(self, xyz: torch.Tensor) -> torch.Tensor:
        """Rows of the voxels at ``xyz`` (int64 [..., 3]), −1 where none or off the grid, on
        ``xyz``'s device."""
        device, xyz = xyz.device, xyz.cpu()
        grid = torch.tensor(self.grid, dtype=torch.long)
        inside = ((xyz >= 0) & (xyz < grid)).all(dim=-1)
        want = self.keys(xyz)
        if len(self.sorted) == 0:
            return torch.full_like(want, -1).to(device)
        at = torch.searchsorted(self.sorted, want).clamp_(max=len(self.sorted) - 1)
        inside &= self.sorted[at] == want
        return torch.where(inside, self.rows[at], torch.full_like(want, -1)).to(device)


def extract(coords: torch.Tensor, dual_vertices: torch.Tensor, intersected: torch.Tensor,
            split_weight: Optional[torch.Tensor], aabb, voxel_size=None, grid_size=None, *,
            voxels: int, cap_partial: bool) -> tuple:
    """The port's extraction (module docstring) over ranges of ``voxels`` voxels.

    coords int [N, 3]; dual_vertices float [N, 3] (voxel units); intersected bool [N, 3];
    split_weight float [N, 1] or None; aabb [[min], [max]]; voxel_size or grid_size.
    Returns (vertices [N, 3] in the arithmetic's dtype, float32 for the decoder's inputs —
    [0, 3] when no face is made, as the port's —, faces int64 [F, 3], counts: a dict of
    ``intersections``, ``full_quads``, ``partial_tris``). Raises :class:`Declined`."""
    if voxels < 1:
        raise ValueError(f"voxels per range must be at least 1, got {voxels}")
    aabb, size, grid = grid_of(aabb, voxel_size, grid_size, coords.device)
    index = VoxelIndex(coords, grid)
    vertices = _vertices(coords, dual_vertices, size, aabb, voxels)
    offsets = torch.tensor(EDGE_OFFSETS, dtype=torch.long, device=coords.device)
    full, partial = [], []
    counts = {"intersections": 0, "full_quads": 0, "partial_tris": 0}
    for a in range(0, len(coords), voxels):
        edges = intersected[a:a + voxels].nonzero()  # [m, 2]: (voxel in range, axis), in order
        corners = coords[a:a + voxels][edges[:, 0]].long()[:, None, :] + offsets[edges[:, 1]]
        del edges
        found = index.find(corners)  # [m, 4]
        del corners
        present = found >= 0
        whole = present.all(dim=1)
        counts["intersections"] += len(found)
        quads = found[whole]
        counts["full_quads"] += len(quads)
        if len(quads):
            full.append(_split(quads, vertices, split_weight))
        del quads, whole
        if cap_partial:
            three = present.sum(dim=1) == 3
            if bool(three.any()):
                missing = (~present[three]).long().argmax(dim=1)
                keep = torch.tensor(WITHOUT, dtype=torch.long, device=found.device)[missing]
                partial.append(found[three].gather(1, keep))
                counts["partial_tris"] += len(keep)
        del found, present
    del index
    pieces = full + partial
    if not pieces:
        return vertices[:0], torch.zeros(0, 3, dtype=torch.long, device=coords.device), counts
    faces = torch.cat(pieces)
    return vertices, faces, counts


def _vertices(coords, dual_vertices, size, aabb, voxels: int) -> torch.Tensor:
    """``(coords + dual_vertices) · size + aabb[0]`` by ranges into one tensor."""
    def part(a: int, b: int) -> torch.Tensor:
        return (coords[a:b].float() + dual_vertices[a:b]) * size + aabb[0].reshape(1, 3)

    first = part(0, 1)
    out = torch.empty((len(coords), 3), dtype=first.dtype, device=first.device)
    for a in range(0, len(coords), voxels):
        out[a:a + voxels] = part(a, a + voxels)
    return out


def _split(quads: torch.Tensor, vertices: torch.Tensor, split_weight) -> torch.Tensor:
    """Two triangles a quad ([L, 4] rows → [2L, 3]), by the split weights or the normals."""
    one = quads[:, list(SPLIT_1)]
    two = quads[:, list(SPLIT_2)]
    if split_weight is None:
        first = _agreement(vertices, one) > _agreement(vertices, two)
    else:
        w = split_weight.reshape(-1)[quads]
        first = w[:, 0] * w[:, 2] > w[:, 1] * w[:, 3]
    return torch.where(first[:, None], one, two).reshape(-1, 3)


def _agreement(vertices: torch.Tensor, split: torch.Tensor) -> torch.Tensor:
    """|n0 · n1|: the normals of a split's two triangles (0-1-2 and 1-2-3 of its corners)."""
    p = [vertices[split[:, i]] for i in range(4)]
    n0 = torch.cross(p[1] - p[0], p[2] - p[0], dim=1)
    n1 = torch.cross(p[2] - p[1], p[3] - p[1], dim=1)
    return (n0 * n1).sum(dim=1).abs()


class LeanExtraction:
    """What :func:`install` returns: ``remove()`` gives the module its function back (safe
    twice). ``event``: the ``working_memory`` event sent at the first lean extraction."""

    def __init__(self, module: Any, name: str, budget: int, sink: Optional[EventSink],
                 stage: Optional[Callable[[], Optional[str]]]):
        self.voxels = range_voxels(budget)
        self.sink, self.stage, self.event = sink, stage, None
        self.said: set = set()
        self.hook: CallHook = around_call(module, name, self.around)

    def remove(self) -> None:
        self.hook.remove()

    def around(self, call: Callable, *args, **kwargs):
        try:
            bound = SIGNATURE.bind(*args, **kwargs)
        except TypeError as exc:
            return self._port(call, args, kwargs, f"arguments lean does not know ({exc})")
        bound.apply_defaults()
        a = bound.arguments
        cause = _declined(a)
        if cause is None:
            try:
                _probe(call, a, PROBE_RANGE)
                vertices, faces, counts = extract(
                    a["coords"], a["dual_vertices"], a["intersected_flag"], a["split_weight"],
                    a["aabb"], a["voxel_size"], a["grid_size"], voxels=self.voxels,
                    cap_partial=flag("PIXAL3D_FDG_CAP_PARTIAL_QUADS"))
            except Declined as exc:
                cause = str(exc)
            except NotImplementedError as exc:  # an operation this device lacks (MPS)
                cause = f"{type(exc).__name__} on {a['coords'].device}: {exc}"
        if cause is not None:
            return self._port(call, args, kwargs, cause)
        self._report(a, counts, len(faces))
        return vertices, faces

    def _port(self, call: Callable, args, kwargs, cause: str):
        if cause not in self.said:
            self.said.add(cause)
            self.warn(self.sink, cause)
        return call(*args, **kwargs)

    @staticmethod
    def warn(sink: Optional[EventSink], cause: str) -> None:
        """The ``warning`` (``fallback: port_extraction``) of an extraction left to the port."""
        emit(sink, "warning", source=SOURCE, fallback="port_extraction", cause=cause,
             message=f"--working-memory lean: the mesh extraction runs the port's way, over "
                     f"all voxels at once, with its working memory ({cause})",
             differs="nothing in the output: the port's own extraction runs")

    def _report(self, a: dict, counts: dict, faces: int) -> None:
        n = len(a["coords"])
        if flag("PIXAL3D_FDG_VERBOSE"):  # the port's line, so its log reads the same
            dropped = counts["intersections"] - counts["full_quads"]
            print(f"[FDG] Extracted mesh: voxels={n:,}, intersections="
                  f"{counts['intersections']:,}, full_quads={counts['full_quads']:,}, "
                  f"dropped={dropped:,}, partial_tris={counts['partial_tris']:,}, "
                  f"faces={faces:,}")
        if self.event is None:
            # what the port holds whole that lean never does: every voxel's edge corners and
            # the intersected ones' int64 copy, keys and rows (a lower bound on the saving)
            corners = n * 36 * max(a["coords"].element_size(), 4)
            saved = corners + counts["intersections"] * 4 * (24 + 8 + 8)
            self.event = emit(self.sink, "working_memory",
                              stage=self.stage() if callable(self.stage) else None,
                              target="shape_slat_decoder.flexible_dual_grid_to_mesh",
                              tool="extraction_ranges", chunk=self.voxels,
                              bytes_saved=int(saved), note=None) or {}


def _declined(a: dict) -> Optional[str]:
    """Why lean leaves this call to the port, or None."""
    if a["train"]:
        return "train=True (training mode: not the inference path lean computes)"
    tensors = [a[k] for k in ("coords", "dual_vertices", "intersected_flag")]
    if not all(torch.is_tensor(t) and t.dim() == 2 and t.shape[1] == 3 for t in tensors):
        return "coords, dual_vertices and intersected_flag are not [N, 3] tensors"
    if a["coords"].is_floating_point() or tensors[2].dtype != torch.bool:
        return "coords are not integers or intersected_flag is not bool"
    if a["coords"].device.type == "cuda":
        return "CUDA tensors: the port runs native o_voxel there"
    if len(a["coords"]) == 0:
        return "no voxels: nothing to save"
    return None


def _probe(call: Callable, a: dict, voxels: int) -> None:
    """Raise :class:`Declined` unless lean's extraction in ranges of ``voxels`` gives the
    port's vertices and faces bit for bit (dtype and order too) on the voxels within
    :data:`PROBE_REACH` of the first."""
    coords = a["coords"]
    near = (coords - coords[:1]).abs().amax(dim=1) <= PROBE_REACH
    pick = {k: (a[k][near] if torch.is_tensor(a[k]) else a[k])
            for k in ("coords", "dual_vertices", "intersected_flag", "split_weight")}
    kw = {k: a[k] for k in ("aabb", "voxel_size", "grid_size")}
    port = call(*pick.values(), train=False, **kw)
    mine = extract(*pick.values(), **kw, voxels=voxels,
                   cap_partial=flag("PIXAL3D_FDG_CAP_PARTIAL_QUADS"))
    if not all(p.dtype == m.dtype and p.shape == m.shape and torch.equal(p, m)
               for p, m in zip(port, mine[:2], strict=True)):
        raise Declined("a probe by ranges differs from the port's extraction")


def install(module: Any, name: str, budget_bytes: int, *, sink: Optional[EventSink] = None,
            stage: Optional[Callable[[], Optional[str]]] = None) -> list:
    """Compute ``module.name`` (the decoder module's ``flexible_dual_grid_to_mesh``) by voxel
    ranges until the returned handles are removed (one :class:`LeanExtraction`, or none when
    the function's signature is not the port's — then a ``warning`` says so and the port's
    runs). ``budget_bytes``: bytes a range's temporaries may hold (capped at 64 MiB). Raises
    ``stageload.errors.HookError`` when ``module.name`` is not callable."""
    cause = _unknown_signature(getattr(module, name, None))
    if cause is not None:
        LeanExtraction.warn(sink, cause)
        return []
    return [LeanExtraction(module, name, int(budget_bytes), sink, stage)]


def _unknown_signature(function) -> Optional[str]:
    """None for the port's form: a dispatcher ``(*args, **kwargs)`` (each call's arguments are
    checked) or :data:`PARAMETERS` in order; else the cause."""
    if not callable(function):
        return None  # around_call raises the HookError
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return "flexible_dual_grid_to_mesh has no signature lean can read"
    kinds = [p.kind for p in params]
    if kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return None
    if tuple(p.name for p in params) == PARAMETERS:
        return None
    return (f"flexible_dual_grid_to_mesh{inspect.signature(function)} is not the signature "
            f"lean computes {SIGNATURE}")
