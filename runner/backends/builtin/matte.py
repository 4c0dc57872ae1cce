"""Matte: the character's silhouette as a boolean mask, from the alpha channel or the border colour.

Stage ``matte`` of the built-in backend. The mask has the image's shape ``(H, W)``; ``True`` marks
the character. Connected-component labelling is scipy.ndimage's (``label``); nothing here is
hand-written beyond the thresholds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from scipy import ndimage

from .errors import BackgroundNotPlainError, EmptyMatteError

#: alpha ≥ this (of 255) counts as the character: the 50 % coverage line of an anti-aliased edge.
ALPHA_THRESHOLD = 128
#: width of the border ring (pixels) whose colours estimate the background of an image without alpha.
BORDER_RING = 2
#: a border pixel within this RGB distance (0..441) of the background estimate counts as "plain".
PLAIN_TOLERANCE = 40.0
#: at least this fraction of the border must be plain, or the image has no keyable background.
MIN_PLAIN_BORDER = 0.6
#: the smallest colour distance that separates the character from the background (RGB units).
MIN_KEY_THRESHOLD = 30.0
#: an enclosed region of the background colour (a gap between an arm and the body) is background
#: when its median distance to that colour is at most max(this, the border's noise) ...
ENCLOSED_MATCH = 10.0
#: ... and it has at least this many pixels; fainter or smaller regions (eye whites) stay.
ENCLOSED_MIN_PIXELS = 16
#: a keyed matte is shrunk by this many pixels before its colours are trusted for the texture
#: (its edge pixels are mixed with the background).
KEYED_EDGE_PIXELS = 2
#: alpha (of 255) at or above which a pixel's colour is trusted as the character's own.
OPAQUE_ALPHA = 250
#: components smaller than this fraction of the largest one are specks and are dropped.
MIN_COMPONENT_FRACTION = 0.02
#: enclosed holes smaller than this fraction of the matte area are filled (gaps between an arm and
#: the body are far larger and stay open).
MAX_HOLE_FRACTION = 0.001
#: fewer matte pixels than this cannot make a body.
MIN_MATTE_PIXELS = 16


@dataclass
class Matte:
    """The result of the matte stage.

    Attributes:
        mask: bool array ``(H, W)``, True on the character.
        source: ``"alpha"`` (from the alpha channel) or ``"border"`` (keyed from the border colour).
        background: the keyed background colour ``(r, g, b)`` 0..255, or None for ``"alpha"``.
        threshold: the alpha threshold (0..255) or the colour-distance threshold (RGB units) used.
        colour_mask: bool ``(H, W)``, the pixels whose colours are the character's own (opaque,
            or away from keyed background), the only ones the texture takes colours from.
    """

    mask: np.ndarray
    source: str
    background: tuple[int, int, int] | None
    threshold: float
    colour_mask: np.ndarray

    @property
    def pixels(self) -> int:
        """Number of matte pixels (int)."""
        return int(self.mask.sum())


def compute_matte(image: Image.Image, *, had_alpha: bool) -> Matte:
    """Matte of an RGBA image: from alpha if it has a real one, else keyed from the border colour.

    An alpha channel that is opaque everywhere carries no silhouette, so it is keyed from the
    border as well.

    Raises:
        EmptyMatteError: nothing (or fewer than ``MIN_MATTE_PIXELS`` pixels) is left.
        BackgroundNotPlainError: no alpha and the border is not one plain colour.
    """
    rgba = np.asarray(image.convert("RGBA"))
    alpha = rgba[..., 3]
    if had_alpha and alpha.min() < 255:
        mask = alpha >= ALPHA_THRESHOLD
        if not mask.any():
            raise EmptyMatteError(
                "The image is fully transparent: there is no character to turn into a mesh.",
                "Use an image whose character is opaque on a transparent background.",
            )
        cleaned = clean_matte(mask)
        matte = Matte(cleaned, "alpha", None, float(ALPHA_THRESHOLD), cleaned & (alpha >= OPAQUE_ALPHA))
    else:
        mask, background, threshold = key_border(rgba[..., :3])
        cleaned = clean_matte(mask)
        trusted = ndimage.binary_erosion(mask, iterations=KEYED_EDGE_PIXELS) & cleaned
        matte = Matte(cleaned, "border", background, threshold, trusted)
    if matte.pixels < MIN_MATTE_PIXELS:
        raise EmptyMatteError(
            f"The character's silhouette has only {matte.pixels} pixels "
            f"(matte from {matte.source}); there is nothing to inflate.",
            "Use an image where the character is clearly visible against a transparent or "
            "plain background.",
        )
    return matte


def key_border(rgb: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int], float]:
    """Key out a plain background that touches the image border.

    The background colour is the per-channel median of a ``BORDER_RING``-pixel ring; a pixel is
    background when its RGB distance to it is at most the threshold *and* it connects to the
    border through such pixels (flood from the border, 4-connected), so whites inside the
    character (eyes, teeth) stay in the matte. An enclosed region is background too when it *is*
    the background colour (median distance ≤ ``max(ENCLOSED_MATCH, noise)``, at least
    ``ENCLOSED_MIN_PIXELS``): the gap between a hand on the hip and the body.

    Args:
        rgb: uint8 array ``(H, W, 3)``.

    Returns:
        ``(mask, background, threshold)``: the bool mask ``(H, W)`` (True = character), the
        background colour and the distance threshold (RGB units) used.

    Raises:
        BackgroundNotPlainError: less than ``MIN_PLAIN_BORDER`` of the ring is near one colour.
        EmptyMatteError: the whole image is the background colour.
    """
    h, w = rgb.shape[:2]
    ring = np.zeros((h, w), bool)
    r = min(BORDER_RING, max(1, min(h, w) // 2))
    ring[:r], ring[-r:], ring[:, :r], ring[:, -r:] = True, True, True, True
    border = rgb[ring].astype(np.float32)
    background = np.median(border, axis=0)
    border_dist = np.linalg.norm(border - background, axis=1)
    plain = border_dist <= PLAIN_TOLERANCE
    if plain.mean() < MIN_PLAIN_BORDER:
        raise BackgroundNotPlainError(
            f"The image has no transparency and only {plain.mean():.0%} of its border is one "
            "plain colour, so the character cannot be cut out.",
            "Remove the background first (save a PNG with transparency), or use an image on a "
            "plain white or single-colour background.",
        )
    noise = float(np.percentile(border_dist[plain], 99))
    threshold = max(MIN_KEY_THRESHOLD, 3.0 * noise)
    dist = np.linalg.norm(rgb.astype(np.float32) - background, axis=2)
    candidate = dist <= threshold
    labels, _ = ndimage.label(candidate)
    touching = np.unique(labels[ring & candidate])
    touching = touching[touching > 0]
    sizes = np.bincount(labels.ravel())
    enclosed = np.flatnonzero(sizes >= ENCLOSED_MIN_PIXELS)
    enclosed = enclosed[(enclosed > 0) & ~np.isin(enclosed, touching)]
    if enclosed.size:  # few regions: take the medians over their pixels only
        inside = np.isin(labels, enclosed)
        medians = np.asarray(ndimage.median(dist[inside], labels[inside], enclosed))
        touching = np.union1d(touching, enclosed[medians <= max(ENCLOSED_MATCH, noise)])
    background_mask = np.isin(labels, touching)
    mask = ~background_mask
    if not mask.any():
        raise EmptyMatteError(
            "The whole image is one plain colour: no character stands out from the background.",
            "Use an image with a transparent background, or a character on a plain background.",
        )
    return mask, tuple(int(round(c)) for c in background), threshold


def clean_matte(mask: np.ndarray) -> np.ndarray:
    """Drop specks and fill pin-holes.

    Keeps every 8-connected component of at least ``MIN_COMPONENT_FRACTION`` of the largest one
    (a detached sword or hat stays, anti-aliasing dust goes) and fills enclosed holes smaller than
    ``MAX_HOLE_FRACTION`` of the matte area.

    Args:
        mask: bool ``(H, W)``.

    Returns:
        A new bool ``(H, W)`` mask (all False if ``mask`` is).
    """
    labels, n = ndimage.label(mask, structure=np.ones((3, 3), bool))
    if n == 0:
        return mask.copy()
    sizes = np.bincount(labels.ravel())
    sizes[0] = 0
    keep = sizes >= MIN_COMPONENT_FRACTION * sizes.max()
    keep[0] = False
    out = keep[labels]
    holes, n_holes = ndimage.label(~out)
    if n_holes:
        hole_sizes = np.bincount(holes.ravel())
        edge = np.unique(np.concatenate([holes[0], holes[-1], holes[:, 0], holes[:, -1]]))
        small = hole_sizes < max(1.0, MAX_HOLE_FRACTION * out.sum())
        small[0] = False
        small[edge] = False
        out |= small[holes]
    return out
