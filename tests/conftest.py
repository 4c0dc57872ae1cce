"""Shared test settings: paths to the repository, the shared images and the bundled example."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_IMAGES = REPO.parent / "shared" / "images"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_images() -> list[Path]:
    """Every character image in ../shared/images (PNG with alpha and the JPEG on white)."""
    images = sorted(p for p in SHARED_IMAGES.iterdir() if p.suffix.lower() in {".png", ".jpg", ".jpeg"})
    assert images, f"no images found in {SHARED_IMAGES}"
    return images
