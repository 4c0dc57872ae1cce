"""Input image validation and normalisation to 8-bit RGBA, with Pillow.

``load_image(path)`` is run once per job, by the supervisor up front (so a bad file is reported
before any worker starts); the worker gets the decoded RGBA pixels on its stdin with what the
probe learnt (``read_pixels``), and hands them to the backend: the image is decoded once.

What it accepts and what it refuses (SPEC §3): a missing file, a folder, zero bytes, a file Pillow
cannot identify, a truncated or corrupt file (``verify()`` then a full ``load()``), a
decompression bomb (Pillow's ``DecompressionBombWarning`` is made an error too, so the limit is
``Image.MAX_IMAGE_PIXELS`` = 89 478 485 pixels by default), fewer than ``MIN_SIDE`` pixels on a
side, a fully transparent image — each a ``RunnerError`` of its own kind. Grayscale, palette
(with or without transparency), 1-bit, 16-bit grayscale (scaled, not clipped), CMYK and YCbCr
JPEG, premultiplied modes, animated GIF/WebP/APNG (first frame) and EXIF-rotated JPEG
(``ImageOps.exif_transpose``) are normalised to RGBA with 8 bits per channel.
"""
from __future__ import annotations

import re
import stat
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from meshfacts.errors import RunnerError
from runner.images.unreadable import explain

MIN_SIDE = 32
"""Smallest accepted width and height in pixels (after EXIF rotation)."""

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")
"""File suffixes ``batch`` picks up from a folder (case-insensitive)."""

_EXIF_ORIENTATION = 0x0112


@dataclass
class ImageInfo:
    """What ``load_image`` found: ``path`` (str), ``format`` (Pillow's, e.g. ``"PNG"``),
    ``mode`` (the file's Pillow mode before conversion), ``width``/``height`` (pixels, after
    EXIF rotation), ``frames`` (1 unless animated; only the first is used), ``had_alpha``
    (the file carries transparency: alpha channel or palette transparency), ``orientation``
    (EXIF orientation tag 1–8, 1 when absent), ``bytes`` (file size), ``notes`` (what was
    converted, for people)."""

    path: str
    format: str | None
    mode: str
    width: int
    height: int
    frames: int = 1
    had_alpha: bool = False
    orientation: int = 1
    bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-serialisable dict of the fields."""
        return asdict(self)


def _file_type(mode: int) -> str:
    """What a file that is not a regular file or folder is, in words (``os.stat`` mode)."""
    for test, words in ((stat.S_ISFIFO, "named pipe"), (stat.S_ISCHR, "character device"),
                        (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return words
    return "special file"


def _name(path: Path) -> str:
    return path.name or str(path)


def _too_large(path: Path, exc: Exception) -> RunnerError:
    """``image_too_large`` for Pillow's decompression-bomb error or warning, quoting the limit
    the runner applies (``Image.MAX_IMAGE_PIXELS``, warnings made errors) — not Pillow's own
    message, whose error variant names twice that limit. The image's pixel count comes from
    Pillow's message ("Image size (N pixels) exceeds …") when it says it."""
    found = re.search(r"\((\d+) pixels\)", str(exc))
    count = f" ({int(found.group(1)):,} pixels)" if found else ""
    return RunnerError("image_too_large", f"{_name(path)} is too large{count}: the runner opens "
                       f"images of at most {Image.MAX_IMAGE_PIXELS:,} pixels (a guard against "
                       "decompression bombs).")


def _open_checked(path: Path) -> Image.Image:
    """``Image.open`` with decompression-bomb warnings as errors; maps Pillow's failures."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(path)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_large(path, exc) from None
    except UnidentifiedImageError:  # not an image, or one in a format Pillow cannot read
        raise explain(path, _name(path)) from None
    except PermissionError:
        raise RunnerError("input_missing", f"{_name(path)} cannot be read (permission denied).",
                          "Check the file's permissions.") from None
    except Exception:  # OSError, SyntaxError, struct.error … from a format's header parser
        err = explain(path, _name(path))  # its reader's words: unsupported, or damaged
        if err.kind == "not_an_image":
            err = RunnerError("image_truncated", f"{_name(path)} starts like an image but its "
                              "header is damaged or cut short.")
        raise err from None


def _verify_and_load(path: Path) -> Image.Image:
    """Open, ``verify()`` (checksums, structure), reopen and fully decode the first frame."""
    truncated = RunnerError("image_truncated", f"{_name(path)} is truncated or damaged: "
                            "its image data ends early or fails its checksums.")
    if ImageFile.LOAD_TRUNCATED_IMAGES:  # someone relaxed Pillow globally; we must not
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set; refusing to validate")
    im = _open_checked(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im.verify()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_large(path, exc) from None
    except Exception:  # SyntaxError, OSError, struct.error … from the format's checker
        raise truncated from None
    finally:
        im.close()
    im = _open_checked(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im.seek(0)
            im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        im.close()
        raise _too_large(path, exc) from None
    except ValueError as exc:  # e.g. "Decompressed Data Too Large" from a PNG text chunk
        im.close()
        if "too large" in str(exc).lower():
            raise RunnerError("image_too_large", f"{_name(path)}: {exc}.") from None
        raise truncated from None
    except Exception:
        im.close()
        raise truncated from None
    return im


_GREY_LABELS = {"F": "32-bit float (F)", "I": "32-bit integer (I)"}


def grey_to_8_bits(values: np.ndarray, mode: str) -> tuple[np.ndarray, str]:
    """A grey image of more than 8 bits (Pillow mode ``F``: a 32-bit float TIFF; ``I``: 32-bit
    integer; ``I;16``/``I;16B``/``I;16L``: 16-bit) as 8-bit grey, and the note that says how:
    ``(uint8 array of values' shape, note)``.

    16-bit values are scaled by 255/65535. Otherwise the scale follows what the values are: a
    float image all within 0..1 — the usual range of one (linear light or a normalised
    picture) — is multiplied by 255; values all within 0..255 (an 8-bit picture in a wider
    mode) are kept; an integer image all within 0..65535 (16-bit data) is scaled by 255/65535;
    any other range (a depth or HDR map) is stretched from its smallest to its largest value
    onto 0..255 (a constant image becomes 0). NaN and ±inf pixels become 0 and are counted in
    the note. Rounded to the nearest integer. Raises nothing."""
    finite = np.isfinite(values)
    bad = int(values.size - np.count_nonzero(finite))
    low = float(values[finite].min()) if bad < values.size else 0.0
    high = float(values[finite].max()) if bad < values.size else 0.0
    sixteen = mode.startswith("I;16") or (mode == "I" and low >= 0.0 and 255.0 < high <= 65535.0)
    if sixteen:
        scaled, how = values * (255.0 / 65535.0), "values 0..65535 scaled by 255/65535"
    elif mode == "F" and low >= 0.0 and high <= 1.0:
        scaled, how = values * 255.0, "values 0..1 scaled by 255"
    elif low >= 0.0 and high <= 255.0:
        scaled, how = values, "values within 0..255 kept"
    else:
        span = high - low
        scaled = (values - low) * (255.0 / span) if span > 0 else values * 0.0
        how = f"values {low:g}..{high:g} stretched to 0..255"
    scaled = np.where(finite, scaled, 0.0)
    label = _GREY_LABELS.get(mode, f"16-bit ({mode})")
    note = f"{label} converted to 8 bits: {how}"
    if bad:
        note += f"; {bad} NaN or infinite {'pixel' if bad == 1 else 'pixels'} set to 0"
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8), note


def _to_rgba(im: Image.Image, path: Path, info: ImageInfo) -> Image.Image:
    """Convert any single-frame mode to RGBA with 8 bits per channel; fills ``info``."""
    mode = im.mode
    if mode == "RGBA":
        info.had_alpha = True
        return im.copy()
    if mode in ("LA", "PA", "RGBa", "La"):
        info.had_alpha = True
        info.notes.append(f"converted from {mode}")
        return im.convert("RGBA")
    if mode == "P":
        info.had_alpha = "transparency" in im.info
        info.notes.append("palette expanded" + (" with its transparency" if info.had_alpha else ""))
        return im.convert("RGBA")
    if mode in ("RGB", "L"):
        if mode == "L":
            info.notes.append("grayscale expanded to RGB")
        if "transparency" in im.info:  # single transparent colour (tRNS in RGB/L PNGs)
            info.had_alpha = True
        return im.convert("RGBA")
    if mode == "1":
        info.notes.append("1-bit expanded")
        return im.convert("L").convert("RGBA")
    if mode == "F" or mode.startswith("I"):  # float, 32-bit integer or 16-bit grey
        arr8, note = grey_to_8_bits(np.asarray(im).astype(np.float64), mode)
        info.notes.append(note)
        return Image.fromarray(arr8).convert("RGBA")
    if mode in ("CMYK", "YCbCr", "HSV"):
        info.notes.append(f"converted from {mode}")
        return im.convert("RGB").convert("RGBA")
    raise RunnerError("image_unsupported", f"{_name(path)} uses the image mode {mode!r}, which "
                      "the runner cannot convert to RGBA.")


def load_image(path: str | Path) -> tuple[Image.Image, ImageInfo]:
    """Validate ``path`` and return ``(image, info)``: ``image`` is a loaded Pillow image, mode
    ``RGBA``, 8 bits per channel, EXIF orientation applied, first frame only; ``info`` is an
    ``ImageInfo``.

    Raises ``RunnerError`` with kind ``input_missing``, ``input_empty``, ``not_an_image``,
    ``image_truncated``, ``image_too_large``, ``image_unsupported``, ``image_too_small`` or
    ``image_transparent`` (see ``meshfacts.errors.KINDS``).
    """
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise RunnerError("input_missing", f"{path} does not exist.") from None
    except OSError as exc:
        raise RunnerError("input_missing", f"{path} cannot be read ({exc.strerror}).") from None
    if path.is_dir():
        raise RunnerError("not_an_image", f"{path} is a folder, not an image file.",
                          "Give one image file, or use `python -m runner batch FOLDER`.")
    if not stat.S_ISREG(st.st_mode):  # never read a FIFO or a device: it may never end
        raise RunnerError("not_an_image", f"{path} is not a regular file (it is a "
                          f"{_file_type(st.st_mode)}).", "Give an image file (PNG, JPEG, "
                          "WebP …), not a device, pipe or socket.")
    if st.st_size == 0:
        raise RunnerError("input_empty", f"{_name(path)} is empty (0 bytes).")

    im = _verify_and_load(path)
    try:
        frames = int(getattr(im, "n_frames", 1) or 1)
        orientation = 1
        try:
            orientation = int(im.getexif().get(_EXIF_ORIENTATION, 1) or 1)
        except Exception:  # unreadable EXIF is not a reason to refuse the picture
            orientation = 1
        info = ImageInfo(path=str(path), format=im.format, mode=im.mode, width=im.width,
                         height=im.height, frames=frames, orientation=orientation,
                         bytes=st.st_size)
        if frames > 1:
            info.notes.append(f"first of {frames} frames used")
        if orientation not in (1,):
            try:
                rotated = ImageOps.exif_transpose(im)
            except Exception:
                raise RunnerError("image_truncated", f"{_name(path)} has EXIF orientation "
                                  f"{orientation} but it could not be applied.") from None
            info.notes.append(f"EXIF orientation {orientation} applied")
        else:
            rotated = im
        rgba = _to_rgba(rotated, path, info)
    finally:
        im.close()
    info.width, info.height = rgba.size
    if min(rgba.size) < MIN_SIDE:
        raise RunnerError("image_too_small", f"{_name(path)} is only {rgba.width} × "
                          f"{rgba.height} px; at least {MIN_SIDE} px a side is needed.")
    if rgba.getchannel("A").getextrema()[1] == 0:
        raise RunnerError("image_transparent", f"{_name(path)} is fully transparent: there is "
                          "no character to turn into a mesh.")
    return rgba, info


def read_pixels(stream, facts: dict) -> tuple[Image.Image, ImageInfo]:
    """The image ``load_image`` decoded in the supervisor, from ``stream`` (a binary file: the
    worker's stdin): ``facts`` (``ImageInfo`` as a dict, its ``width`` × ``height`` px) and
    exactly ``width * height * 4`` bytes of 8-bit RGBA, row by row. Returns ``(image, info)``
    as ``load_image`` does. Raises ``RunnerError('internal')`` when fewer bytes arrive (the
    supervisor is gone or wrote less: a bug)."""
    info = ImageInfo(**facts)
    size = info.width * info.height * 4
    data = stream.read(size)
    if len(data) != size:
        raise RunnerError("internal", f"The worker got {len(data)} of the {size} bytes of "
                          f"{_name(Path(info.path))}'s pixels from the supervisor.")
    return Image.frombytes("RGBA", (info.width, info.height), data), info


def probe_image(path: str | Path) -> ImageInfo:
    """``load_image`` without keeping the pixels: the checks and the ``ImageInfo``."""
    image, info = load_image(path)
    image.close()
    return info
