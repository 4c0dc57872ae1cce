"""One default per option, whichever way a job starts: with every job option left at its
default, the same image gives byte-identical GLBs from ``python -m runner``, the panel's
Generate (the built extension in the real ``bpy``, driving a real runner) and ``headless.py``
— for the built-in backend and for the stand-in Pixal3D port (its export through the bounded
engine, the default). A default that differed between the command line, the panel and the
headless script (a seed, a texture side) would show as different bytes."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.blender.test_addon import REPO, built_zip, scenario  # noqa: F401  (fixture)
from tests.pixal3d.conftest import rgb_image, standin_dir, standin_weights  # noqa: F401

pytestmark = pytest.mark.blender
HEADLESS = REPO / "blender_addon" / "headless.py"


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _env(extra: dict) -> dict:
    return {**os.environ, **extra}


def _three_ways(image, work: Path, zip_path: Path, backend: str, place: list[str], env: dict,
                pixal3d_dir: str = "") -> dict[str, Path]:
    """The GLB of each way in: the runner's command line, the panel's Generate, headless.py —
    each given only the backend (and the Pixal3D folder: a place, not an option), each
    running the runner in this interpreter (the panel through its Runner Python preference):
    the bundled wheels' other library versions would change the bytes for another reason
    (trimesh 4 writes a scene root node that trimesh 5 does not)."""
    runner_out, headless_out = work / "runner" / "a.glb", work / "headless" / "a.glb"
    done = subprocess.run([sys.executable, "-m", "runner", str(image), "-o", str(runner_out),
                           "--backend", backend, *place], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, str(HEADLESS), str(image), "--glb", str(headless_out),
                           "--backend", backend, *place], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (work / "panel").mkdir()
    panel = scenario("defaults", zip_path, work / "panel", str(image), backend, pixal3d_dir,
                     sys.executable, timeout=900, env={k: v for k, v in env.items()
                                               if os.environ.get(k) != v})
    assert panel["final"]["status"] == "done" and panel["finished"], panel["final"]
    argv = panel["argv"]
    # the panel said its defaults aloud; they are the runner's own
    assert argv[argv.index("--seed") + 1] == "42", argv
    assert argv[argv.index("--texture-size") + 1] == "1024", argv
    return {"runner": runner_out, "panel": Path(panel["output"]), "headless": headless_out}


def test_the_builtin_backend_makes_the_same_glb_every_way(built_zip, shared_images,  # noqa: F811
                                                          tmp_path):
    image = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    glbs = _three_ways(image, tmp_path, built_zip, "builtin", [], _env({}))
    digests = {way: _digest(path) for way, path in glbs.items()}
    assert len(set(digests.values())) == 1, digests


@pytest.mark.slow
def test_the_standin_pixal3d_makes_the_same_glb_every_way(  # noqa: F811
        built_zip, standin_weights, standin_dir, rgb_image, tmp_path):  # noqa: F811
    env = _env({**standin_weights.env, "PIXAL3D_DEVICE": "cpu",
                "PIXAL3D_STANDIN_EXPORT_SCALE": "0"})
    glbs = _three_ways(rgb_image, tmp_path, built_zip, "pixal3d",
                       ["--pixal3d-dir", str(standin_dir)], env, str(standin_dir))
    digests = {way: _digest(path) for way, path in glbs.items()}
    assert len(set(digests.values())) == 1, digests
