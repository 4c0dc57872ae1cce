"""Fixtures for the Pixal3D adapter tests: the stand-in port, its weights (written by the test
session at 1e-4 of the real sizes), the environment the port resolves them from, an RGB test
image without alpha (so the background remover runs), and shared runs of the pipeline."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from standin import PORT_DIR as STANDIN
from standin import make_weights

SCALE = 1e-4


@pytest.fixture(scope="session")
def standin_dir() -> Path:
    return STANDIN


@pytest.fixture(scope="session")
def standin_weights(tmp_path_factory):
    """Write the stand-in weights and point HF_HOME / TORCH_HOME at them for the session."""
    info = make_weights(tmp_path_factory.mktemp("pixal3d-weights"), scale=SCALE)
    old = {k: os.environ.get(k) for k in info.env}
    os.environ.update(info.env)
    yield info
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def rgb_image(tmp_path_factory, shared_images) -> Path:
    """A character composited on white, 320 px, RGB (no alpha): preprocessing must matte it."""
    from PIL import Image
    src = next(p for p in shared_images if p.name == "character_1.png")
    rgba = Image.open(src).convert("RGBA")
    rgba.thumbnail((320, 320))
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    out = tmp_path_factory.mktemp("pixal3d-image") / "character_on_white.png"
    Image.alpha_composite(white, rgba).convert("RGB").save(out)
    return out
