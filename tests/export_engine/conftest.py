"""Small assets for the engine's tests, made by ``standin.sphere_asset`` (seconds)."""
from pathlib import Path

import numpy as np
import pytest


def write_npz(path: Path, **arrays) -> Path:
    """``np.savez`` (the port's writer) of ``arrays`` at ``path``."""
    np.savez(str(path), **arrays)
    return path


@pytest.fixture(scope="session")
def small_asset(tmp_path_factory) -> Path:
    """20,480 faces, a 96³ grid (about 45,000 voxels)."""
    from standin.sphere_asset import make_sphere_asset

    return make_sphere_asset(tmp_path_factory.mktemp("asset") / "sphere.npz", subdivisions=5,
                             resolution=96)


@pytest.fixture(scope="session")
def mid_asset(tmp_path_factory) -> Path:
    """327,680 faces on a 128³ grid: each step lasts seconds (the cancel tests)."""
    from standin.sphere_asset import make_sphere_asset

    return make_sphere_asset(tmp_path_factory.mktemp("asset") / "mid.npz", subdivisions=7,
                             resolution=128)


@pytest.fixture(scope="session")
def small_arrays(small_asset) -> dict:
    """The small asset's arrays (copies: a test may change them)."""
    with np.load(small_asset) as data:
        return {key: data[key].copy() for key in data.files}


@pytest.fixture(scope="session")
def small_export(small_asset, tmp_path_factory):
    """The small asset exported at 8,000 faces and a 512² texture: (info, events, path)."""
    from bounded_export import ExportLevers, export_asset

    out = tmp_path_factory.mktemp("glb") / "sphere.glb"
    events: list = []
    info = export_asset(small_asset, out, ExportLevers(decimation_target=8000, texture_size=512),
                        emit=events.append)
    return info, events, out
