"""Shared test settings: the repository root and the test images (tests/data/images, in the
repository), the libSystem stand-in's fixtures (tests/macos_standin/macos_fixtures.py), strict
events (meshfacts/events.py), and how the suite splits between parallel and serial runs.

``make test`` runs the suite in two pytest calls: ``-m "not serial"`` on two workers
(pytest-xdist, ``--dist loadfile``: each file's tests stay on one worker, so a module's fixture,
e.g. a written weights folder or a bench run, is made once, as without workers), then
``-m serial`` alone. Serial (:data:`SERIAL`):

- the guard's tests, whose admissions and stops judge memory available and swap machine-wide,
  and the meter's sampling and high-water tests, which place peaks in time: a test in the
  other worker would change what they read;
- the files that start local Ray clusters: two started at once on one machine fail to start
  their GCS servers (seen with the two workers);
- the tests that compare in-process memory peaks sampled in time (the self-check's lean against
  port, 64.2 against 64.2 MiB once under the other worker's load) and those that run under an
  address-space limit, where the first allocation to fail moves with the load (once an import
  in the export's child, surfacing as ``SystemError``).

Each worker also gets a guard registry of its own (``STAGELOAD_GUARD_DIR``, unless already
set): the runner jobs of two workers would otherwise see each other as peers and wait on each
other, as two users' jobs would; the tests that exercise peers set registries of their own.
"""
import os
import shutil
import tempfile
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

#: Folders and files (relative to tests/) whose tests run alone, after the parallel run: they
#: read the whole machine's memory, swap or timing, or start local Ray clusters (module
#: docstring).
SERIAL = ("guard/", "meter/", "runner/test_cluster.py", "runner/test_cluster_auth.py",
          "blender/test_cluster_addon.py", "pixal3d/test_self_check.py",
          "pixal3d/test_memory_limit.py", "export_engine/test_child_failures.py")

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # set in pytest-xdist's worker processes
_GUARDS = None  # this worker's guard registry, removed when its session ends
if _WORKER and not os.environ.get("STAGELOAD_GUARD_DIR"):
    _GUARDS = tempfile.mkdtemp(prefix=f"guards-{_WORKER}-")
    os.environ["STAGELOAD_GUARD_DIR"] = _GUARDS


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: runs alone, after the parallel run (SERIAL)")


def pytest_sessionfinish(session, exitstatus):
    if _GUARDS:
        shutil.rmtree(_GUARDS, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Mark the tests :data:`SERIAL` names ``serial``."""
    tests = Path(__file__).resolve().parent
    for item in items:
        rel = Path(item.path).resolve().relative_to(tests).as_posix()
        if any(rel == entry or (entry.endswith("/") and rel.startswith(entry))
               for entry in SERIAL):
            item.add_marker(pytest.mark.serial)


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
