"""Why Pillow could not identify a file that starts like an image: ``Image.open`` tries every
format whose signature matches and, when all fail, says only "cannot identify image file" —
the same words for a text file and for a 32-bit floating-point RGB TIFF (a pixel format
Pillow's TIFF reader has no mode for). :func:`explain` asks the readers of the formats whose
signature the file has, one by one, and keeps what they said.
"""
from __future__ import annotations

import warnings
from pathlib import Path

from PIL import Image, TiffImagePlugin

from meshfacts.errors import RunnerError

SIGNED = ("PNG", "TIFF", "JPEG", "WEBP", "GIF", "BMP")
"""Formats whose readers are asked (each has a signature in its first 16 bytes; the input
suffixes ``inputs.IMAGE_SUFFIXES`` name exactly these)."""

UNSUPPORTED_HINT = ("Save it as an 8- or 16-bit RGB or RGBA PNG or TIFF (an image editor's "
                    "Export or Save As) and try again.")

_SAMPLE_FORMATS = {1: "unsigned integer", 2: "signed integer", 3: "floating-point"}
"""TIFF tag 339 SampleFormat values (TIFF 6.0, section 19)."""


def _tiff_layout(path: Path) -> str | None:
    """A TIFF's first image's samples in words (``32-bit floating-point, 3 samples per
    pixel``) from its tags (258 BitsPerSample, 277 SamplesPerPixel, 339 SampleFormat), or
    None when they cannot be read."""
    try:
        with open(path, "rb") as fp:
            ifd = TiffImagePlugin.ImageFileDirectory_v2(fp.read(8))
            fp.seek(ifd.next)
            ifd.load(fp)
        bits = ifd.get(258, (1,))
        kind = ifd.get(339, (1,))
        samples = ifd.get(277, 1)
        bits = bits[0] if isinstance(bits, tuple) else bits
        kind = kind[0] if isinstance(kind, tuple) else kind
        return (f"{int(bits)}-bit {_SAMPLE_FORMATS.get(int(kind), 'unknown-format')}, "
                f"{int(samples)} sample{'s' if int(samples) != 1 else ''} per pixel")
    except Exception:  # a damaged directory: the words are only a detail of the message
        return None


def _reader_error(path: Path, prefix: bytes) -> tuple[str, Exception] | None:
    """The first of ``SIGNED`` whose signature ``prefix`` (the file's first 16 bytes) has,
    and what its reader raised on ``path``; None when no signature matches (or, unexpectedly,
    the reader opens it)."""
    Image.init()
    for fmt in SIGNED:
        factory, accept = Image.OPEN.get(fmt, (None, None))
        if factory is None or (accept is not None and not accept(prefix)):
            continue
        try:
            # the reader's own warnings (e.g. "Corrupt EXIF data") say less than its error
            with warnings.catch_warnings(), open(path, "rb") as fp:
                warnings.simplefilter("ignore")
                factory(fp, str(path)).close()
        except Exception as exc:  # what the reader says is the answer we are after
            return fmt, exc
        return None
    return None


def explain(path: Path, name: str) -> RunnerError:
    """The error for ``path`` (named ``name`` in the message) that ``Image.open`` could not
    identify or open: ``image_unsupported`` when a reader of its format recognised the file but
    has no mode for its pixel format or does not support its form (a compression, a header
    type), ``image_truncated`` when the file has a format's signature
    but its header is damaged or cut short, else ``not_an_image``. Never raises."""
    try:
        with open(path, "rb") as fp:
            prefix = fp.read(16)
        found = _reader_error(path, prefix)
    except OSError:
        found = None
    if found is None:
        return RunnerError("not_an_image", f"{name} is not an image Pillow can read.")
    fmt, exc = found
    said = str(exc).lower()
    if "mode" in said:  # TIFF "unknown pixel mode", PNG "unknown mode" …
        layout = _tiff_layout(path) if fmt == "TIFF" else None
        detail = f" ({layout})" if layout else ""
        return RunnerError("image_unsupported", f"{name} is a {fmt} image in a pixel "
                           f"format{detail} that Pillow cannot decode.", UNSUPPORTED_HINT)
    # BMP "Unsupported BMP compression (9)" …; not "unknown": a cut TIFF directory is
    # "unknown data organization"
    if "unsupported" in said:
        return RunnerError("image_unsupported", f"{name} is a {fmt} image in a form Pillow "
                           f"cannot decode ({exc}).", UNSUPPORTED_HINT)
    return RunnerError("image_truncated", f"{name} starts like a {fmt} image but its header "
                       f"is damaged or cut short ({exc}).")


__all__ = ["SIGNED", "UNSUPPORTED_HINT", "explain"]
