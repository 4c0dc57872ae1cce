"""Contracts that other parts rely on: the documented error table, the stage plan, the light
supervisor (no torch), the registry's answer for a backend that is not installed."""
import re
import subprocess
import sys

from meshfacts.errors import KINDS, RunnerError
from meshfacts.job_options import JobOptions
from runner import backends


def test_protocol_table_matches_errors_py(repo_root):
    text = (repo_root / "runner" / "PROTOCOL.md").read_text(encoding="utf-8")
    section = text.split("## Error kinds and exit codes", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d+) \|", section, flags=re.M))
    assert {k: int(v) for k, v in rows.items()} == {k: v.exit_code for k, v in KINDS.items()}


def test_user_docs_table_matches_errors_py(repo_root):
    """docs/runner.md's table (exit | kind | what to do): every kind, each with its own code."""
    docs = (repo_root / "docs" / "runner.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", docs, flags=re.M)
    assert len(rows) == len({kind for _, kind in rows}), "a kind listed twice"
    assert {kind: int(code) for code, kind in rows} == {k: v.exit_code for k, v in KINDS.items()}


def test_exit_codes_unique_and_hints_present():
    codes = [k.exit_code for k in KINDS.values()]
    assert len(codes) == len(set(codes))
    for kind, spec in KINDS.items():
        assert spec.hint.strip(), kind
    assert RunnerError("cancelled", "x").exit_code == 130


def test_stage_plans_match_the_backends():
    """The registry's static plan (the supervisor announces it in `hello` without importing
    the backend) is each installed backend module's own STAGES."""
    import importlib

    checked = 0
    for name in backends.names():
        entry = backends.get(name)
        if entry.installed():
            module = importlib.import_module(entry.module)
            assert entry.planned_stages() == list(module.STAGES), name
            checked += 1
    assert checked >= 1


def test_a_backend_that_is_not_installed_says_so():
    ghost = backends.Backend(name="ghost", module="runner.backends.no_such_backend",
                             load=lambda: None, title="not here", stages=("a",),
                             install_hint="Install it.")
    assert not ghost.installed()
    assert ghost.check() == {"ok": False, "reason": "not installed", "hint": "Install it."}


def test_pixal3d_entry_options():
    entry = backends.get("pixal3d")
    assert [o.flag for o in entry.options] == ["--pixal3d-dir", "--pipeline-type", "--load",
                                               "--keep-resident", "--prefetch", "--working-memory",
                                               "--export-process",
                                               "--export-profile", "--export-engine",
                                               "--export-budget", "--keep-asset",
                                               "--decimation-target",
                                               "--remesh", "--remesh-resolution",
                                               "--allow-dense-grid-sample", "--strict-export"]
    def hand_over(backend, **given):
        return backends.get(backend).hand_over_of(JobOptions.parse(backend, given))

    # decided once, from the job's options: the export step's name travels in the worker job
    assert hand_over("pixal3d").step.name == "bounded"
    assert hand_over("pixal3d", export_process="in-process", export_engine="port") is None
    # the bounded engine (the default) exports without torch, the port's with it
    assert not hand_over("pixal3d").step.needs_torch
    assert hand_over("pixal3d", export_engine="port").step.needs_torch
    assert hand_over("builtin") is None
    assert backends.export_step_named("port") is hand_over("pixal3d", export_engine="port").step


def test_backend_exception_kinds():
    """An exception's own `kind` wins over the module's ERRORS table; the hint travels. The
    Pixal3D adapter's exception classes carry no runner kind: runner/backends/pixal3d/errors.py
    maps each class (looked up along the MRO) to one."""
    import types

    from runner.backends import pixal3d as backend
    from runner.worker.run import _classify
    from stageload.pixal3d.errors import (
        EmptyMeshError,
        KnobRefused,
        PortError,
        PortMissing,
        PortVersionError,
    )

    class OwnKind(Exception):
        def __init__(self, message, kind, hint):
            super().__init__(message)
            self.kind, self.hint = kind, hint

    module = types.SimpleNamespace(ERRORS={"OwnKind": "pixal3d_missing"})
    err = _classify(OwnKind("version 9 unknown", "pixal3d_version", "Use 1.x."), module)
    assert (err.kind, err.hint) == ("pixal3d_version", "Use 1.x.")
    err = _classify(OwnKind("gone", None, "Pass --pixal3d-dir."), module)
    assert err.kind == "pixal3d_missing" and err.exit_code == 32
    cases = [(PortMissing("gone", "Pass --pixal3d-dir."), "pixal3d_missing", 32),
             (PortVersionError("drifted", "Update."), "pixal3d_version", 33),
             (KnobRefused("PIXAL3D_CPU_MODELS", "Unset it."), "usage", 2),
             (EmptyMeshError("empty", "Retry with --steps 1."), "empty_mesh", 46)]
    for exc, kind, code in cases:
        assert not hasattr(exc, "kind") and isinstance(exc, (PortError, EmptyMeshError))
        err = _classify(exc, backend)
        assert (err.kind, err.exit_code, err.hint) == (kind, code, exc.hint), exc


def test_supervisor_modules_do_not_import_torch():
    code = ("import sys, runner.__main__, runner.commands.cli, runner.job.run, "
            "runner.commands.batch, runner.commands.check, runner.images.reading, "
            "runner.job.outputs, stageload.guard, stageload.meter, "
            "stageload.trace, stageload.summary; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # control: the same probe does see torch when it is imported
    out = subprocess.run([sys.executable, "-c", "import sys, torch; print('torch' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_worker_output_never_reaches_stdout(rt):
    """The worker points fd 1 at stderr before anything runs: a print from Python and a raw
    write(1) (what a native library does) both land on stderr; stdout stays empty, and the
    events still arrive on their own pipe."""
    import json
    import os

    code = ("import os, sys, runner.worker.run as w\n"
            "fd = int(sys.argv[1])\n"
            "w.main(['--events-fd', str(fd), '--probe'])\n"
            "print('STRAY PRINT')\n"
            "os.write(1, b'RAW WRITE\\n')\n")
    r, wfd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", code, str(wfd)], pass_fds=(wfd,),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rt.env(),
                            start_new_session=True)
    os.close(wfd)
    with os.fdopen(r) as pipe:
        events = [json.loads(line) for line in pipe]
    out, err = proc.communicate(timeout=120)
    assert out == b""
    assert b"STRAY PRINT" in err and b"RAW WRITE" in err
    assert [e["event"] for e in events] == ["probe"]


def test_emitter_writes_utf8_whatever_the_locale(rt, tmp_path):
    """Under a Latin-1 locale, a path with CJK characters still comes out as UTF-8 JSON."""

    env = dict(rt.env(), LANG="en_US.ISO-8859-1", LC_ALL="C", PYTHONIOENCODING="latin-1",
               PYTHONUTF8="0")
    proc = subprocess.run([sys.executable, "-m", "runner", str(tmp_path / "漢字 ö.png"), "-o",
                           str(tmp_path / "a.glb")], stdin=subprocess.DEVNULL,
                          capture_output=True, env=env, cwd=rt.REPO, timeout=60)
    lines = proc.stdout.decode("utf-8").splitlines()
    import json

    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["hello", "error"]
    assert events[-1]["kind"] == "input_missing" and "漢字 ö.png" in events[-1]["message"]
