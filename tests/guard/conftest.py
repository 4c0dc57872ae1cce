"""Fixtures for the guard tests: a per-test tag in the environment of everything the test
starts, and a teardown that SIGKILLs whatever still carries that tag, so a failing test leaves
no process or memory hog behind."""
import os
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for guard_helpers (importlib mode)

from guard_helpers import TAG_VAR, kill_tagged  # noqa: E402


@pytest.fixture
def tag():
    """A unique tag; every process the test starts through ``env`` carries it."""
    value = "gt" + uuid.uuid4().hex[:12]
    yield value
    kill_tagged(value)


@pytest.fixture
def env(tag, tmp_path_factory):
    """Environment for subprocesses: the tag, unbuffered Python output, and a guard registry of
    the test's own (``STAGELOAD_GUARD_DIR``), so the guards a test starts see each other but not
    a guard that another program on this machine runs at the same time (its reservation would
    change the figures the test reads)."""
    registry = tmp_path_factory.mktemp("guard") / "registry"
    return dict(os.environ, **{TAG_VAR: tag, "PYTHONUNBUFFERED": "1",
                               "STAGELOAD_GUARD_DIR": str(registry)})
