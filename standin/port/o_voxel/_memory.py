"""How much memory the stand-in's export holds, step by step, modelled on the real drivers.

The stand-in's mesh is small (about 10,000 faces where the real decoder gives about 8.6 million),
so its own arrays weigh almost nothing. To make the export allocate *like* the real one, every
step also holds a block of real, touched memory (``Block``) whose size follows the real
driver's: ``bytes per element × elements in real units × scale``.

- ``GEOMETRY_FACTOR``: real faces per stand-in face. The goblin example decodes to 10,028
  stand-in faces at the 1024 grid, the real decoder to ≈8.6M faces for a typical character
  (from the port's own notes) → 860.
- ``BYTES``: bytes per real element, chosen so that the defaults (1024 grid, remesh on,
  decimation target 1,000,000, texture 2048) reproduce SPEC §1's export peak of 69.6–70.2 GB
  (≈67 GB above the 2.9 GB runtime): a full-mesh BVH (128 B/face, kept until the bake ends),
  the dual-contouring remesh (1,000 B per output face; ≈17M faces at 1024, 4× fewer at 512),
  each cleanup/simplify operation on the remeshed mesh (3,800 B/face: hash tables, sorts and the
  QEM simplifier's buffers), xatlas-style charts (1,200 B/face of the decimated mesh) and the
  bake (150 B per texel). Mesh arrays count 18 B/face (float32 vertices at ~F/2, int32
  faces). These are a model, not measurements of the Metal kernels: only the total is measured.
- ``scale()``: ``$PIXAL3D_STANDIN_EXPORT_SCALE`` (default 0.001, i.e. ~67 MB at the defaults),
  the same kind of fraction as the stand-in's weights (``make_weights.py``).
- ``$PIXAL3D_STANDIN_EXPORT_REPORT``: a file that gets, at each new high, ``{"peak_bytes",
  "scale"}`` — the most block bytes held at once (the modelled working memory the benchmark
  compares the measured export peak with).
"""
from __future__ import annotations

import os

import numpy as np

SCALE_ENV = "PIXAL3D_STANDIN_EXPORT_SCALE"
REPORT_ENV = "PIXAL3D_STANDIN_EXPORT_REPORT"
_live = {"bytes": 0, "peak": 0}
DEFAULT_SCALE = 1e-3
GEOMETRY_FACTOR = 860
BYTES = {"mesh": 18, "fill_holes": 240, "bvh": 128, "remesh": 1000, "cleanup": 3800,
         "uv": 1200, "texel": 150}


def scale() -> float:
    """The fraction of the real sizes allocated (``$PIXAL3D_STANDIN_EXPORT_SCALE``, >= 0)."""
    raw = os.environ.get(SCALE_ENV, "").strip()
    if not raw:
        return DEFAULT_SCALE
    value = float(raw)
    if not value >= 0:
        raise ValueError(f"{SCALE_ENV}={raw!r} must be a number >= 0")
    return value


def _report() -> None:
    path = os.environ.get(REPORT_ENV, "").strip()
    if path:
        import json
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"peak_bytes": _live["peak"], "scale": scale()}, f)


def real_faces(standin_faces: int) -> int:
    """Real-equivalent face count of a stand-in mesh."""
    return int(standin_faces) * GEOMETRY_FACTOR


class Block:
    """``real_bytes × scale()`` bytes of touched memory, held until ``free()`` or garbage
    collection (numpy returns large blocks to the system at once)."""

    def __init__(self, real_bytes: float):
        n = int(real_bytes * scale())
        self.nbytes = n
        self._data = np.full(n, 1, dtype=np.uint8) if n > 0 else None
        _live["bytes"] += n
        if _live["bytes"] > _live["peak"]:
            _live["peak"] = _live["bytes"]
            _report()

    def free(self) -> None:
        if self._data is not None:
            _live["bytes"] -= self.nbytes
        self._data = None

    def __del__(self):
        self.free()

    def __enter__(self) -> "Block":
        return self

    def __exit__(self, *exc) -> None:
        self.free()


def per_face(kind: str, standin_faces: int) -> Block:
    """A block for ``kind`` (a key of ``BYTES``) over a stand-in mesh of ``standin_faces``."""
    return Block(BYTES[kind] * real_faces(standin_faces))
