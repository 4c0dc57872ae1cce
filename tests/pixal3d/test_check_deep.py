"""``python -m runner check --backend pixal3d --deep`` end to end on the stand-in port, on the
CPU, real processes: in a pipe one ``self_check`` event per part then the ``check`` event with
``deep``, the report written where asked (never over an existing file); at a terminal one line
per part, human first; a lean part broken in the worker (a mutation run by the test hook) named
and a non-zero exit; without weights ``weights_missing`` and what it would have checked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "tests" / "runner" / "worker_hook"
#: Run by the self-check worker only (``--self-check`` in its command line): NAF's output at
#: the sampled pixels one per cent off — the lean conditioning broken on purpose.
BREAK_CONDITIONING = r'''
import sys
if "--self-check" in sys.argv:
    from stageload.pixal3d.lean import attention as _la
    _at = _la.upsample_at
    _la.upsample_at = lambda *a, **k: _at(*a, **k) * 1.01
'''


def _env(standin_weights, **more) -> dict:
    return {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
            "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), str(REPO)]), **more}


def _check(args, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "runner", "check", "--backend", "pixal3d",
                           *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_deep_check_in_a_pipe_sends_a_part_each_and_writes_its_report(standin_dir,
                                                                     standin_weights, tmp_path):
    report = tmp_path / "my report.json"
    proc = _check(["--pixal3d-dir", standin_dir, "--deep", "--report", report],
                  _env(standin_weights))
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = _events(proc.stdout)
    assert [e["event"] for e in events] == ["self_check"] * 3 + ["check"]
    assert [e["part"] for e in events[:3]] == ["conditioning", "attention", "decoder"]
    assert all(e["status"] == "agrees" for e in events[:3])
    deep = events[-1]["deep"]
    assert deep["ok"] is True and deep["ran"] is True and deep["report"] == str(report)
    assert [p["part"] for p in deep["parts"]] == ["conditioning", "attention", "decoder"]
    assert deep["backends"]["attention"] == "naive" and deep["metal"]
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["deep"] == deep and written["event"] == "check"
    assert "runner: check: conditioning: agrees" in proc.stderr  # the lines, on stderr here
    # what the add-on's deep Check shows from the same answer
    from blender_addon.runner_client.config import summarize_check
    shown = summarize_check(proc.stdout).splitlines()
    assert "Deep check: every lean part agrees with the port" in shown
    assert [line.split(":")[0] for line in shown if line.startswith(
        ("conditioning:", "attention:", "decoder:"))] == ["conditioning", "attention", "decoder"]
    assert f"report: {report}" in shown
    # the same report path again: refused before anything runs, the file kept
    before = report.read_bytes()
    again = _check(["--pixal3d-dir", standin_dir, "--deep", "--report", report],
                   _env(standin_weights))
    assert again.returncode == 2 and "never replaces a file" in again.stderr
    assert report.read_bytes() == before and _events(again.stdout)[-1]["kind"] == "usage"


def test_deep_check_at_a_terminal_prints_one_line_per_part(standin_dir, standin_weights):
    from tests.runner.test_console import run_at_terminal
    code, lines, stderr = run_at_terminal(
        ["check", "--backend", "pixal3d", "--pixal3d-dir", standin_dir, "--deep"],
        timeout=600, environ=_env(standin_weights))
    assert code == 0, stderr[-3000:]
    assert not any(line.startswith("{") for line in lines)
    parts = [line for line in lines if line.split(":")[0] in ("conditioning", "attention",
                                                             "decoder")]
    assert [p.split(":")[0] for p in parts] == ["conditioning", "attention", "decoder"]
    assert all(": agrees " in p and " · port " in p and " · lean " in p for p in parts)
    assert any(line.startswith("back ends the port chose: attention naive") for line in lines)
    assert lines[-1] == "self-check: every lean part agrees with the port"


def test_a_broken_lean_part_is_named_and_the_check_fails(standin_dir, standin_weights):
    proc = _check(["--pixal3d-dir", standin_dir, "--deep"],
                  _env(standin_weights, RUNNER_TEST_SUPERVISOR_HOOK=BREAK_CONDITIONING))
    assert proc.returncode == 51, proc.stderr[-3000:]
    events = _events(proc.stdout)
    statuses = {e["part"]: e["status"] for e in events if e["event"] == "self_check"}
    assert statuses == {"conditioning": "differs", "attention": "agrees", "decoder": "agrees"}
    check = events[-1]
    assert check["ok"] is False and check["deep"]["error"]["kind"] == "self_check_failed"
    assert "conditioning differs" in check["deep"]["error"]["message"]
    assert "self-check FAILED: conditioning differs" in proc.stderr


def test_without_weights_it_exits_weights_missing_and_says_what_it_would_check(
        standin_dir, standin_weights, tmp_path):
    empty = tmp_path / "no weights"
    empty.mkdir()
    proc = _check(["--pixal3d-dir", standin_dir, "--deep"],
                  _env(standin_weights, HF_HOME=str(empty)), timeout=300)
    assert proc.returncode == 36, proc.stderr[-3000:]
    check = _events(proc.stdout)[-1]
    assert check["deep"]["ran"] is False and check["deep"]["error"]["kind"] == "weights_missing"
    assert "texture pass at 256x256" in check["deep"]["would_check"]
    assert "deep check not run:" in proc.stderr and "it would check the conditioning" in \
        proc.stderr


@pytest.mark.parametrize("args, words", [(["--deep"], "Add --backend pixal3d"),
                                         (["--backend", "pixal3d", "--report", "r.json"],
                                          "goes with --deep")])
def test_deep_options_are_checked_first(args, words, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "runner", "check", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and words in proc.stderr
