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

    Returns:
        ``(texels, valid)``: uint8 ``(size, size, 3)`` colours, every texel without a trusted
        colour given the nearest trusted one's; bool ``(size, size)`` the texels with their own.
    """
    h, w_img = trusted.shape
    x0, y0, x1, y1 = box
    pad = int(np.ceil(max(0.0, -x0, -y0, x1 - w_img, y1 - h))) + 2
    filt = Image.Resampling.BOX if (x1 - x0) > size else Image.Resampling.BILINEAR

    def resample(channel: np.ndarray) -> np.ndarray:
        # Pad with zeros (no weight) so Pillow never extends edge pixels past the image.
        padded = np.pad(channel.astype(np.float32), pad)
        shifted = (x0 + pad, y0 + pad, x1 + pad, y1 + pad)
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
    del w
    out = np.empty((size, size, 3), np.uint8)
    for k in range(3):
        channel = resample(rgba[..., k] * weight)
        channel *= inverse
        np.clip(np.rint(channel, out=channel), 0, 255, out=channel)
        out[..., k] = np.take(channel.ravel(), nearest).reshape(size, size)
        del channel
    return out, valid


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
