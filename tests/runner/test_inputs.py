"""runner.images.reading in-process: each bad input of SPEC §3 gets its own kind; each odd but valid
input is normalised to 8-bit RGBA the right way (values checked, not just the mode)."""
import numpy as np
import pytest

from meshfacts.errors import KINDS, RunnerError
from runner.images.reading import MIN_SIDE, load_image


@pytest.mark.parametrize("name, kind", [
    ("zero", "input_empty"), ("text", "not_an_image"), ("truncated", "image_truncated"),
    ("bomb", "image_too_large"), ("tiny", "image_too_small"),
    ("transparent", "image_transparent"),
])
def test_bad_input_kind(samples, name, kind):
    with pytest.raises(RunnerError) as info:
        load_image(samples[name])
    err = info.value
    assert err.kind == kind
    assert err.exit_code == KINDS[kind].exit_code
    assert samples[name].name in err.message  # says which file
    assert err.hint and err.hint.endswith(".")


def test_missing_and_folder(tmp_path):
    with pytest.raises(RunnerError) as info:
        load_image(tmp_path / "nope.png")
    assert info.value.kind == "input_missing"
    with pytest.raises(RunnerError) as info:
        load_image(tmp_path)
    assert info.value.kind == "not_an_image"


def test_grayscale_expanded(samples):
    im, info = load_image(samples["gray"])
    assert (im.mode, info.mode, info.had_alpha) == ("RGBA", "L", False)
    px = np.asarray(im)
    assert (px[..., 0] == px[..., 1]).all() and (px[..., 3] == 255).all()


def test_palette_keeps_transparency(samples):
    im, info = load_image(samples["palette"])
    assert info.mode == "P" and info.had_alpha
    a = np.asarray(im)[..., 3]
    assert a[0, 0] == 0 and a[im.height * 2 // 3, im.width // 2] == 255


def test_16_bit_scaled_not_clipped(samples):
    im, info = load_image(samples["gray16"])
    assert info.mode.startswith("I;16")
    px = np.asarray(im)
    assert px[2, 2, 0] == 128            # 32768 / 65535 * 255, rounded
    assert px[20, 2, 0] == 255           # white background stays white
    assert px[im.height * 2 // 3, im.width // 2, 0] < 200  # the dark body is not clipped to 255


def test_cmyk_jpeg_converted(samples):
    im, info = load_image(samples["cmyk"])
    assert info.mode == "CMYK" and im.mode == "RGBA"
    r, g, b, a = im.getpixel((2, 2))
    assert min(r, g, b) > 230 and a == 255   # white background stays white after CMYK→RGB
    r, g, b, _ = im.getpixel((im.width // 2, im.height * 2 // 3))
    assert b > r + 60                          # the blue body stays blue


@pytest.mark.parametrize("name", ["gif", "webp"])
def test_animated_first_frame(samples, name):
    im, info = load_image(samples[name])
    assert info.frames == 3
    r, g, b, _ = im.getpixel((im.width // 2, im.height * 2 // 3))
    assert b > r and b > g  # the first frame's blue body, not the red or green ones


def test_exif_orientation_applied(samples):
    im, info = load_image(samples["exif"])
    assert info.orientation == 6
    assert (info.width, info.height) == (128, 192) == im.size
    r, g, b, _ = im.getpixel((im.width // 2, 2))   # the red bar is now at the top
    assert r > 200 and g < 80 and b < 80
    r, g, b, _ = im.getpixel((2, im.height // 2))  # and not at the left
    assert not (r > 200 and g < 80)


def test_non_ascii_path(samples):
    im, info = load_image(samples["unicode"])
    assert im.size == (704, 704) and info.had_alpha
    assert "漢字" in info.path


def test_min_side_is_documented():
    assert f"{MIN_SIDE} px" in KINDS["image_too_small"].summary


def test_damaged_header(tmp_path):
    """A PNG signature followed by garbage: Pillow's header parser raises OSError inside
    Image.open — still our own kind, not a traceback."""
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 10)
    with pytest.raises(RunnerError) as info:
        load_image(bad)
    assert info.value.kind == "image_truncated"


def _float_tiff(path, values):
    from PIL import Image

    Image.fromarray(np.asarray(values, dtype=np.float32), "F").save(path)
    return path


def _figure(low: float, high: float) -> np.ndarray:
    """A 64 × 48 grey picture: background ``high``, a body of ``low`` in the lower middle."""
    values = np.full((64, 48), high, np.float64)
    values[30:60, 14:34] = low
    return values


@pytest.mark.parametrize("low, high, dark, light, note", [
    (0.25, 1.0, 64, 255, "values 0..1 scaled by 255"),
    (40.0, 250.0, 40, 250, "values within 0..255 kept"),
    (-2.0, 1022.0, 0, 255, "values -2..1022 stretched to 0..255"),
])
def test_float_tiff_converted_with_its_scale_noted(tmp_path, low, high, dark, light, note):
    """A 32-bit float TIFF (mode F) becomes 8-bit grey by the documented scale, said in the
    notes; the dark body stays dark and the background light (values, not only the mode)."""
    im, info = load_image(_float_tiff(tmp_path / "f.tif", _figure(low, high)))
    assert (info.mode, im.mode, im.size) == ("F", "RGBA", (48, 64))
    px = np.asarray(im)
    assert px[45, 24, 0] == dark and px[45, 24, 0] == px[45, 24, 2]
    assert px[2, 2, 0] == light
    assert (px[..., 3] == 255).all()
    assert info.notes == [f"32-bit float (F) converted to 8 bits: {note}"]


def test_float_tiff_with_nan_pixels_counts_them(tmp_path):
    values = _figure(0.25, 0.75)
    values[0, :3] = np.nan
    values[1, 0] = np.inf
    im, info = load_image(_float_tiff(tmp_path / "f.tif", values))
    px = np.asarray(im)
    assert px[0, 0, 0] == 0 and px[1, 0, 0] == 0 and px[2, 2, 0] == 191  # 0.75 × 255, rounded
    assert info.notes[0].endswith("; 4 NaN or infinite pixels set to 0"), info.notes


@pytest.mark.parametrize("top, body, light, note", [
    (200, 64, 200, "values within 0..255 kept"),
    (65535, 16384, 255, "values 0..65535 scaled by 255/65535"),
    (4_000_000, 1_000_000, 255, "values 0..4e+06 stretched to 0..255"),
])
def test_32_bit_integer_grey_is_scaled_not_clipped(tmp_path, top, body, light, note):
    """Mode I (32-bit integer, a TIFF): 8-bit data kept, 16-bit data scaled as 16-bit, and a
    wider range stretched — never clipped to white."""
    from PIL import Image

    values = np.full((64, 48), top, np.int32)
    values[30:60, 14:34] = body
    values[0, 0] = 0
    path = tmp_path / "i.tif"
    Image.fromarray(values, "I").save(path)
    im, info = load_image(path)
    px = np.asarray(im)
    assert info.mode == "I" and px[2, 2, 0] == light
    assert px[45, 24, 0] == round(body * light / top)
    assert info.notes == [f"32-bit integer (I) converted to 8 bits: {note}"]


def test_a_mode_without_a_conversion_stays_unsupported(tmp_path):
    """CIELAB (a TIFF Pillow reads as mode LAB) has no conversion to RGB in Pillow: refused
    with its own kind, naming the mode."""
    from PIL import Image

    path = tmp_path / "lab.tif"
    Image.new("LAB", (64, 64), (50, 10, 10)).save(path)
    with pytest.raises(RunnerError) as info:
        load_image(path)
    assert info.value.kind == "image_unsupported" and "'LAB'" in info.value.message
