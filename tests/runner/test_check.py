"""`python -m runner check`, and an interpreter without torch or without Pillow: a real
virtual environment made here whose site-packages holds links to Pillow, NumPy and psutil of
the project's environment, and nothing else (no torch)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_check_reports_python_torch_devices_backends(rt):
    fin = rt.run(["check"])
    assert fin.returncode == 0, fin.stderr[-2000:]
    assert fin.kinds() == ["check"]
    c = fin.last()
    assert c["python"]["executable"] == rt.PY and c["python"]["version"].startswith("3.")
    import torch

    assert c["torch"] == {"version": torch.__version__, "ok": True}
    assert set(c["devices"]) == {"cpu", "cuda", "mps"}
    assert c["devices"]["cpu"]["available"] is True
    assert c["devices"]["cuda"]["available"] == torch.cuda.is_available()
    assert c["backends"]["builtin"]["ok"] is True and c["ok"] is True
    pix = c["backends"]["pixal3d"]
    if not pix["ok"]:
        assert pix["reason"] and pix["hint"]


def test_check_at_a_terminal_answers_a_person_first():
    """At a terminal: the lines for a person on stdout, no 1.5 KB JSON line before them (and
    not the same lines again on stderr); ``--json`` there gives the event."""
    from .test_console import run_at_terminal
    code, lines, stderr = run_at_terminal(["check"])
    assert code == 0, stderr
    assert lines[0].startswith("Python ") and "torch" in lines[0]
    assert "builtin: ok" in lines and lines[-1] == "ready for builtin"
    assert not any(line.lstrip().startswith("{") for line in lines)
    assert "check:" not in stderr
    code, lines, _ = run_at_terminal(["check", "--json"])
    assert code == 0 and len(lines) == 1 and '"event":"check"' in lines[0]


def test_a_check_usage_error_at_a_terminal_is_one_line_for_a_person(tmp_path):
    """A mistake in check's options at a terminal: the stderr line says it, no error event on
    stdout (a pipe, or --json, still gets it: test_check_deep, test_deep_options_are_checked_
    first)."""
    from .test_console import run_at_terminal
    report = tmp_path / "kept.json"
    report.write_text("{}", encoding="utf-8")
    for args in (["check", "--backend", "nope"],
                 ["check", "--backend", "pixal3d", "--deep", "--report", report]):
        code, lines, stderr = run_at_terminal(args)
        assert code == 2 and "runner: usage:" in stderr, stderr
        assert not any(line.lstrip().startswith("{") for line in lines), lines
    assert "never replaces a file" in stderr and report.read_text(encoding="utf-8") == "{}"
    code, lines, _ = run_at_terminal(["check", "--backend", "nope", "--json"])
    assert code == 2 and '"event":"error"' in lines[-1]


def test_check_for_a_backend_that_cannot_run(rt, tmp_path, monkeypatch):
    """pixal3d without a usable port folder: `check --backend pixal3d` says no, why and what to
    do (exit 31); a run with it fails with a documented kind before any weights are read."""
    from meshfacts.errors import KINDS
    from runner import backends

    monkeypatch.delenv("PIXAL3D_DIR", raising=False)
    empty = tmp_path / "no port here"
    empty.mkdir()
    fin = rt.run(["check", "--backend", "pixal3d", "--pixal3d-dir", empty])
    assert fin.returncode in (31, 32, 33) and fin.last()["ok"] is False, fin.stderr[-2000:]
    verdict = fin.last()["backends"]["pixal3d"]
    assert verdict["ok"] is False and verdict["reason"] and verdict["hint"]
    if not backends.get("pixal3d").installed():
        assert verdict["reason"] == "not installed"
    example = Path(__file__).parents[2] / "examples" / "goblin.png"
    run = rt.run([example, "-o", tmp_path / "a.glb", "--backend", "pixal3d",
                  "--pixal3d-dir", empty])
    err = run.last()
    assert err["event"] == "error" and err["kind"] in (
        "backend_unavailable", "pixal3d_missing", "pixal3d_version"), (err, run.stderr[-2000:])
    assert run.returncode == KINDS[err["kind"]].exit_code
    # check and a run agree on the exit status for the same missing folder
    assert fin.returncode == run.returncode, (fin.last()["backends"]["pixal3d"], err)
    # a known kind: no traceback on stderr either, one clear line instead (PROTOCOL.md)
    assert "Traceback" not in run.stdout and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert f"runner: {err['kind']}: " in run.stderr
    assert not (tmp_path / "a.glb").exists()


def _venv_with_links(root: Path, modules) -> str:
    """A venv (``python -m venv --without-pip`` from the base interpreter) whose site-packages
    links ``modules`` of the project's environment and the repository, and nothing else."""
    base = getattr(sys, "_base_executable", sys.executable)
    r = subprocess.run([base, "-m", "venv", "--without-pip", str(root / "env")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a venv: {r.stderr[-300:]}")
    py = root / "env" / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(py), "-c", purelib],
                               capture_output=True, text=True, check=True).stdout.strip())
    links = root / "links"
    links.mkdir()
    for module in modules:
        pkg = Path(module.__file__).parent
        (links / pkg.name).symlink_to(pkg)
        dist = {"PIL": "pillow"}.get(pkg.name, pkg.name).lower()
        for extra in pkg.parent.glob(f"{dist}.libs"):
            (links / extra.name).symlink_to(extra)
    (site / "links.pth").write_text(f"{links}\n{Path(__file__).resolve().parents[2]}\n")
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    return str(py)


@pytest.fixture(scope="module")
def python_without_torch(tmp_path_factory):
    """Pillow, NumPy and psutil, not torch (nor SciPy/trimesh)."""
    import numpy
    import PIL
    import psutil

    py = _venv_with_links(tmp_path_factory.mktemp("venv"), (PIL, numpy, psutil))
    probe = subprocess.run([py, "-c", "import PIL, numpy, psutil, runner, stageload"],
                           capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    return py


@pytest.fixture(scope="module")
def python_builtin_only(tmp_path_factory):
    """Exactly what the built-in backend needs — NumPy, Pillow, SciPy, trimesh, psutil — and
    no torch: what Blender's own Python with the extension's wheels holds."""
    import numpy
    import PIL
    import psutil
    import scipy
    import trimesh

    return _venv_with_links(tmp_path_factory.mktemp("venv"), (PIL, numpy, psutil, scipy, trimesh))


def test_builtin_run_without_torch(rt, python_builtin_only, shared_images, tmp_path):
    """torch is imported only by backends that need it: the built-in backend runs without."""
    out = tmp_path / "a.glb"
    fin = rt.run([shared_images[0], "-o", out, "--texture-size", "512"], python=python_builtin_only)
    assert fin.returncode == 0, fin.stderr[-2000:]
    assert fin.last()["event"] == "result" and out.stat().st_size > 1000
    check = rt.run(["check"], python=python_builtin_only)
    c = check.last()
    assert check.returncode == 0 and c["torch"]["ok"] is False
    assert c["backends"]["builtin"]["ok"] is True
    assert c["backends"]["pixal3d"]["ok"] is False
    pix = rt.run(["check", "--backend", "pixal3d"], python=python_builtin_only)
    assert pix.returncode == 30 and pix.last()["backends"]["pixal3d"]["reason"] == \
        "torch cannot be imported"


def test_run_without_a_builtin_dependency(rt, python_without_torch, shared_images, tmp_path,
                                          sentinel_output):
    fin = rt.run([shared_images[0], "-o", sentinel_output, "--overwrite"],
                 python=python_without_torch)
    err = fin.last()
    assert err["kind"] == "missing_dependency" and fin.returncode == 34, (err, fin.stderr[-2000:])
    assert python_without_torch in err["message"]
    assert "cannot import trimesh" in err["message"] or "cannot import scipy" in err["message"]
    assert python_without_torch in err["hint"]
    assert err["details"]["python"] == python_without_torch
    assert "Traceback" not in fin.stdout
    assert sentinel_output.read_bytes() == b"not touched by the runner\n"
    assert not list(tmp_path.glob(".*partial*"))


def test_check_without_torch(rt, python_without_torch):
    fin = rt.run(["check"], python=python_without_torch)
    c = fin.last()
    assert fin.returncode != 0 and c["torch"]["ok"] is False and c["torch"]["version"] is None
    assert python_without_torch in c["torch"]["hint"]
    assert c["backends"]["builtin"]["ok"] is False
    reason = c["backends"]["builtin"]["reason"]
    assert "trimesh" in reason or "scipy" in reason


def test_interpreter_without_pillow(rt, tmp_path):
    """The bare base interpreter (no Pillow/NumPy/psutil): `missing_dependency`, no traceback."""
    base = getattr(sys, "_base_executable", sys.executable)
    if subprocess.run([base, "-c", "import PIL"], capture_output=True).returncode == 0:
        pytest.skip("the base interpreter has Pillow")
    fin = rt.run([tmp_path / "x.png", "-o", tmp_path / "x.glb"], python=base)
    assert fin.kinds() == ["hello", "error"]
    assert fin.last()["kind"] == "missing_dependency" and fin.returncode == 34
    assert base in fin.last()["hint"]


CHECK_USAGE = [
    # the tester's case: a run with the same options exits 2, check exited 0
    (["--backend", "pixal3d", "--pixal3d-dir", "{dir}", "--keep-resident", "abc"],
     "--keep-resident"),
    (["--backend", "pixal3d", "--keep-resident=-1G"], "--keep-resident"),
    (["--backend", "nope"], "--backend"),
    (["--pipeline-type", "2048_cascade"], "--pipeline-type"),
]


@pytest.mark.parametrize("args,flag", CHECK_USAGE, ids=[" ".join(a) for a, _ in CHECK_USAGE])
def test_check_refuses_what_a_run_refuses_in_one_error_line(rt, tmp_path, shared_images, args,
                                                            flag):
    """check validates the backend options as a run does (same kind, exit status and message),
    and answers with one line like a normal check: an `error`, no `hello` (PROTOCOL.md)."""
    args = [str(a).replace("{dir}", str(tmp_path)) for a in args]
    fin = rt.run(["check", *args], timeout=60)
    assert fin.kinds() == ["error"], (fin.kinds(), fin.stderr[-1500:])
    err = fin.last()
    assert err["kind"] == "usage" and fin.returncode == 2 == err["exit_code"]
    assert flag in err["message"] and "check --help" in err["hint"], err
    assert "Traceback" not in fin.stderr and err["message"] in fin.stderr
    if flag == "--keep-resident":  # a run with the same options: the same refusal
        run = rt.run([shared_images[0], "-o", tmp_path / "a.glb", *args], timeout=60)
        assert run.returncode == 2 and run.last()["message"] == err["message"]


def test_check_accepts_another_backends_good_options(rt, tmp_path):
    """Unlike a run, check may be given pixal3d's options without --backend pixal3d (the
    add-on's Check passes --pixal3d-dir alone): it still answers with its one `check` line."""
    fin = rt.run(["check", "--pixal3d-dir", tmp_path, "--keep-resident", "1G"], timeout=120)
    assert fin.kinds() == ["check"] and fin.returncode == 0, fin.stderr[-1500:]
    assert fin.last()["requested"] == ["builtin"]


def test_check_says_on_stderr_what_it_found(rt, tmp_path, monkeypatch):
    """`runner check` tells a person on stderr (its stdout
    stays the one JSON line the add-on's Check parses, blender_addon/config.summarize_check)."""
    from blender_addon.runner_client import config

    monkeypatch.delenv("PIXAL3D_DIR", raising=False)
    missing = tmp_path / "no such folder"
    fin = rt.run(["check", "--backend", "pixal3d", "--pixal3d-dir", missing])
    assert fin.returncode == 32 and fin.kinds() == ["check"], fin.stderr[-2000:]
    lines = [x for x in fin.stderr.splitlines() if x.startswith("runner: check: ")]
    assert lines[0].startswith("runner: check: Python 3.") and "torch" in lines[0]
    assert "runner: check: builtin: ok" in lines
    (pix,) = [x for x in lines if x.startswith("runner: check: pixal3d: ")]
    verdict = fin.last()["backends"]["pixal3d"]
    assert pix == (f"runner: check: pixal3d: cannot run: pixal3d_missing: {verdict['reason']}"
                   f" — {verdict['hint']}")
    assert str(missing) in pix
    assert lines[-1] == "runner: check: NOT ready for pixal3d"
    assert "pixal3d: not available — " in config.summarize_check(fin.stdout)

    ok = rt.run(["check"])
    assert ok.returncode == 0 and ok.kinds() == ["check"]
    assert ok.stderr.splitlines()[-1] == "runner: check: ready for builtin", ok.stderr
