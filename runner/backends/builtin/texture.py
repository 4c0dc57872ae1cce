"""Base-colour texture from the input pixels (stage ``texture``).

The texture is a square crop around the silhouette, resampled to ``size × size`` px. Colours come
only from the matte's ``colour_mask`` (opaque pixels for an alpha matte; the keyed matte shrunk
by 2 px, whose edge pixels are mixed with the background), by
weighted resampling (colour·weight and weight resampled separately, then divided). Every texel
that has no trusted colour gets the colour of the nearest one (scipy's Euclidean distance
transform), so texture filtering and mip-maps at the silhouette's edge never pull in a dark or
white halo. The back of the body uses the same texels (see docs/builtin.md).
"""
from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class Texture:
    """The base-colour texture and where it sits in the input image.

    Attributes:
        image: RGB ``PIL.Image`` of ``size × size`` px.
        x0, y0: input-pixel coordinates of the crop's top-left corner (pixel edges).
        span: input pixels covered by the crop's side (float).
    """

    image: Image.Image
    x0: float
    y0: float
    span: float

    def uv(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Texture coordinates ``(N, 2)`` of input-pixel positions, trimesh's convention (v up)."""
        return np.stack([(x - self.x0) / self.span, 1.0 - (y - self.y0) / self.span], axis=1)


def make_texture(rgba: np.ndarray, matte: Matte, size: int) -> Texture:
    """Build the base-colour texture.

    Args:
        rgba: uint8 ``(H, W, 4)`` input pixels.
        matte: the matte stage's result (same H, W).
        size: texture side, px; raised to ``MIN_TEXTURE_SIZE`` if smaller.

    Raises:
        ValueError: ``size`` above ``MAX_TEXTURE_SIZE``.

    Returns:
        A :class:`Texture` whose crop is the silhouette's bounding box made square (centred),
        with a margin of 2 % of its side so edge texels have room to bleed.
    """
    if int(size) > MAX_TEXTURE_SIZE:
        raise ValueError(f"texture size {size} px is above the built-in backend's maximum of "
                         f"{MAX_TEXTURE_SIZE} px; use --texture-size {MAX_TEXTURE_SIZE} or less")
    size = max(int(size), MIN_TEXTURE_SIZE)
    mask = matte.mask
    trusted = matte.colour_mask
    if not trusted.any():
        trusted = mask
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    span = max(r1 - r0, c1 - c0) * 1.04 + 2
    x0 = (c0 + c1) / 2 - span / 2
    y0 = (r0 + r1) / 2 - span / 2
    box = (x0, y0, x0 + span, y0 + span)
    h, w_img = mask.shape
    pad_needed = int(np.ceil(max(0.0, -x0, -y0, x0 + span - w_img, y0 + span - h))) + 2
    filt = Image.Resampling.BOX if span > size else Image.Resampling.BILINEAR

    def resample(channel: np.ndarray) -> np.ndarray:
        # The crop may reach past the image; pad with zeros (no weight) so Pillow never
        # extends edge pixels into it.
        pad = pad_needed
        padded = np.pad(channel.astype(np.float32), pad)
        shifted = (box[0] + pad, box[1] + pad, box[2] + pad, box[3] + pad)
        return np.array(Image.fromarray(padded, "F").resize((size, size), filt, box=shifted))

    weight = trusted.astype(np.float32)
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
    del w, valid
    out = np.empty((size, size, 3), np.uint8)
    for k in range(3):
        channel = resample(rgba[..., k] * weight)
        channel *= inverse
        np.clip(np.rint(channel, out=channel), 0, 255, out=channel)
        out[..., k] = np.take(channel.ravel(), nearest).reshape(size, size)
        del channel
    image = Image.fromarray(out, "RGB")
    return Texture(image=image, x0=float(x0), y0=float(y0), span=float(span))
