"""pytest fixtures for tests that run the macOS reader against the libSystem stand-in.

A pytest plugin: tests/conftest.py names it in ``pytest_plugins`` and pyproject.toml puts this
folder on the path, so a test asks for ``mac``, ``old_mac`` or ``standin_libs`` by name and
imports nothing from here.
"""
from __future__ import annotations

import libsystem_standin as standin_mod
import pytest


@pytest.fixture(scope="session")
def standin_libs(tmp_path_factory):
    """``{"full": path, "no_interval": path}`` of the built stand-in; skipped with the reason
    when this machine has no C compiler."""
    if standin_mod.compiler() is None:
        pytest.skip("no C compiler (cc/gcc/clang) here: the libSystem stand-in cannot be built")
    return standin_mod.build(tmp_path_factory.mktemp("libsystem_standin"))


def _standin(libs, name, tmp_path, monkeypatch):
    from stageload.meter import _macos

    mac = standin_mod.Standin(libs[name], tmp_path / f"standin_{name}.state",
                              standin_mod.ISSUE_MAC)
    for key, value in mac.environ({}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(_macos, "_interval_ok", {})  # what one test learnt is not the next's
    return mac


@pytest.fixture
def mac(standin_libs, tmp_path, monkeypatch):
    """A stand-in Mac with the issue's numbers, selected for this process (environment) and for
    every subprocess started with ``mac.environ()``."""
    return _standin(standin_libs, "full", tmp_path, monkeypatch)


@pytest.fixture
def old_mac(standin_libs, tmp_path, monkeypatch):
    """The same Mac with a libSystem that lacks ``proc_reset_footprint_interval``."""
    return _standin(standin_libs, "no_interval", tmp_path, monkeypatch)
