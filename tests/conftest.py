"""Shared test settings: the repository root and the test images (tests/data/images, in the
repository), the libSystem stand-in's fixtures (tests/macos_standin/macos_fixtures.py), and
strict events (meshfacts/events.py)."""
import os
from pathlib import Path

import pytest

from meshfacts import events as event_schema

# Every event the runner makes during the tests — in this process and in every runner, worker
# and Blender process they start, which inherit the environment — is checked against its
# declaration where it is made (meshfacts/events.py: an undeclared kind or field, a missing
# field or one of the wrong type raises there).
os.environ[event_schema.STRICT_ENV] = "1"

# The stand-in Mac's fixtures (standin_libs, mac, old_mac) for every test that asks for them by
# name; tests/macos_standin is on the path through pyproject.toml's pytest `pythonpath`.
pytest_plugins = ["macos_fixtures"]

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO / "tests" / "data" / "images"  # source and licence: SOURCE.md there


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_images() -> list[Path]:
    """Every character image in tests/data/images (PNGs with alpha and the JPEG on white), sorted
    by name; shared by the tests, never written to (copy one into tmp_path to change it)."""
    images = sorted(p for p in IMAGES.iterdir() if p.suffix.lower() in {".png", ".jpg", ".jpeg"})
    assert images, f"no images found in {IMAGES}"
    return images
