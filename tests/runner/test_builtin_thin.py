"""A tall, thin picture costs the built-in backend memory in proportion to its pixels and the
texture, not its longest side squared (300 × 16000 px asked for a 5.9 GiB
array in the texture stage, because the input was padded out to the texture's square box).

The run goes through the real runner in a subprocess under an address-space limit
(``RLIMIT_AS``), so the unbounded code fails with ``out_of_memory`` there instead of taking the
shared machine's memory; the peak is the runner's own figure (the worker's sampled footprint
and kernel high-water mark, ``result.peak``).
"""
from __future__ import annotations

import resource
import subprocess
import sys

import numpy as np
import pytest
import trimesh
from PIL import Image

from runner.backends.builtin import texture
from runner.backends.builtin.matte import compute_matte

GIB = 1 << 30
#: each runner process's address-space limit: the fixed code stays far under it (its worker
#: imports numpy, scipy and Pillow), the unfixed one's 5.9 GiB array cannot be made.
ADDRESS_LIMIT = 4 * GIB
BLUE = (40, 60, 200)


def thin_picture(path, width: int, height: int):
    """A blue ellipse filling a white ``width × height`` px picture (no alpha), saved as PNG."""
    yy, xx = np.mgrid[0:height, 0:width]
    inside = (((xx - (width - 1) / 2) / (width * 0.42)) ** 2
              + ((yy - (height - 1) / 2) / (height * 0.45)) ** 2) <= 1
    rgb = np.full((height, width, 3), 255, np.uint8)
    rgb[inside] = BLUE
    Image.fromarray(rgb).save(path)
    return path


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))


@pytest.mark.parametrize("width, height", [(300, 16000), (16000, 300)])
def test_thin_picture_runs_with_a_modest_peak(rt, tmp_path, width, height):
    image = thin_picture(tmp_path / f"thin_{width}x{height}.png", width, height)
    out = tmp_path / "thin.glb"
    proc = subprocess.run([sys.executable, "-m", "runner", str(image), "-o", str(out)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300, env=rt.env(), cwd=rt.REPO,
                          preexec_fn=_limit_address_space)
    events = rt.parse(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = events[-1]
    assert result["event"] == "result"
    assert result["peak"] < 1 * GIB, result["peak"]
    # the texture still shows the picture: the front block holds the body's blue
    mesh = trimesh.load(out, force="mesh")
    tex = np.asarray(mesh.visual.material.baseColorTexture.convert("RGB"))
    assert tex.shape[:2] == (1024, 1024)
    uv = mesh.visual.uv
    px = np.clip((uv[:, 0] * 1024).astype(int), 0, 1023)
    py = np.clip(((1 - uv[:, 1]) * 1024).astype(int), 0, 1023)
    sampled = tex[py, px].astype(int)
    assert np.abs(sampled - BLUE).max(axis=1).mean() < 20
    extent = mesh.bounds[1] - mesh.bounds[0]
    long_side, short_side = max(extent[0], extent[1]), min(extent[0], extent[1])
    assert long_side / short_side > 30  # the body keeps the picture's thin shape


def _box(matte, size: int):
    rows = np.flatnonzero(matte.mask.any(axis=1))
    cols = np.flatnonzero(matte.mask.any(axis=0))
    bbox = (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1)
    scale, x0, y0, _, _ = texture.plan_layout(bbox, size)
    return x0, y0, x0 + size / scale, y0 + size / scale


def _resampled(monkeypatch, budget: float, shape, box, size, channels):
    monkeypatch.setattr(texture, "PAD_BUDGET", budget)
    rows, cols, resample = texture.box_resampler(shape, box, size)
    return [resample(c[rows, cols]) for c in channels]


@pytest.mark.parametrize("picture, size", [
    ("typical_humanoid_dragonborn.png", 2048),  # upscaled: bilinear
    ("character_1.png", 512),                   # downscaled: box filter
    ("thin", 1024),                             # 32 × 1200 px: the box 30 times the width
])
def test_window_equals_whole_box(monkeypatch, shared_images, tmp_path, picture, size):
    """Both ways of :func:`texture.box_resampler` give the same texels (to float32 rounding:
    Pillow computes the window's filter positions from another origin)."""
    if picture == "thin":
        path = thin_picture(tmp_path / "thin.png", 32, 1200)
    else:
        path = next(p for p in shared_images if p.name == picture)
    with Image.open(path) as im:
        rgba = np.asarray(im.convert("RGBA"))
        matte = compute_matte(im.convert("RGBA"), had_alpha="A" in im.getbands())
    weight = matte.colour_mask.astype(np.float32)
    channels = [weight, rgba[..., 0] * weight, rgba[..., 2] * weight]
    box = _box(matte, size)
    whole = _resampled(monkeypatch, float("inf"), weight.shape, box, size, channels)
    window = _resampled(monkeypatch, 0.0, weight.shape, box, size, channels)
    assert whole[0].max() > 0.9  # the character is there, fully covering some texels
    for a, b, top in zip(whole, window, (1.0, 255.0, 255.0), strict=True):
        assert a.shape == b.shape == (size, size)
        assert (a > 0).sum() > 500
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * top)


def test_normal_pictures_keep_the_whole_box(shared_images):
    """Every shared picture, at every texture size, is padded out to the whole box (its texture
    is byte for byte the one it had before the window existed); a thin one is not."""
    for path in shared_images:
        with Image.open(path) as im:
            matte = compute_matte(im.convert("RGBA"), had_alpha="A" in im.getbands())
        for size in (512, 1024, 2048, 4096):
            box = _box(matte, size)
            assert texture.whole_box_pad(matte.mask.shape, box, size) is not None, (path, size)
    box = (-4000.0, 0.0, 4040.0, 8040.0)  # 40 × 8000 px: its silhouette's box
    assert texture.whole_box_pad((8000, 40), box, 1024) is None
    rows, cols, _ = texture.box_resampler((8000, 40), box, 1024)
    assert (rows, cols) == (slice(0, 8000), slice(0, 40))


def test_too_thin_silhouette_is_refused_before_padding():
    """A silhouette narrower than half a grid cell gives no cell; the grid says so before it
    pads the matte by a cell (625 px here: the padded matte would have taken 1.3 GB)."""
    import tracemalloc

    from runner.backends.builtin.errors import EmptyMatteError
    from runner.backends.builtin.grid import make_grid

    mask = np.zeros((200_000, 32), bool)
    mask[:, 4:28] = True
    tracemalloc.start()
    try:
        with pytest.raises(EmptyMatteError, match="too thin"):
            make_grid(mask, 320)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
