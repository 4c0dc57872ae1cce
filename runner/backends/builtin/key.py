"""Keying: the character's silhouette cut from a plain background that touches the image border.

Used by the matte stage for an image without a usable alpha channel. All steps are whole-array
NumPy / scipy.ndimage operations (median, erosion, labelling, distance transform, maximum
filter); nothing walks pixels in Python.

1. **Background colour**: the per-channel median of a ``BORDER_RING``-pixel ring; at least
   ``MIN_PLAIN_BORDER`` of the ring must lie within ``PLAIN_TOLERANCE`` of it.
2. **Candidates**, with two thresholds (hysteresis, as in Canny's edge linking): *loose*
   candidates lie within ``max(MIN_KEY_THRESHOLD, 3 × border noise)`` RGB units of it, *strict*
   ones within ``max(STRICT_KEY_THRESHOLD, 3 × border noise)`` (no more than the loose one). Only
   strict candidates carry the flood (steps 3, 4); loose ones are taken only next to the
   flooded background, and where they lead into no white area of the character (step 5). A
   white belly without a drawn line meets a white background across a shaded rim 12–30 RGB
   units off white: the loose threshold alone lets the flood through that rim and takes the
   belly.
3. **Edge-aware flood**: the strict candidates are first eroded by ``line_gap`` px — the
   character's lines (character art almost always has a darker outline) are thickened — and only
   then flooded from the border, so the flood cannot slip through an opening in the outline up
   to ``2 × line_gap`` px wide into a white belly behind it; the flooded background is then grown
   back by the same amount, but only through strict candidates.
4. **Enclosed regions of the background colour** are either the background seen through the
   character (the gap between a hand on the hip and the body) or the character's own areas of
   that colour (a white belly inside its outline). A gap is bounded by the character's outline
   on its inner side, limbs away from the outside background; the subject's own area meets the
   outside background across nothing but the outline — or across a light shaded rim (pixels
   within ``RIM_DISTANCE`` of the background colour), which counts as no distance at all for up
   to the outline's reach. So a region counts as background when less than
   ``SUBJECT_EDGE_SHARE`` of its edge lies within the outline's reach of the outside.
5. **Loose fringe**: the background grows ``LOOSE_REACH_PX`` px through loose candidates (the
   anti-aliased and JPEG-ringing pixels next to it that are near, but not within strict reach
   of, its colour), then takes every piece of loose candidates it reaches that holds no white
   area the flood left to the character (:func:`loose_remnants`).
6. **Fringe**: an anti-aliased edge pixel is the mix ``a·C + (1 − a)·B`` of the character's
   colour C and the background B, so its distance to B is ``a·|C − B|``. Edge pixels whose
   distance is under half the largest nearby one (``a < 0.5``, the alpha matte's 128/255 line)
   are background, so a keyed matte matches its alpha version's outline.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from .errors import BackgroundNotPlainError, EmptyMatteError

#: width of the border ring (pixels) whose colours estimate the background.
BORDER_RING = 2
#: a border pixel within this RGB distance (0..441) of the background estimate counts as "plain".
PLAIN_TOLERANCE = 40.0
#: at least this fraction of the border must be plain, or the image has no keyable background.
MIN_PLAIN_BORDER = 0.6
#: the smallest colour distance that separates the character from the background (RGB units).
MIN_KEY_THRESHOLD = 30.0
#: the smallest colour distance (RGB units) that stops the flood (step 2 of the module docstring):
#: a flattened JPEG q90's white border has a noise of 0–6 units (3 × noise ≤ 19, measured on the
#: shared characters), a belly's shaded rim is 12–30 units off white. At 12 a white belly whose
#: outermost pixel is 20 units per channel off white keeps an IoU of ≥ 0.98 with the alpha (0.72
#: at 30, 0.90 at 18; 8 loses 0.01 on plain pictures): python -m bench.matte_iou.
STRICT_KEY_THRESHOLD = 12.0
#: loose candidates (within MIN_KEY_THRESHOLD) this many px from the strict background are
#: background: an anti-aliased edge is 1 px wide (beyond it, see loose_remnants).
#: (Not 0: scipy's binary_dilation repeats without end at iterations=0: an unbounded flood.)
LOOSE_REACH_PX = 1
#: pixels within this RGB distance of the background colour (light greys of 197/255 and up on
#: white) are a light area's shaded rim: step 4 measures the outline's reach across them.
RIM_DISTANCE = 100.0
#: an enclosed region of the background colour is a candidate gap when its median distance to
#: that colour is at most max(this, the border's noise) ...
ENCLOSED_MATCH = 10.0
#: ... and it has at least this many pixels; fainter or smaller regions (eye whites) stay.
ENCLOSED_MIN_PIXELS = 16
#: openings in the character's outline up to 2 × this many px wide stop the flood, per this many
#: px of the image's longer side (at least 1 px): 1 px at 720 px, 3 px at 2048 px.
LINE_GAP_PER_PX = 1 / 720
#: the widest outline (px, per px of the image's longer side; at least 3 px) across which an
#: enclosed region still counts as touching the outside background: 4 px at 720 px. Wider, and
#: a background gap beside a thin strip of the character (a loincloth's 10 px tassel on the
#: goblin) would count as the character's own white.
OUTLINE_WIDTH_PER_PX = 1 / 180
#: an enclosed region with at least this share of its edge at the outline is the character's own.
SUBJECT_EDGE_SHARE = 0.25
#: edge pixels less than this far from the background towards the nearby solid colour are
#: background (the 128/255 alpha line) ...
FRINGE_COVERAGE = 0.5
#: character pixels within this many px of the keyed background whose distance to it is under
#: FRINGE_COVERAGE of the largest in the 5 × 5 px around are mixed with it: the texture skips them
#: (the tail of a crack between a leg and a strap, 13–22 % covered, keeps a magenta tint).
MIXED_REACH = 8
#: ... one px deep into the matte, the solid colour taken from the 3 × 3 px around (an anti-aliased
#: edge is one px wide; a wider window takes a dark detail nearby for the solid colour and peels
#: light character edges: 2 px lowered the IoU with the alpha on every shared image).
FRINGE_PX = 1


@dataclass
class Key:
    """A keyed matte.

    Attributes:
        mask: bool ``(H, W)``, True on the character.
        background: the background colour ``(r, g, b)``, 0..255.
        threshold: the colour distance (RGB units) under which a pixel may be background.
        mixed: bool ``(H, W)``, character pixels near the background whose colour looks partly
            the background's (see :func:`mixed_pixels`); the texture does not take their colour.
    """

    mask: np.ndarray
    background: tuple[int, int, int]
    threshold: float
    mixed: np.ndarray


def border_ring(shape: tuple[int, int], width: int = BORDER_RING) -> np.ndarray:
    """Bool ``(H, W)``: the outermost ``width`` px on every side (fewer for a tiny image)."""
    h, w = shape
    ring = np.zeros((h, w), bool)
    r = min(width, max(1, min(h, w) // 2))
    ring[:r], ring[-r:], ring[:, :r], ring[:, -r:] = True, True, True, True
    return ring


def key_border(rgb: np.ndarray, *, transparent: np.ndarray | None = None,
               reason: str = "The image has no transparency") -> Key:
    """Key out a plain background that touches the image border (steps in the module docstring).

    Args:
        rgb: uint8 ``(H, W, 3)``.
        transparent: bool ``(H, W)`` pixels known to be background whatever their colour (an
            alpha channel's transparent pinholes), or None.
        reason: the start of the message if the border is not plain (why the image is keyed).

    Raises:
        BackgroundNotPlainError: less than ``MIN_PLAIN_BORDER`` of the ring is near one colour.
        EmptyMatteError: the whole image is the background colour.
    """
    shape = rgb.shape[:2]
    known = np.zeros(shape, bool) if transparent is None else transparent
    ring = border_ring(shape)
    background, noise = background_colour(rgb[ring & ~known], reason)
    threshold = max(MIN_KEY_THRESHOLD, 3.0 * noise)
    dist = np.linalg.norm(rgb.astype(np.float32) - background, axis=2)
    dist[known] = 0.0
    loose = dist <= threshold
    candidate = dist <= min(threshold, max(STRICT_KEY_THRESHOLD, 3.0 * noise))
    gap = max(1, round(max(shape) * LINE_GAP_PER_PX))
    passable = ndimage.binary_erosion(candidate, iterations=gap, border_value=1)
    labels, _ = ndimage.label(passable)
    touching = np.unique(labels[ring & passable])
    outside = np.isin(labels, touching) & passable
    reach = 2 * gap + max(3, round(max(shape) * OUTLINE_WIDTH_PER_PX))
    gaps = enclosed_gaps(labels, touching, outside, dist, candidate, gap,
                         max(ENCLOSED_MATCH, noise), reach)
    # Grown back through candidates only (pixels outside the mask keep their value).
    back = ndimage.binary_dilation(outside | gaps, iterations=gap, mask=candidate)
    back |= dead_ends(candidate & ~back, passable, back)
    back |= ndimage.binary_dilation(back, iterations=LOOSE_REACH_PX, mask=loose)
    back |= loose_remnants(back, loose, candidate)
    back = peel_fringe(back, dist, loose)
    if back.all():
        raise EmptyMatteError(
            "The whole image is one plain colour: no character stands out from the background.",
            "Use an image with a transparent background, or a character on a plain background.",
        )
    return Key(~back, tuple(int(round(c)) for c in background), threshold,
               mixed_pixels(back, dist, loose))


def background_colour(border: np.ndarray, reason: str) -> tuple[np.ndarray, float]:
    """The background colour and its noise from the border ring's pixels.

    Args:
        border: ``(N, 3)`` RGB of the ring's usable pixels.
        reason: the start of the error message.

    Returns:
        ``(colour, noise)``: float32 ``(3,)`` per-channel median and the 99th percentile of the
        plain pixels' distance to it (RGB units).

    Raises:
        BackgroundNotPlainError: under ``MIN_PLAIN_BORDER`` of the ring is plain (or none usable).
    """
    border = border.astype(np.float32)
    if len(border):
        colour = np.median(border, axis=0)
        plain = np.linalg.norm(border - colour, axis=1) <= PLAIN_TOLERANCE
    else:
        colour, plain = np.zeros(3, np.float32), np.zeros(1, bool)
    if plain.mean() < MIN_PLAIN_BORDER:
        raise BackgroundNotPlainError(
            f"{reason}, and only {plain.mean():.0%} of its border is one plain colour, so the "
            "character cannot be cut out.",
            "Remove the background first (save a PNG with transparency), or use an image on a "
            "plain white or single-colour background.",
        )
    noise = float(np.percentile(np.linalg.norm(border[plain] - colour, axis=1), 99))
    return colour, noise


def present(values: np.ndarray, top: int) -> np.ndarray:
    """Bool ``(top + 1,)``: which labels 0..top occur in ``values`` (a bincount, not a sort)."""
    return np.bincount(values.ravel(), minlength=top + 1) > 0


def near(mask: np.ndarray, reach: int) -> np.ndarray:
    """Bool ``(H, W)``: pixels within ``reach`` px of ``mask`` (square neighbourhood).

    scipy.ndimage's separable maximum filter: its cost does not grow with ``reach``, unlike
    repeated dilation, and it is several times faster than a Euclidean distance transform of
    the whole image (4096 × 4096 px: about 0.2 s against 1.5 s here).
    """
    return ndimage.maximum_filter(mask.view(np.uint8), size=2 * int(reach) + 1) > 0


def enclosed_gaps(labels: np.ndarray, touching: np.ndarray, outside: np.ndarray, dist: np.ndarray,
                  candidate: np.ndarray, gap: int, match: float, reach: int) -> np.ndarray:
    """Enclosed regions of the background colour that are background seen through the character.

    Args:
        labels: int ``(H, W)`` components of the candidates eroded by ``gap`` px (an opening in
            a line does not join a region to its neighbour here).
        touching: int ``(K,)`` the labels flooded from the border ...
        outside: bool ``(H, W)`` ... and their pixels.
        dist: float ``(H, W)`` distance to the background colour, RGB units.
        candidate: bool ``(H, W)`` the (strict) candidates before erosion.
        gap: the erosion, px; each region is grown back by it through the candidates.
        match: a region the flood without erosion does not reach either must have a median
            distance of at most this (it *is* the background colour, not a shaded highlight);
            every region must have at least ``ENCLOSED_MIN_PIXELS``.
        reach: px; a region's edge pixels this close to ``outside`` (square neighbourhood) are at
            the character's outline, and with ``SUBJECT_EDGE_SHARE`` of its edge there it is the
            character's own. ``outside`` is first grown ``reach`` px through light pixels (within
            ``RIM_DISTANCE`` of the background colour, not in a region): a white area's shaded
            rim is not an outline, however wide.

    Returns:
        Bool ``(H, W)``: the gap regions (not the character's own areas of that colour).
    """
    top = int(labels.max())
    ids = np.setdiff1d(np.arange(1, top + 1), touching)
    result = np.zeros(labels.shape, bool)
    if not ids.size:
        return result
    flood, _ = ndimage.label(candidate)  # the flood without erosion: which regions it reaches
    reached_label = present(flood[outside], int(flood.max()))
    # Work inside the regions' bounding box, widened by what the steps below look across.
    pad = gap + 2 * reach + 2
    rows = np.flatnonzero(np.isin(labels, ids).any(axis=1))
    cols = np.flatnonzero(np.isin(labels, ids).any(axis=0))
    window = (slice(max(0, rows[0] - pad), rows[-1] + pad + 1),
              slice(max(0, cols[0] - pad), cols[-1] + pad + 1))
    part = labels[window]
    regions = np.where(np.isin(part, ids), part, 0)
    grown = np.where(candidate[window], ndimage.grey_dilation(regions, size=(2 * gap + 1,) * 2), 0)
    ids = ids[np.bincount(grown.ravel(), minlength=top + 1)[ids] >= ENCLOSED_MIN_PIXELS]
    if not ids.size:
        return result
    grown[~np.isin(grown, ids)] = 0
    inside = grown > 0
    medians = np.asarray(ndimage.median(dist[window][inside], grown[inside], ids))
    reached = reached_label[flood[window][inside]]
    through_opening = np.asarray(ndimage.maximum(reached, grown[inside], ids)) > 0
    around = ndimage.grey_dilation(grown, size=(3, 3))
    edge = (around > 0) & ~inside
    light = (dist[window] <= RIM_DISTANCE) & (regions == 0)
    rim_side = ndimage.binary_dilation(outside[window], iterations=reach, mask=light)
    at_outline = near(rim_side | outside[window], reach)
    share = np.asarray(ndimage.mean(at_outline[edge], around[edge], ids))
    subject = ((medians <= match) | through_opening) & (share < SUBJECT_EDGE_SHARE)
    result[window] = np.isin(grown, ids[subject])
    return result


def loose_remnants(back: np.ndarray, loose: np.ndarray, strict: np.ndarray) -> np.ndarray:
    """Loose candidates the background reaches that hold no white area of the character.

    The loose candidates not yet background, cut into 8-connected components (scipy's
    ``label``), that touch the background: a component with under ``ENCLOSED_MIN_PIXELS`` strict
    candidates is an edge's fringe (anti-aliasing, JPEG ringing; 12–30 RGB units off the
    background colour) and is background; one with more reaches into a white area the strict
    flood left to the character (a belly behind its shaded rim) and stays.

    Args:
        back: bool ``(H, W)`` the background so far.
        loose: bool ``(H, W)`` candidates within the key's threshold.
        strict: bool ``(H, W)`` candidates within the strict threshold.

    Returns:
        Bool ``(H, W)``: the remnants, never True on ``back``.
    """
    rest = loose & ~back
    labels, n = ndimage.label(rest, structure=np.ones((3, 3), bool))
    if n == 0:
        return rest
    free = np.bincount(labels[strict & rest], minlength=n + 1) < ENCLOSED_MIN_PIXELS
    free &= present(labels[near(back, 1) & rest], n)  # reached from the background
    free[0] = False
    return free[labels]


def dead_ends(rest: np.ndarray, passable: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Narrow background cracks the eroded flood skipped: the background too.

    A crack between two parts of the character (2 px of background between a leg and a strap)
    closes under the erosion as an opening in the outline does; unlike an opening, nothing wide
    lies behind it. So a component of the remaining candidates that touches the background and
    holds no pixel that survived the erosion is background.

    Args:
        rest: bool ``(H, W)`` candidates not yet background.
        passable: bool ``(H, W)`` the eroded candidates.
        back: bool ``(H, W)`` the background so far.

    Returns:
        Bool ``(H, W)``: the cracks.
    """
    labels, n = ndimage.label(rest)
    if n == 0:
        return rest
    dead = present(labels[ndimage.binary_dilation(back) & rest], n)
    dead &= ~present(labels[passable & rest], n)
    dead[0] = False
    return dead[labels]


def peel_fringe(back: np.ndarray, dist: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Grow the background into the anti-aliased fringe pixels that are less than half covered.

    A pixel is fringe when it is not a candidate (farther from the background colour than the
    key's threshold) yet under ``FRINGE_COVERAGE`` of the largest distance within ``FRINGE_PX``
    px (the solid colour it is a mix with). Growth goes ``FRINGE_PX`` steps from the background
    and only through such pixels, so it never crosses a line or enters the character.

    Returns:
        A new bool ``(H, W)`` background mask, a superset of ``back``.
    """
    solid = ndimage.maximum_filter(dist, size=3)  # float32; see mixed_pixels
    fringe = ~candidate & (dist < FRINGE_COVERAGE * solid)
    return ndimage.binary_dilation(back, iterations=FRINGE_PX, mask=fringe) | back


def mixed_pixels(back: np.ndarray, dist: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Character pixels near the background whose colour is partly the background's.

    Within ``MIXED_REACH`` px of ``back``: not candidates, and under ``FRINGE_COVERAGE`` of the
    largest distance in their 5 × 5 px (less than half covered, by the mixing model above).

    Returns:
        Bool ``(H, W)``, never True on ``back``.
    """
    solid = ndimage.maximum_filter(dist, size=5)
    return near(back, MIXED_REACH) & ~back & ~candidate & (dist < FRINGE_COVERAGE * solid)
