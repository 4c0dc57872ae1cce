"""A Pixal3D folder that is wrong in a way the runner cannot fix: a port
whose module exits the process at import (a module-level ``parse_args()``), and a file given
as the folder. Both end as ``pixal3d_missing`` naming the folder and what is wrong — in a run
and in ``runner check`` — never as ``worker_crashed`` or "does not exist"."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from standin import PORT_DIR

_EXIT_AT_IMPORT = "import argparse\nargparse.ArgumentParser().parse_args(['--not-an-option'])\n"


@pytest.fixture
def exiting_port(tmp_path, monkeypatch):
    """A copy of the stand-in port whose generate_mps.py calls parse_args() at import (its
    weights in the cache: the run's precheck finds them, and the worker imports the port)."""
    from standin import make_weights
    for key, value in make_weights(tmp_path / "weights", scale=1e-4).env.items():
        monkeypatch.setenv(key, value)
    port = tmp_path / "Pixal3D-mac"
    shutil.copytree(PORT_DIR, port, ignore=shutil.ignore_patterns("__pycache__"))
    script = port / "generate_mps.py"
    script.write_text(script.read_text() + "\n" + _EXIT_AT_IMPORT)
    return port


def test_a_port_that_exits_at_import_is_named_in_a_run(rt, character, exiting_port, tmp_path):
    fin = rt.run([character, "-o", tmp_path / "out.glb", "--backend", "pixal3d",
                  "--pixal3d-dir", exiting_port])
    last = fin.last()
    assert last["kind"] == "pixal3d_missing" and fin.returncode == 32, fin.stderr[-2000:]
    assert str(exiting_port) in last["message"] and "exits the process" in last["message"]
    assert "parse_args" in last["message"] and "__main__" in last["hint"]


def test_a_port_that_exits_at_import_is_named_by_check(rt, exiting_port):
    proc = subprocess.run([sys.executable, "-m", "runner", "check", "--backend", "pixal3d",
                           "--pixal3d-dir", str(exiting_port)], capture_output=True, text=True,
                          timeout=300, env=rt.env(), cwd=rt.REPO)
    report = json.loads(proc.stdout)
    assert report["event"] == "check" and proc.returncode == 32, proc.stdout + proc.stderr[-2000:]
    verdict = report["backends"]["pixal3d"]
    assert not verdict["ok"] and "exits the process" in verdict["reason"]


def test_a_file_given_as_the_folder_says_it_is_a_file(rt, character, tmp_path):
    given = tmp_path / "generate_mps.py"
    given.write_text("# a file, not the port's folder\n")
    fin = rt.run([character, "-o", tmp_path / "out.glb", "--backend", "pixal3d",
                  "--pixal3d-dir", given])
    last = fin.last()
    assert last["kind"] == "pixal3d_missing", fin.stderr[-2000:]
    assert str(given) in last["message"] and "is a file, not a folder" in last["message"]
    assert "does not exist" not in last["message"]
