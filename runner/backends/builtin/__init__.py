"""Silhouette inflation (built-in): the runner's embedded image-to-mesh backend.

No weights, CPU only, seconds. It is *not* Pixal3D and does not guess unseen geometry: it cuts
the character out (matte), inflates the silhouette into a closed, rounded body whose depth
follows the silhouette's width (shape), textures the front from the image and the back with a
blurred copy of it seen from behind — the front's colours mirrored, no face (texture) — and
writes a watertight GLB
(export). See docs/builtin.md.

Entry points: :func:`run_job` (the runner's worker, with the job's options) and
:func:`generate` (the method itself). Errors for input it cannot handle: :class:`EmptyMatteError`,
:class:`BackgroundNotPlainError` (both :class:`BuiltinBackendError`, with ``kind`` and ``hint``).
"""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np
from PIL import Image

from meshfacts import choices
from meshfacts import options as options_table
from meshfacts.events import make

from .errors import BackgroundNotPlainError, BuiltinBackendError, EmptyMatteError
from .export import build_mesh, write_glb
from .grid import DEFAULT_MAX_CELLS, make_grid
from .inflate import DEFAULT_DEPTH_SCALE, inflate_body
from .matte import compute_matte
from .texture import MAX_TEXTURE_SIZE, make_texture

__all__ = [
    "NAME", "STAGES", "ERRORS", "generate", "run_job",
    "BuiltinBackendError", "EmptyMatteError", "BackgroundNotPlainError",
]

#: the name the UI and docs show for this backend.
NAME = "Silhouette inflation (built-in)"
#: the stage plan, in order.
STAGES = ("matte", "shape", "texture", "export")
#: exception class name → the runner's error kind (meshfacts/errors.py); each class also carries
#: the same ``kind`` attribute and a ``hint``.
ERRORS = {
    "EmptyMatteError": EmptyMatteError.kind,
    "BackgroundNotPlainError": BackgroundNotPlainError.kind,
}


HEIGHT_M = options_table.get("height").default
"""The product's default height (metres): the options table's, like every default here."""


def run_job(image: "Image.Image", output: "str | os.PathLike", options, *, had_alpha: bool,
            emit: "Callable[[dict], None] | None" = None) -> dict:
    """The runner's entry: :func:`generate` with the job's ``JobOptions`` (its texture side and
    height; the seed is not used). Returns and raises as :func:`generate`."""
    return generate(image, output, had_alpha=had_alpha, seed=options.seed,
                    texture_size=options.texture_size, height_m=options.height_m, emit=emit)


def generate(image: "Image.Image", output: "str | os.PathLike", *, had_alpha: bool,
             seed: int = choices.DEFAULT_SEED, texture_size: int = choices.DEFAULT_TEXTURE_SIZE,
             height_m: float = HEIGHT_M,
             emit: "Callable[[dict], None] | None" = None, max_cells: int = DEFAULT_MAX_CELLS,
             depth_scale: float = DEFAULT_DEPTH_SCALE) -> dict:
    """Turn one character image into a textured, watertight GLB written exactly to ``output``.

    Args:
        image: the validated input (RGBA, 8-bit, orientation applied; other modes are converted).
        output: GLB path; written in place (the caller owns temporary names and renames).
        had_alpha: whether the original file had a real alpha channel; if not (or if the alpha is
            opaque everywhere) the matte is keyed from the border colour.
        seed: accepted for the runner's common interface; the method is deterministic and does not
            use it.
        texture_size: base-colour texture side, px (raised to 512 if smaller; at most 4096).
        height_m: height of the mesh's bounding box, metres (> 0).
        emit: sink for stageload-style events (``stage``, ``ready``, ``progress``), or None.
        max_cells: mesh cells along the silhouette's longer side (detail versus size and time).
        depth_scale: body depth relative to round cross-sections (0.8 default).

    Returns:
        dict: ``backend`` (:data:`NAME`), ``vertices``, ``faces`` (counts), ``texture_size`` (px),
        ``height_m``, ``width_m``, ``depth_m`` (bounding box, metres), ``matte_pixels``,
        ``matte_source`` (``"alpha"``/``"border"``), ``background`` (keyed RGB or None),
        ``grid`` (``[rows, cols]``), ``glb_bytes``, ``seconds`` (per stage, plus ``"total"``).

    Raises:
        EmptyMatteError: fully transparent image, or nothing left after keying the border.
        BackgroundNotPlainError: no alpha and no plain border colour to key.
        ValueError: ``height_m`` ≤ 0, or ``texture_size`` < 1 or > 4096.
        OSError: ``output`` cannot be written.

    The mesh: +Y up, metres, front towards +Z (glTF), feet at y = 0, centred on x and z.
    """
    _check_sizes(height_m, texture_size)
    clock = _StageClock(emit)

    clock.stage(0)
    rgba_image = image if image.mode == "RGBA" else image.convert("RGBA")
    rgba = np.asarray(rgba_image)
    matte = compute_matte(rgba_image, had_alpha=had_alpha)
    clock.progress(0, 1.0)

    clock.stage(1)
    grid = make_grid(matte.mask, max_cells)
    clock.progress(1, 0.1)
    body = inflate_body(grid, depth_scale=depth_scale,
                        on_progress=lambda f: clock.progress(1, 0.1 + 0.9 * f))

    clock.stage(2)
    texture = make_texture(rgba, matte, texture_size)
    px, py = grid.corner_pixels(body.rows, body.cols)
    uv = texture.uv(px, py, back=~body.front)
    clock.progress(2, 1.0)

    vertices, glb_bytes = _export(clock, body, uv, texture.image, height_m, output)
    return _facts(vertices, body.faces, texture.image, matte, grid, glb_bytes, clock.finish())


def _export(clock, body, uv, texture_image, height_m: float, output) -> tuple:
    """``generate``'s last stage: the body in metres (``height_m`` tall), the textured mesh,
    the GLB written to ``output``. Returns the vertices (metres) and the GLB's size (bytes)."""
    clock.stage(3)
    vertices = _in_metres(body.vertices, height_m)
    mesh = build_mesh(vertices, body.faces, uv, texture_image)
    clock.progress(3, 0.3)
    glb_bytes = write_glb(mesh, output)
    clock.progress(3, 1.0)
    return vertices, glb_bytes


def _check_sizes(height_m: float, texture_size: int) -> None:
    """``generate``'s ``ValueError`` for a height (metres) or texture side (px) it cannot make."""
    if not height_m > 0:
        raise ValueError(f"height_m must be positive, got {height_m}")
    if not 1 <= texture_size <= MAX_TEXTURE_SIZE:
        raise ValueError(f"texture size must be 1 to {MAX_TEXTURE_SIZE} px (512 is the floor "
                         f"actually written), got {texture_size}; use --texture-size 1024 or 2048")


def _facts(vertices, faces, texture_image, matte, grid, glb_bytes: int, seconds: dict) -> dict:
    """``generate``'s return value (documented there) from what its stages made."""
    extent = vertices.max(axis=0) - vertices.min(axis=0)
    return {
        "backend": NAME,
        "vertices": int(len(vertices)),
        "faces": int(len(faces)),
        "texture_size": int(texture_image.width),
        "height_m": float(extent[1]),
        "width_m": float(extent[0]),
        "depth_m": float(extent[2]),
        "matte_pixels": matte.pixels,
        "matte_source": matte.source,
        "background": list(matte.background) if matte.background else None,
        "grid": [int(s) for s in grid.cells.shape],
        "glb_bytes": int(glb_bytes),
        "seconds": seconds,
    }


class _StageClock:
    """The stage events of one ``generate`` and the seconds each stage took.

    ``stage(i)`` ends the running stage (if any) and announces :data:`STAGES` ``[i]`` with a
    ``stage`` and a ``ready`` event (nothing to release here, so ``ready`` follows at once);
    ``progress(i, fraction)`` sends a ``progress`` event; ``finish()`` ends the last stage and
    returns ``{stage: seconds, ..., "total": seconds}``. ``emit`` may be None (no events).
    """

    def __init__(self, emit: "Callable[[dict], None] | None") -> None:
        self._sink = emit or (lambda event: None)
        self._start = self._mark = time.perf_counter()
        self._current: str | None = None
        self.seconds: dict[str, float] = {}

    def _end(self) -> None:
        now = time.perf_counter()
        if self._current is not None:
            self.seconds[self._current] = now - self._mark
        self._mark = now

    def stage(self, index: int) -> None:
        self._end()
        name = self._current = STAGES[index]
        self._sink(make("stage", stage=name, index=index, count=len(STAGES)))
        self._sink(make("ready", stage=name, seconds=0.0, released_bytes=0))

    def progress(self, index: int, fraction: float) -> None:
        self._sink(make("progress", stage=STAGES[index], fraction=float(fraction)))

    def finish(self) -> dict[str, float]:
        self._end()
        self._current = None
        self.seconds["total"] = time.perf_counter() - self._start
        return self.seconds


def _in_metres(v: np.ndarray, height_m: float) -> np.ndarray:
    """Grid-unit vertices ``[N, 3]`` scaled to ``height_m`` metres tall, feet at y = 0, centred
    on x (z keeps its own centre, the body's mid-plane at 0)."""
    ys = v[:, 1]
    scale = height_m / (ys.max() - ys.min())
    vertices = np.empty_like(v)
    vertices[:, 0] = (v[:, 0] - (v[:, 0].max() + v[:, 0].min()) / 2) * scale
    vertices[:, 1] = (ys - ys.min()) * scale
    vertices[:, 2] = v[:, 2] * scale
    return vertices
