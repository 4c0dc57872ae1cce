"""Matte: the character's silhouette as a boolean mask, from the alpha channel or the border colour.

Stage ``matte`` of the built-in backend. The mask has the image's shape ``(H, W)``; ``True`` marks
the character. This module decides between the alpha channel and keying (``key.py``) and cleans
the result; connected-component labelling is scipy.ndimage's (``label``); nothing here is
hand-written beyond the thresholds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from scipy import ndimage

from .errors import EmptyMatteError
from .key import MIXED_REACH, Key, border_ring, key_border, near

#: alpha ≥ this (of 255) counts as the character: the 50 % coverage line of an anti-aliased edge.
ALPHA_THRESHOLD = 128
#: an alpha channel outlines the character only when at least this share of the border ring is
#: transparent (a cut-out's background reaches the border); under it — an opaque background with
#: a few scattered transparent pixels, a palette image's stray transparent index — the image is
#: keyed from its border like one without alpha. A character filling the frame to 95 % of its
#: border is far beyond any cut-out seen.
MIN_TRANSPARENT_BORDER = 0.05
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
    """Matte of an RGBA image: from alpha if it outlines the character, else keyed from the border.

    The alpha outlines the character when at least ``MIN_TRANSPARENT_BORDER`` of the border ring
    is transparent. An alpha that leaves the border opaque (opaque everywhere, uniformly
    partly opaque, or an opaque background with scattered transparent pixels) carries no
    silhouette: the image is keyed from the border (:func:`key.key_border`), its transparent
    pixels counting as background.

    Raises:
        EmptyMatteError: nothing (or fewer than ``MIN_MATTE_PIXELS`` pixels) is left, or the
            alpha is too faint to hold a character (the message says what the alpha holds).
        BackgroundNotPlainError: keyed, and the border is not one plain colour.
    """
    rgba = np.asarray(image.convert("RGBA"))
    alpha = rgba[..., 3]
    transparent = alpha < ALPHA_THRESHOLD
    share = float(transparent[border_ring(alpha.shape)].mean())
    if had_alpha and share >= MIN_TRANSPARENT_BORDER:
        if not transparent.all():
            cleaned = clean_matte(~transparent)
            matte = Matte(cleaned, "alpha", None, float(ALPHA_THRESHOLD),
                          cleaned & (alpha >= OPAQUE_ALPHA))
        else:
            raise faint_alpha_error(alpha)
    else:
        reason = "The image has no transparency"
        if had_alpha:
            reason = (f"The image's transparency leaves its border opaque ({share:.0%} of the "
                      f"border "
                      f"transparent, {transparent.sum()} px in all), so it does not cut a "
                      f"character "
                      "out and the background is keyed by colour")
        key = key_border(rgba[..., :3], transparent=transparent if had_alpha else None,
                         reason=reason)
        cleaned = clean_matte(key.mask)
        matte = Matte(cleaned, "border", key.background, key.threshold,
                      keyed_colour_mask(key, cleaned, transparent))
    if matte.pixels < MIN_MATTE_PIXELS:
        raise EmptyMatteError(
            f"The character's silhouette has only {matte.pixels} "
            f"{'pixel' if matte.pixels == 1 else 'pixels'} "
            f"(matte from {matte.source}); there is nothing to inflate.",
            "Use an image where the character is clearly visible against a transparent or "
            "plain background.",
        )
    return matte


def keyed_colour_mask(key: Key, cleaned: np.ndarray, transparent: np.ndarray) -> np.ndarray:
    """The pixels of a keyed matte whose colours the texture takes: bool ``(H, W)``.

    The matte shrunk by ``KEYED_EDGE_PIXELS`` (its edge is mixed with the background), without
    transparent or mixed pixels (:func:`key.mixed_pixels`); near the background (within
    ``key.MIXED_REACH`` px) also without trusted pieces thinner than 3 px, which are the tails of
    background cracks rather than the character (scipy.ndimage's opening).
    """
    trusted = ndimage.binary_erosion(key.mask, iterations=KEYED_EDGE_PIXELS) & cleaned
    trusted &= ~(transparent | key.mixed)
    close = near(~key.mask, MIXED_REACH)
    return trusted & (~close | ndimage.binary_opening(trusted, structure=np.ones((3, 3), bool)))


def faint_alpha_error(alpha: np.ndarray) -> EmptyMatteError:
    """The error for an alpha with no pixel at ``ALPHA_THRESHOLD`` or above, saying what it holds.

    Args:
        alpha: uint8 ``(H, W)``, every value under ``ALPHA_THRESHOLD``.
    """
    top, low = int(alpha.max()), int(alpha.min())
    hint = ("Make the character fully opaque (layer opacity 100 %) on a transparent background "
            "and save the PNG again, or flatten it onto a plain colour without transparency so "
            "the background is keyed.")
    if top == 0:
        return EmptyMatteError("The image is fully transparent (alpha 0 everywhere): there is no "
                               "character to turn into a mesh.", hint)
    if low == top:
        return EmptyMatteError(
            f"The image is uniformly semi-transparent (alpha {top}/255 everywhere): no pixel is "
            f"opaque enough to be the character (alpha {ALPHA_THRESHOLD}/255 or more), and an "
            "even alpha outlines nothing.", hint)
    seen = float((alpha > 0).mean())
    return EmptyMatteError(
        f"The image is semi-transparent: its most opaque pixel has alpha {top}/255 (on {seen:.0%} "
        f"of the pixels alpha is above 0), below the {ALPHA_THRESHOLD}/255 a pixel of the "
        "character needs.", hint)


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
