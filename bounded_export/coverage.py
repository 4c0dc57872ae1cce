"""Do the asset's voxels line up with its mesh? The bake colours a texel from the voxels around
its surface point; a texel with none there (an *orphan*) gets its colour from the seam fill —
the nearest baked texel in the texture, which may belong to another part of the surface. So an
asset whose voxels miss its mesh (a shifted or far ``origin``, a wrong ``voxel_size``, coords
on another grid than ``resolution`` says, vertices in other units) would come out as a GLB of
fill colour — all black when nothing was baked — and be reported as a success.

Two checks, both against the port's convention (voxel ``i`` spans ``origin + [i, i + 1) ·
voxel_size``, ``voxels.py``):

- before the bake, from the arrays the ``load`` step reads anyway (``Boxes``): the box of the
  vertices the faces use against the box of the voxels, in world units. Where the voxels'
  box (grown by ``REACH`` voxels) spans less than ``BAD_BELOW`` of the mesh's extent along an
  axis — boxes apart, or a mesh in other units than its voxels — most texels could find no
  voxel: ``BadAsset`` then, naming both boxes, ``origin``, ``voxel_size`` and ``resolution``,
  before any texture work;
- after the bake (``judge``): the share of the used texels (covered by a face) that found a
  voxel. Below ``BAD_BELOW`` the texture would be mostly fill: ``BadAsset`` with the same facts
  and the share; below ``WARN_BELOW`` a ``warning`` event naming the share (the GLB is written:
  most of it is the voxels' colour). The export's result carries the share
  (``voxel_coverage``).

Thresholds: ``WARN_BELOW`` 0.99 — the decoder's voxels are a shell around its own surface, and
the exports measured on real-size assets left 0 or 1 texel of millions without a voxel
(bench/results); ``BAD_BELOW`` 0.5 — below half, most of the surface shows colours that came
from elsewhere in the texture.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bounded_export.errors import BadAsset

WARN_BELOW = 0.99
BAD_BELOW = 0.5
REACH = 1.0  # voxels: a point further than this outside every voxel finds none (``voxels.py``)
SOURCE = "the bounded export's bake (bounded_export/coverage.py)"
HINT = ("The voxels and the mesh of this asset do not describe the same place: export the asset "
        "again from the model (a Pixal3D run with --keep-asset, or the port's --save-mesh); a "
        "hand-edited asset must keep the decoder's origin, voxel_size and resolution.")


@dataclass
class Boxes:
    """``mesh`` float64 [2, 3]: the lowest and highest corner of the vertices the faces use;
    ``voxels`` int64 [2, 3]: the lowest and highest voxel index; ``origin`` [3],
    ``voxel_size``, ``resolution``: the asset's grid. All from the ``load`` step."""

    mesh: np.ndarray
    voxels: np.ndarray
    origin: np.ndarray
    voxel_size: float
    resolution: int

    def voxel_world(self) -> np.ndarray:
        """The voxels' box in world units (float64 [2, 3]): from the lowest voxel's low corner
        to the highest voxel's high corner."""
        return np.stack([self.origin + self.voxels[0] * self.voxel_size,
                         self.origin + (self.voxels[1] + 1) * self.voxel_size])

    def describe(self) -> str:
        """The facts for a person: both boxes in world units and the grid."""
        def box(b):
            return (f"({', '.join(f'{v:.4g}' for v in b[0])}) to "
                    f"({', '.join(f'{v:.4g}' for v in b[1])})")

        return (f"the mesh spans {box(self.mesh)}, the voxels span {box(self.voxel_world())} "
                f"(origin ({', '.join(f'{v:.4g}' for v in self.origin)}), voxel_size "
                f"{self.voxel_size:.6g}, resolution {self.resolution}: voxels "
                f"{tuple(int(v) for v in self.voxels[0])} to "
                f"{tuple(int(v) for v in self.voxels[1])})")


def check_boxes(boxes: Boxes) -> None:
    """Raise ``BadAsset`` when, along some axis, the voxels' box (grown by ``REACH`` voxels)
    spans less than ``BAD_BELOW`` of the mesh's extent — boxes that do not meet, or a mesh
    far larger than its voxels (vertices in other units): most of the surface could then find
    no voxel, which the bake would only confirm. (The voxels are a shell around the surface,
    so the mesh's box lies within theirs; a partly covered asset passes here and is judged
    by the bake.)"""
    world = boxes.voxel_world()
    grow = REACH * boxes.voxel_size
    low = np.maximum(boxes.mesh[0], world[0] - grow)
    high = np.minimum(boxes.mesh[1], world[1] + grow)
    extent = boxes.mesh[1] - boxes.mesh[0]
    short = (high < low) | (high - low < BAD_BELOW * extent)
    if short.any():
        axes = ", ".join("xyz"[i] for i in np.flatnonzero(short))
        raise BadAsset(None, f"its voxels do not line up with its mesh: along {axes} the "
                       f"voxels cover less than {BAD_BELOW:.0%} of the mesh's extent, so most "
                       f"texels could take no voxel's colour; {boxes.describe()}", HINT)


def mesh_box(vertices: np.ndarray, faces: np.ndarray, rows: int = 1 << 20) -> np.ndarray:
    """The box (float64 [2, 3]) of the vertices ``faces`` use, in slices of ``rows`` faces
    (unused vertices do not count: they are no part of the surface)."""
    low = np.full(3, np.inf)
    high = np.full(3, -np.inf)
    for start in range(0, len(faces), rows):
        used = vertices[faces[start:start + rows].reshape(-1)]
        low = np.minimum(low, used.min(axis=0))
        high = np.maximum(high, used.max(axis=0))
    return np.stack([low, high]).astype(np.float64)


def share(used: int, found: int) -> float | None:
    """The share (0..1) of ``used`` texels that found a voxel; None when no texel is used."""
    return found / used if used else None


def judge(used: int, found: int, boxes: Boxes | None, emit=None) -> float | None:
    """The bake's coverage: ``found`` of the ``used`` texels took a voxel's colour. Below
    ``BAD_BELOW`` (or no texel found one) raises ``BadAsset`` naming the share and the boxes;
    below ``WARN_BELOW`` sends ``emit`` a ``warning`` event (``message``, ``source``,
    ``differs``, ``coverage``). Returns the share (None when the texture has no used texel,
    which ``unwrap`` never leaves)."""
    from meshfacts.events import make

    part = share(used, found)
    if part is None:
        return None
    facts = f"; {boxes.describe()}" if boxes is not None else ""
    said = (f"{found:,} of the {used:,} texels the surface uses ({part:.2%}) found a voxel "
            f"around their point")
    if found == 0 or part < BAD_BELOW:
        raise BadAsset(None, f"its voxels do not line up with its mesh: only {said}{facts}",
                       HINT)
    if part < WARN_BELOW and emit is not None:
        emit(make("warning", message=f"The export's texture is {part:.2%} the asset's "
                        f"voxels: {said}; the other texels took the nearest baked texel's "
                        "colour (seam fill).", source=SOURCE,
                        differs=f"{1 - part:.2%} of the used texels are fill colour, not the "
                        "voxels'", coverage=round(part, 6)))
    return part
