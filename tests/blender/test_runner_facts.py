"""One source per fact between the add-on and the runner.

The add-on imports the protocol version, the error kinds with their exit codes, the options
table and the byte formatter from the stdlib-only ``meshfacts`` package the runner uses
(``blender_addon.runner_client.facts``); the copies it still keeps because their source imports
NumPy/Pillow (image suffixes) or would import the whole registry (backend names, which backends
need torch) are pinned here against the runner."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from blender_addon.background import cli as headless
from blender_addon.runner_client import config, state
from blender_addon.runner_client import facts as runtime_facts
from blender_addon.runner_client import job_spec as job

REPO = Path(__file__).resolve().parents[2]


def test_copies_equal_the_runners_facts():
    from runner import backends
    from runner.images import reading as inputs

    assert set(config.IMAGE_SUFFIXES) == set(inputs.IMAGE_SUFFIXES)
    assert tuple(job.BACKENDS) == tuple(backends.names())
    assert set(config.TORCH_BACKENDS) == {n for n in backends.names()
                                          if backends.get(n).needs_torch}


def test_facts_read_from_the_runtime_are_the_runners():
    from meshfacts import errors, units
    from runner import protocol

    assert state.PROTOCOL_VERSION == runtime_facts.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION
    assert runtime_facts.EXIT_CODES == {k: v.exit_code for k, v in errors.KINDS.items()}
    assert headless._exit("output_exists") == errors.KINDS["output_exists"].exit_code
    assert runtime_facts.format_size(5 * 2**30) == units.format_size(5 * 2**30)


def test_meshfacts_uses_the_standard_library_only():
    """Imported into Blender's process (as the installed add-on's runtime subpackage), its
    module-level code must import nothing of the project but its own modules, relatively (it
    has another package name there), and nothing outside the standard library (a function the
    add-on never calls may import more)."""
    files = sorted((REPO / "meshfacts").glob("*.py"))
    assert len(files) >= 6
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text("utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                if node.level:  # a sibling module of meshfacts, by the relative form only
                    assert node.level == 1, (rel, "import above meshfacts")
                    continue
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, (rel, name)


def test_loading_them_imports_no_runner_or_stageload_package():
    code = ("import sys, blender_addon.runner_client.facts, blender_addon.runner_client.state, "
            "blender_addon.runner_client.job_spec; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('runner', 'stageload', 'torch', 'numpy', 'bpy')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
