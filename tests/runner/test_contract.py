"""Contracts that other parts rely on: the documented error table, the stage plan, the light
supervisor (no torch), the registry's answer for a backend that is not installed."""
import re
import subprocess
import sys

from runner import backends
from runner.errors import KINDS, RunnerError


def test_protocol_table_matches_errors_py(repo_root):
    text = (repo_root / "runner" / "PROTOCOL.md").read_text(encoding="utf-8")
    section = text.split("## Error kinds and exit codes", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d+) \|", section, flags=re.M))
    assert {k: int(v) for k, v in rows.items()} == {k: v.exit_code for k, v in KINDS.items()}
    docs = (repo_root / "docs" / "runner.md").read_text(encoding="utf-8")
    for kind, spec in KINDS.items():
        assert f"`{kind}`" in docs and str(spec.exit_code) in docs, kind


def test_exit_codes_unique_and_hints_present():
    codes = [k.exit_code for k in KINDS.values()]
    assert len(codes) == len(set(codes))
    for kind, spec in KINDS.items():
        assert spec.hint.strip(), kind
    assert RunnerError("cancelled", "x").exit_code == 130


def test_every_event_name_is_documented(repo_root):
    text = (repo_root / "runner" / "PROTOCOL.md").read_text(encoding="utf-8")
    for name in ("hello", "input", "guard", "stage", "ready", "load", "reload", "release",
                 "progress", "memory", "gpu", "result", "error", "batch_item", "batch_done",
                 "check"):
        assert f"`{name}`" in text, name


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
                             title="not here", stages=("a",), install_hint="Install it.")
    assert not ghost.installed()
    assert ghost.check() == {"ok": False, "reason": "not installed", "hint": "Install it."}


def test_pixal3d_entry_options():
    entry = backends.get("pixal3d")
    assert [o.flag for o in entry.options] == ["--pixal3d-dir", "--pipeline-type", "--load",
                                               "--keep-resident"]


def test_backend_exception_kinds():
    """An exception's own `kind` wins over the module's ERRORS table; the hint travels."""
    import types

    from runner.worker import _classify

    class PortError(Exception):
        def __init__(self, message, kind, hint):
            super().__init__(message)
            self.kind, self.hint = kind, hint

    module = types.SimpleNamespace(ERRORS={"PortError": "pixal3d_missing"})
    err = _classify(PortError("version 9 unknown", "pixal3d_version", "Use 1.x."), module)
    assert (err.kind, err.hint) == ("pixal3d_version", "Use 1.x.")
    err = _classify(PortError("gone", None, "Pass --pixal3d-dir."), module)
    assert err.kind == "pixal3d_missing" and err.exit_code == 32


def test_supervisor_modules_do_not_import_torch():
    code = ("import sys, runner.__main__, runner.cli, runner.supervisor, runner.batch, "
            "runner.check, runner.inputs, runner.outputs, stageload.guard, stageload.meter, "
            "stageload.trace, stageload.summary; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # control: the same probe does see torch when it is imported
    out = subprocess.run([sys.executable, "-c", "import sys, torch; print('torch' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
