"""The built-in backend's parts and its errors: matte keying, hard silhouettes, texture bleed.

Inputs are the shared images (some re-composited onto other backgrounds here) and a few drawn
silhouettes that stress the mesh builder (one-cell lines, corner contacts, holes).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import trimesh
from PIL import Image

from runner.backends.builtin import (
    BackgroundNotPlainError,
    BuiltinBackendError,
    EmptyMatteError,
    generate,
)
from runner.backends.builtin.grid import Grid, remove_pinches
from runner.backends.builtin.inflate import inflate_body, solve_height
from runner.backends.builtin.matte import compute_matte

MAGENTA = np.array([255, 0, 255])


def shared(shared_images, name: str) -> Image.Image:
    matches = [p for p in shared_images if p.name == name]
    assert matches, f"{name} is not in tests/data/images"
    with Image.open(matches[0]) as im:
        return im.convert("RGBA")


def iou(a, b) -> float:
    return float((a & b).sum() / (a | b).sum())


def test_fully_transparent_image_raises_empty_matte(tmp_path):
    out = tmp_path / "out.glb"
    image = Image.new("RGBA", (64, 64), (120, 30, 200, 0))
    with pytest.raises(EmptyMatteError) as info:
        generate(image, out, had_alpha=True)
    err = info.value
    assert isinstance(err, BuiltinBackendError) and err.kind == "empty_matte"
    assert "transparent" in err.message and err.hint
    assert not out.exists()


@pytest.mark.parametrize("dots", [1, 3])
def test_a_speck_of_a_character_is_counted_in_words(tmp_path, dots):
    """One opaque pixel is "1 pixel", three are "3 pixels" (both under the matte's minimum)."""
    image = Image.new("RGBA", (64, 64), (120, 30, 200, 0))
    for x in range(dots):
        image.putpixel((30 + x, 30), (120, 30, 200, 255))
    with pytest.raises(EmptyMatteError) as info:
        generate(image, tmp_path / "out.glb", had_alpha=True)
    words = "1 pixel " if dots == 1 else f"{dots} pixels "
    assert f"has only {words}" in info.value.message, info.value.message


def test_plain_image_without_alpha_raises_empty_matte(tmp_path):
    out = tmp_path / "out.glb"
    with pytest.raises(EmptyMatteError, match="one plain colour"):
        generate(Image.new("RGBA", (80, 60), (250, 250, 250, 255)), out, had_alpha=False)
    assert not out.exists()


def test_busy_background_without_alpha_raises(shared_images, tmp_path):
    goblin = shared(shared_images, "typical_humanoid_goblin.png")
    noise = np.random.default_rng(0).integers(0, 256, (goblin.height, goblin.width, 3), np.uint8)
    photo = Image.fromarray(noise).convert("RGBA")
    photo.alpha_composite(goblin)
    with pytest.raises(BackgroundNotPlainError) as info:
        generate(photo, tmp_path / "out.glb", had_alpha=False)
    assert "background" in info.value.hint.lower()
    assert not (tmp_path / "out.glb").exists()


def test_border_key_matches_the_original_alpha(shared_images):
    """goblin_on_white.jpg is typical_humanoid_goblin.png flattened onto white (SOURCE.md)."""
    png = shared(shared_images, "typical_humanoid_goblin.png")
    jpg = shared(shared_images, "goblin_on_white.jpg")
    keyed = compute_matte(jpg, had_alpha=False)
    assert keyed.source == "border" and keyed.background == (255, 255, 255)
    truth = np.asarray(png)[..., 3] >= 128
    assert iou(keyed.mask, truth) >= 0.97
    # Whites inside the character (eyes, teeth) stay in: no enclosed hole bigger than a speck.
    from scipy import ndimage
    holes = ndimage.binary_fill_holes(keyed.mask) & ~keyed.mask
    assert holes.sum() <= (ndimage.binary_fill_holes(truth) & ~truth).sum() + 50


def test_opaque_alpha_is_keyed_from_the_border(shared_images, tmp_path):
    jpg = shared(shared_images, "goblin_on_white.jpg")  # RGBA after convert, alpha 255 everywhere
    result = generate(jpg, tmp_path / "g.glb", had_alpha=True, texture_size=512)
    assert result["matte_source"] == "border"


@pytest.mark.parametrize("keyed", [False, True], ids=["alpha", "border"])
def test_no_background_colour_bleeds_into_the_texture(shared_images, tmp_path, keyed):
    """Put magenta behind the character: the texture at the silhouette's rim is never magenta
    (no halo), and magenta texels anywhere are (almost) absent.

    With alpha, none at all. Keyed from the border, a few pixels may survive in anti-aliased
    cracks enclosed by the character (the goblin's hand on its hip): their colours are mixed, not
    the background's, and cannot be told from the character's own.
    """
    goblin = shared(shared_images, "typical_humanoid_goblin.png")
    rgba = np.asarray(goblin).copy()
    if keyed:
        flat = Image.new("RGBA", goblin.size, (255, 0, 255, 255))
        flat.alpha_composite(goblin)
        image = flat
    else:
        rgba[rgba[..., 3] < 128, :3] = MAGENTA
        image = Image.fromarray(rgba)
    generate(image, tmp_path / "m.glb", had_alpha=not keyed, texture_size=512)
    mesh = next(iter(trimesh.load(tmp_path / "m.glb", process=False).geometry.values()))
    tex = np.asarray(mesh.visual.material.baseColorTexture.convert("RGB")).astype(float)
    magenta = np.linalg.norm(tex - MAGENTA, axis=2) < 60
    assert magenta.sum() <= (10 if keyed else 0), f"{magenta.sum()} magenta texels"
    # The silhouette's edge: vertices of faces seen edge-on from the front (|normal z| < 0.3).
    rim = np.zeros(len(mesh.vertices), bool)
    rim[mesh.faces[np.abs(mesh.face_normals[:, 2]) < 0.3].ravel()] = True
    uv = mesh.visual.uv[rim]
    size = tex.shape[0]
    for dx in (-1, 0, 1):  # the texels a bilinear lookup at the rim reads
        for dy in (-1, 0, 1):
            tx = np.clip((uv[:, 0] * size).astype(int) + dx, 0, size - 1)
            ty = np.clip(((1 - uv[:, 1]) * size).astype(int) + dy, 0, size - 1)
            assert not magenta[ty, tx].any(), "magenta at the silhouette's rim: a halo"
    assert rim.sum() > 500


def test_texture_size_and_floor(shared_images, tmp_path):
    image = shared(shared_images, "yoimiya_1.png")
    big = generate(image, tmp_path / "a.glb", had_alpha=True, texture_size=2048)
    small = generate(image, tmp_path / "b.glb", had_alpha=True, texture_size=64)
    assert big["texture_size"] == 2048 and small["texture_size"] == 512
    mesh = next(iter(trimesh.load(tmp_path / "a.glb").geometry.values()))
    tex = mesh.visual.material.baseColorTexture
    assert tex.size == (2048, 2048)
    with pytest.raises(ValueError, match="4096"):
        generate(image, tmp_path / "c.glb", had_alpha=True, texture_size=8192)
    assert not (tmp_path / "c.glb").exists()


def test_height_option_and_determinism(shared_images, tmp_path):
    image = shared(shared_images, "character_1.png")
    a = generate(image, tmp_path / "a.glb", had_alpha=True, height_m=1.8, texture_size=512)
    generate(image, tmp_path / "b.glb", had_alpha=True, height_m=1.8, texture_size=512, seed=7)
    mesh = next(iter(trimesh.load(tmp_path / "a.glb", process=False).geometry.values()))
    assert abs(mesh.extents[1] - 1.8) < 0.018 and abs(a["height_m"] - 1.8) < 1e-9
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.glb", "b.glb")]
    assert digest[0] == digest[1], "the method is deterministic: same input, same GLB"
    with pytest.raises(ValueError):
        generate(image, tmp_path / "c.glb", had_alpha=True, height_m=0)


def test_small_image_still_closes(tmp_path):
    """A 12×20 opaque blob (one cell per pixel): still a closed body."""
    rgba = np.zeros((20, 12, 4), np.uint8)
    rgba[3:17, 2:10] = (200, 60, 40, 255)
    result = generate(Image.fromarray(rgba), tmp_path / "s.glb", had_alpha=True)
    mesh = next(iter(trimesh.load(tmp_path / "s.glb", process=False).geometry.values()))
    assert mesh.is_watertight and mesh.volume > 0 and result["grid"] == [14, 8]


def drawn_silhouettes() -> dict[str, np.ndarray]:
    """Hard cases for the mesh builder, as cell grids."""
    line = np.zeros((9, 9), bool)
    line[4, 1:8] = True  # one cell thick: front and back may not touch
    diag = np.eye(8, dtype=bool)  # cells touching only at corners
    ring = np.zeros((12, 12), bool)
    ring[2:10, 2:10] = True
    ring[4:8, 4:8] = False  # a hole through the body
    checker = (np.indices((10, 10)).sum(0) % 2).astype(bool)
    lone = np.zeros((5, 5), bool)
    lone[2, 2] = True
    return {"line": line, "diagonal": diag, "ring": ring, "checker": checker, "one_cell": lone}


@pytest.mark.parametrize("name", list(drawn_silhouettes()))
def test_hard_silhouettes_make_closed_manifold_bodies(name):
    cells = remove_pinches(drawn_silhouettes()[name])
    body = inflate_body(Grid(cells=cells, x0=0.0, y0=0.0, cell=1.0))
    mesh = trimesh.Trimesh(body.vertices, body.faces, process=False)
    assert mesh.is_watertight and mesh.is_winding_consistent and mesh.volume > 0, name
    # Manifold vertices: around each vertex the faces form one fan (one connected piece).
    edges = mesh.edges_unique
    assert len(edges) * 2 == len(mesh.faces) * 3, "every edge in exactly two faces"
    euler = len(mesh.vertices) - len(edges) + len(mesh.faces)
    pieces = mesh.body_count
    from scipy import ndimage
    background, n = ndimage.label(~np.pad(cells, 1))
    holes = n - 1  # enclosed background regions: each one is a tunnel through the body
    assert name != "ring" or holes == 1
    assert euler == 2 * (pieces - holes), f"{name}: Euler characteristic {euler}, {pieces} pieces"


def test_depth_follows_width():
    """Poisson inflation: a strip of half-width w gets h ≈ w² at its middle (circular section),
    so a strip twice as wide is twice as deep."""
    def middle_depth(width):
        cells = np.zeros((60, width + 4), bool)
        cells[:, 2:2 + width] = True
        h = solve_height(cells)
        return np.sqrt(h[30, 2 + width // 2])

    narrow, wide = middle_depth(10), middle_depth(20)
    assert abs(narrow - 5) < 0.5 and abs(wide - 10) < 0.7, (narrow, wide)
    ratio = wide / narrow  # depth scales with width: twice as wide, twice as deep
    assert 1.8 < ratio < 2.2, ratio


def test_error_kinds_are_known_to_the_runner():
    """The runner maps these exceptions to error events by kind (meshfacts/errors.py KINDS)."""
    errors = pytest.importorskip("meshfacts.errors")
    import runner.backends.builtin as builtin

    for cls in (EmptyMatteError, BackgroundNotPlainError):
        assert builtin.ERRORS[cls.__name__] == cls.kind
        assert cls.kind in errors.KINDS, cls.kind
