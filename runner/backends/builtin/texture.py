"""Base-colour texture from the input pixels (stage ``texture``).

The texture holds two blocks. The **front**: the silhouette's bounding box (2 % margin) at full
resolution from the texture's top-left corner. Colours come only from the matte's
``colour_mask`` (opaque pixels for an alpha matte; the keyed matte shrunk by 2 px, whose edge
pixels are mixed with the background), by weighted resampling (colour·weight and weight
resampled separately, then divided). Every texel that has no trusted colour gets the colour of
the nearest one (scipy's Euclidean distance transform), so texture filtering and mip-maps at the
silhouette's edge never pull in a dark or white halo.

The **back**: the same front, blurred (a Gaussian of ``BACK_BLUR`` of the silhouette's longer
side, normalised by the trusted weight so no fill colour leaks in) and squeezed to
``BACK_SQUEEZE`` of its width beside the front (or of its height below it, for a silhouette wider
than tall). The back sheet samples it, so seen from behind the body shows the front's colours
mirrored but no face or other detail (docs/builtin.md). The squeeze is along the axis the two
blocks share, so a wall triangle between a front and a back vertex interpolates along one texel
row (or column): at the rim it shows a blend of that height's colours, not a stripe of unrelated
texels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image
from scipy import ndimage

from .matte import Matte

#: the smallest base-colour texture written, px (the product's floor).
MIN_TEXTURE_SIZE = 512
#: the largest accepted, px: 4096 px costs about 1 GB at peak and 10 s here; beyond that the
#: input's detail (a few hundred to a few thousand px) gains nothing.
MAX_TEXTURE_SIZE = 4096
#: a texel whose footprint is at least this fraction trusted keeps its own resampled colour.
MIN_TEXEL_WEIGHT = 0.5
#: the back block's width (or height) relative to the front's; the front keeps its full
#: resolution when the silhouette is at most 1 / (1 + this) = 0.8 as wide as tall (or tall as wide).
BACK_SQUEEZE = 0.25
#: the back's blur: Gaussian sigma as a fraction of the silhouette's longer side. A face is about
#: 10–15 % of a character's height and its features 1–5 %: at 4 % eyes and mouth are gone while
#: hair, skin and clothes keep their colours.
BACK_BLUR = 0.04
#: the blur is computed at this fraction of the front's resolution, then scaled up bilinearly
#: (a blur of sigma ≥ 20 px at 512 px needs no finer grid; at 4096 px it keeps the cost small).
BLUR_RESOLUTION = 1 / 8
#: texels between the front and the back block.
GUTTER = 4
#: the front is resampled from the input padded out to its whole (square) box when that array
#: holds at most this many times (input pixels + texture side²) float32 values, else from a
#: window (:func:`box_resampler`). Measured: the shared pictures (up to about 1:3) need 0.04–5.4
#: (at texture 4096–512); 40 × 8000 px needs 20–590, and padded whole it peaked at 2.7 GiB.
PAD_BUDGET = 8


@dataclass
class Texture:
    """The base-colour texture and where the input image sits in it.

    Attributes:
        image: RGB ``PIL.Image`` of ``size × size`` px.
        x0, y0: input-pixel coordinates (pixel edges) at the texture's top-left corner.
        scale: texels per input pixel (the front block).
        axis: 1 when the back block sits right of the front (squeezed in x), 0 when below it.
        offset: texels from the texture's left (axis 1) or top (axis 0) edge to the back block.
    """

    image: Image.Image
    x0: float
    y0: float
    scale: float
    axis: int
    offset: int

    def uv(self, x: np.ndarray, y: np.ndarray, back: np.ndarray | None = None) -> np.ndarray:
        """Texture coordinates ``(N, 2)`` of input-pixel positions, trimesh's convention (v up).

        Args:
            x, y: float ``(N,)`` input-pixel coordinates.
            back: bool ``(N,)`` True where the vertex is on the back sheet (samples the blurred
                back block), or None for all front.
        """
        tx = (x - self.x0) * self.scale
        ty = (y - self.y0) * self.scale
        if back is not None:
            if self.axis == 1:
                tx = np.where(back, self.offset + tx * BACK_SQUEEZE, tx)
            else:
                ty = np.where(back, self.offset + ty * BACK_SQUEEZE, ty)
        size = self.image.width
        return np.stack([tx / size, 1.0 - ty / size], axis=1)


def plan_layout(box: tuple[int, int, int, int], size: int) -> tuple[float, float, float, int, int]:
    """Where the front and back blocks go in a ``size × size`` texture.

    Args:
        box: the silhouette's bounding box ``(r0, r1, c0, c1)``, input pixels (ends exclusive).
        size: texture side, px.

    Returns:
        ``(scale, x0, y0, axis, offset)`` as in :class:`Texture`: the largest scale at which the
        front and its squeezed back fit, side by side or stacked, whichever is larger.
    """
    r0, r1, c0, c1 = box
    fw, fh = (c1 - c0) * 1.04 + 2, (r1 - r0) * 1.04 + 2
    beside = min(size / fh, (size - GUTTER) / (fw * (1 + BACK_SQUEEZE)))
    below = min(size / fw, (size - GUTTER) / (fh * (1 + BACK_SQUEEZE)))
    axis = 1 if beside >= below else 0
    scale = max(beside, below)
    offset = int(np.ceil((fw if axis == 1 else fh) * scale)) + GUTTER
    return scale, (c0 + c1) / 2 - fw / 2, (r0 + r1) / 2 - fh / 2, axis, offset


def make_texture(rgba: np.ndarray, matte: Matte, size: int) -> Texture:
    """Build the base-colour texture (front block, then the blurred back block beside it).

    Args:
        rgba: uint8 ``(H, W, 4)`` input pixels.
        matte: the matte stage's result (same H, W).
        size: texture side, px; raised to ``MIN_TEXTURE_SIZE`` if smaller.

    Raises:
        ValueError: ``size`` above ``MAX_TEXTURE_SIZE``.

    Returns:
        A :class:`Texture` laid out by :func:`plan_layout`.
    """
    if int(size) > MAX_TEXTURE_SIZE:
        raise ValueError(f"texture size {size} px is above the built-in backend's maximum of "
                         f"{MAX_TEXTURE_SIZE} px; use --texture-size {MAX_TEXTURE_SIZE} or less")
    size = max(int(size), MIN_TEXTURE_SIZE)
    mask = matte.mask
    trusted = matte.colour_mask if matte.colour_mask.any() else mask
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    bbox = (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1)
    scale, x0, y0, axis, offset = plan_layout(bbox, size)
    out, valid = front_block(rgba, trusted, (x0, y0, x0 + size / scale, y0 + size / scale), size)
    # The front block's extent in texels, and the back block squeezed along ``axis``.
    fh = int(np.ceil(((bbox[1] - bbox[0]) * 1.04 + 2) * scale))
    fw = int(np.ceil(((bbox[3] - bbox[2]) * 1.04 + 2) * scale))
    sigma = BACK_BLUR * max(bbox[1] - bbox[0], bbox[3] - bbox[2]) * scale
    shape = (fh,
             int(np.ceil(fw * BACK_SQUEEZE))) if axis == 1 else (int(np.ceil(fh * BACK_SQUEEZE)),
                                                                 fw)
    back = blurred_back(out[:fh, :fw], valid[:fh, :fw], sigma, shape)
    if axis == 1:
        out[:fh, offset:offset + shape[1]] = back[:, : size - offset]
    else:
        out[offset:offset + shape[0], :fw] = back[: size - offset]
    return Texture(Image.fromarray(out, "RGB"), float(x0), float(y0), float(scale), axis, offset)


def front_block(rgba: np.ndarray, trusted: np.ndarray, box: tuple[float, float, float, float],
                size: int) -> tuple[np.ndarray, np.ndarray]:
    """The input's ``box`` (input pixels, may reach past the image) resampled to ``size × size``.

    Colour·weight and weight are resampled by :func:`box_resampler`, whose memory follows the
    input's pixels and ``size``, not the box (the box is square, its side the silhouette's
    longer one: a tall, thin image padded out to it cost its longest side squared).

    Returns:
        ``(texels, valid)``: uint8 ``(size, size, 3)`` colours, every texel without a trusted
        colour given the nearest trusted one's; bool ``(size, size)`` the texels with their own.
    """
    rows, cols, resample = box_resampler(trusted.shape, box, size)
    weight = trusted[rows, cols].astype(np.float32)
    w = resample(weight)
    valid = w >= MIN_TEXEL_WEIGHT
    if not valid.any():
        valid = w > 0
    # Nearest trusted texel of every texel (int32 index arrays), then one channel at a time so
    # the peak stays a few size² float32 arrays (a 4096 px texture: about 0.6 GB).
    ny, nx = ndimage.distance_transform_edt(~valid, return_distances=False, return_indices=True)
    nearest = (ny * size + nx).ravel()  # int32: size ≤ 4096, so < 2³¹
    del ny, nx
    inverse = 1.0 / np.maximum(w, 1e-6)
    del w
    out = np.empty((size, size, 3), np.uint8)
    for k in range(3):
        channel = resample(rgba[rows, cols, k] * weight)
        channel *= inverse
        np.clip(np.rint(channel, out=channel), 0, 255, out=channel)
        out[..., k] = np.take(channel.ravel(), nearest).reshape(size, size)
        del channel
    return out, valid


def box_resampler(shape: tuple[int, int], box: tuple[float, float, float, float],
                  size: int) -> tuple[slice, slice, Callable]:
    """How to resample ``box`` of an input of ``shape`` to ``size × size`` texels with Pillow.

    Pillow's ``resize(box=…)`` takes a box only inside the image, and pads nothing itself (it
    renormalises a filter clipped at the image's edge, which would extend edge pixels), so the
    input is padded with zeros (no weight). Two ways, equal up to Pillow's float rounding (a
    texel channel may differ by 1 of 255; ``tests/runner/test_builtin_thin.py``,
    ``test_window_equals_whole_box``):

    * **whole**: the input padded out to the whole box, one resize. Used when that array holds
      at most ``PAD_BUDGET`` × (input pixels + ``size``²) values — every picture that is not
      much thinner than the box (the method's output before the window existed, byte for byte).
    * **window**: only the texels whose filter can reach an input pixel are resampled, from
      only the pixels they reach (:func:`filter_window`); the rest are 0. For a tall, thin
      image: a 300 × 16000 px one padded whole was a 5.9 GiB array.

    Args:
        shape: the input's ``(H, W)``.
        box: ``(x0, y0, x1, y1)`` input pixels (pixel edges), square, may reach past the input.
        size: texels along each side.

    Returns:
        ``(rows, cols, resample)``: the input's rows and columns to pass, and a function from a
        float32 ``(rows, cols)`` channel of them to float32 ``(size, size)`` texels.
    """
    h, w = shape
    x0, y0, x1, y1 = box
    filt = Image.Resampling.BOX if (x1 - x0) > size else Image.Resampling.BILINEAR
    pad = whole_box_pad(shape, box, size)
    if pad is not None:
        shifted = (x0 + pad, y0 + pad, x1 + pad, y1 + pad)

        def resample(channel: np.ndarray) -> np.ndarray:
            padded = np.pad(channel.astype(np.float32), pad)
            return np.array(Image.fromarray(padded, "F").resize((size, size), filt, box=shifted))

        return slice(0, h), slice(0, w), resample
    rows, cols, pads, texels, sub_box = filter_window(box, shape, size, filt)
    part = (texels[1].stop - texels[1].start, texels[0].stop - texels[0].start)

    def resample(channel: np.ndarray) -> np.ndarray:
        padded = np.pad(channel.astype(np.float32), pads)
        out = np.zeros((size, size), np.float32)
        out[texels] = np.asarray(Image.fromarray(padded, "F").resize(part, filt, box=sub_box))
        return out

    return rows, cols, resample


def whole_box_pad(shape: tuple[int, int], box: tuple[float, float, float, float],
                  size: int) -> int | None:
    """Zero pixels on every side that pad an input of ``shape`` ``(H, W)`` out to ``box``
    (``(x0, y0, x1, y1)``, input pixels) with 2 to spare, or None when that array would hold
    more than ``PAD_BUDGET`` × (input pixels + ``size``²) values (:func:`box_resampler`)."""
    h, w = shape
    pad = int(np.ceil(max(0.0, -box[0], -box[1], box[2] - w, box[3] - h))) + 2
    return pad if (h + 2 * pad) * (w + 2 * pad) <= PAD_BUDGET * (h * w + size * size) else None


def _support(per_texel: float, filt: Image.Resampling) -> int:
    """Input pixels a texel's filter reaches on each side of its centre, rounded up, plus 2:
    Pillow's support (BOX 0.5, BILINEAR 1.0, times the input pixels per texel when that is
    over 1; Pillow's ``Resample.c``) and its rounding of the bounds to whole pixels."""
    base = 0.5 if filt == Image.Resampling.BOX else 1.0
    return int(np.ceil(base * max(1.0, per_texel))) + 2


def filter_window(box: tuple[float, float, float, float], shape: tuple[int, int], size: int,
                  filt: Image.Resampling) -> tuple[slice, slice, tuple, tuple, tuple]:
    """Which of ``size × size`` texels resampled from ``box`` can reach the input, and from where.

    Args:
        box: ``(x0, y0, x1, y1)`` input pixels (pixel edges), square, may reach past the input.
        shape: the input's ``(H, W)``.
        size: texels along each side of the box.
        filt: Pillow's filter (BOX or BILINEAR).

    Returns:
        ``(rows, cols, pad, texels, sub_box)``: the input's rows and columns to copy;
        ``((top, bottom), (left, right))`` zero pixels to add around them (``np.pad``'s form);
        the texels' ``(rows, cols)`` slices whose filter can hold an input pixel; and their part
        of the box in the padded copy's pixels, for Pillow's ``resize(box=…)`` (which takes a box
        only inside the image). The copy reaches past that part by the filter's whole reach, so
        no texel's filter is clipped (Pillow renormalises a clipped one): each texel equals the
        same texel of the input padded with zeros out to the whole box.
    """
    reach = _support((box[2] - box[0]) / size, filt)
    crop, pad, texels, sub = [], [], [], []
    for lo, hi, length in ((box[1], box[3], shape[0]), (box[0], box[2], shape[1])):
        step = (hi - lo) / size
        # Texels whose centre lies within ``reach`` of an input pixel (one spare each side).
        first = min(max(0, int(np.floor((-reach - lo) / step - 0.5))), size - 1)
        last = max(min(size, int(np.ceil((length + reach - lo) / step - 0.5)) + 1), first + 1)
        a = lo if first == 0 else lo + first * step
        b = hi if last == size else lo + last * step
        start, stop = int(np.floor(a)) - reach, int(np.ceil(b)) + reach
        crop.append(slice(max(0, start), min(length, stop)))
        pad.append((max(0, -start), max(0, stop - length)))
        texels.append(slice(first, last))
        sub.append((a - start, b - start))
    (ya, yb), (xa, xb) = sub
    return crop[0], crop[1], tuple(pad), tuple(texels), (xa, ya, xb, yb)


def blurred_back(front: np.ndarray, valid: np.ndarray, sigma: float,
                 shape: tuple[int, int]) -> np.ndarray:
    """The back block: the front's trusted colours, Gaussian-blurred, resized to ``shape``.

    Normalised convolution (scipy.ndimage.gaussian_filter of colour·weight over that of the
    weight) at ``BLUR_RESOLUTION`` of the front's resolution, so only the character's own colours
    are averaged; texels the blur does not reach take the nearest blurred colour; then Pillow's
    bilinear resize to ``shape``.

    Args:
        front: uint8 ``(h, w, 3)`` the front block's texels.
        valid: bool ``(h, w)`` those with their own (trusted) colour.
        sigma: the blur, front texels.
        shape: ``(rows, cols)`` of the back block.

    Returns:
        uint8 ``(rows, cols, 3)``.
    """
    h, w = valid.shape
    low = (max(1, round(w * BLUR_RESOLUTION)), max(1, round(h * BLUR_RESOLUTION)))

    def shrink(channel: np.ndarray) -> np.ndarray:
        return np.asarray(Image.fromarray(channel.astype(np.float32), "F").resize(low,
                                                                                  Image.Resampling.BOX))

    weight = valid.astype(np.float32)
    den = ndimage.gaussian_filter(shrink(weight), sigma * BLUR_RESOLUTION)
    reached = den > 1e-3
    if not reached.any():
        reached = np.ones_like(reached)
        den = np.ones_like(den)
    ny, nx = ndimage.distance_transform_edt(~reached, return_distances=False, return_indices=True)
    out = np.empty((shape[0], shape[1], 3), np.uint8)
    for k in range(3):
        num = ndimage.gaussian_filter(shrink(front[..., k] * weight), sigma * BLUR_RESOLUTION)
        colour = (num / np.maximum(den, 1e-6))[ny, nx]
        big = Image.fromarray(colour.astype(np.float32), "F").resize(shape[::-1],
                                                                     Image.Resampling.BILINEAR)
        out[..., k] = np.clip(np.rint(np.asarray(big)), 0, 255)
    return out
