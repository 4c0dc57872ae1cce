"""Fixtures for the stageload core tests.

``run_json``: run a Python snippet in a fresh interpreter and return the JSON object it printed
last. Memory checks run in their own process so that they measure only what they do: a fresh
interpreter has its own RSS and high-water mark, and reads its own baseline.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _run_json(code: str, *, cwd: Path, timeout: float = 180) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, \
        f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"subprocess printed no JSON:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def run_json():
    return _run_json
