"""A file Pillow cannot identify is told apart by what it starts with: a 32-bit floating-point
RGB TIFF (Pillow's TIFF reader has no mode for it) is ``image_unsupported`` with a hint on what
to save instead, a TIFF cut inside its header ``image_truncated``, a text file still
``not_an_image`` — each from the real ``python -m runner``. The TIFFs are written here byte by
byte (TIFF 6.0 baseline layout), as Pillow cannot write a multi-channel float TIFF."""
from __future__ import annotations

import struct

import numpy as np

SHORT, LONG = 3, 4


def float_rgb_tiff(path, width=48, height=40) -> None:
    """A little-endian, uncompressed, one-strip TIFF of ``height`` × ``width`` RGB pixels,
    32-bit IEEE floats in 0..1 (SampleFormat 3)."""
    data = np.random.default_rng(0).random((height, width, 3), dtype=np.float32).tobytes()
    tags = [(256, SHORT, 1, width), (257, SHORT, 1, height), (258, SHORT, 3, "bits"),
            (259, SHORT, 1, 1), (262, SHORT, 1, 2), (273, LONG, 1, "data"),
            (277, SHORT, 1, 3), (278, SHORT, 1, height), (279, LONG, 1, len(data)),
            (284, SHORT, 1, 1), (339, SHORT, 3, "format")]
    after = 8 + 2 + len(tags) * 12 + 4  # header, entry count, entries, next-IFD offset
    where = {"bits": after, "format": after + 6, "data": after + 12}
    out = bytearray(b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", len(tags)))
    for tag, kind, count, value in tags:
        value = where.get(value, value)
        packed = struct.pack("<HH", value, 0) if kind == SHORT and count == 1 else \
            struct.pack("<I", value)
        out += struct.pack("<HHI", tag, kind, count) + packed
    out += struct.pack("<I", 0) + struct.pack("<3H", 32, 32, 32) + struct.pack("<3H", 3, 3, 3)
    path.write_bytes(bytes(out + data))


def test_a_float_rgb_tiff_is_unsupported_not_unreadable(rt, tmp_path):
    tiff = tmp_path / "render.tif"
    float_rgb_tiff(tiff)
    fin = rt.run([tiff, "-o", tmp_path / "render.glb"])
    assert fin.returncode == 17, fin.stderr[-2000:]
    error = fin.last()
    assert error["kind"] == "image_unsupported", error
    assert error["message"] == ("render.tif is a TIFF image in a pixel format (32-bit "
                                "floating-point, 3 samples per pixel) that Pillow cannot "
                                "decode."), error
    assert "8- or 16-bit RGB or RGBA PNG or TIFF" in error["hint"]
    assert "runner: image_unsupported: " in fin.stderr
    assert not (tmp_path / "render.glb").exists()


def test_a_cut_tiff_is_truncated_and_text_is_not_an_image(rt, tmp_path):
    whole = tmp_path / "whole.tif"
    float_rgb_tiff(whole)
    cut = tmp_path / "cut.tif"
    cut.write_bytes(whole.read_bytes()[:40])  # inside the image file directory
    fin = rt.run([cut, "-o", tmp_path / "cut.glb"])
    assert fin.last()["kind"] == "image_truncated", fin.last()
    assert fin.last()["message"].startswith("cut.tif starts like a TIFF image but its header")
    text = tmp_path / "notes.png"
    text.write_text("not a picture\n")
    fin = rt.run([text, "-o", tmp_path / "notes.glb"])
    assert fin.last()["kind"] == "not_an_image", fin.last()
    assert fin.last()["message"] == "notes.png is not an image Pillow can read."


def test_a_bmp_in_a_compression_pillow_lacks_is_unsupported(rt, tmp_path):
    """A BMP whose header names compression 9 (none Pillow's BMP reader decodes)."""
    width = height = 40
    data = bytes(width * 3 * height)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 9, 0, 2835, 2835, 0, 0)
    bmp = tmp_path / "odd.bmp"
    bmp.write_bytes(b"BM" + struct.pack("<IHHI", 54 + len(data), 0, 0, 54) + info + data)
    fin = rt.run([bmp, "-o", tmp_path / "odd.glb"])
    assert fin.returncode == 17 and fin.last()["kind"] == "image_unsupported", fin.last()
    assert fin.last()["message"] == ("odd.bmp is a BMP image in a form Pillow cannot decode "
                                     "(Unsupported BMP compression (9)).")
