"""One source per fact between the add-on and the runner (issue 15 item 2).

The add-on reads the runner's protocol version, error kinds with their exit codes, the options
table and the byte formatter from the runner's own stdlib-only files
(``blender_addon.runtime_facts``); the copies it still keeps because their source imports
NumPy/Pillow (image suffixes) or would import the whole registry (backend names, which backends
need torch) are pinned here against the runner."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from blender_addon import config, headless, job, runtime_facts, state

REPO = Path(__file__).resolve().parents[2]


def test_copies_equal_the_runners_facts():
    from runner import backends, inputs

    assert set(config.IMAGE_SUFFIXES) == set(inputs.IMAGE_SUFFIXES)
    assert tuple(job.BACKENDS) == tuple(backends.names())
    assert set(config.TORCH_BACKENDS) == {n for n in backends.names()
                                          if backends.get(n).needs_torch}


def test_facts_read_from_the_runtime_are_the_runners():
    from runner import errors, protocol
    from stageload import units

    assert state.PROTOCOL_VERSION == runtime_facts.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION
    assert runtime_facts.EXIT_CODES == {k: v.exit_code for k, v in errors.KINDS.items()}
    assert headless._exit("output_exists") == errors.KINDS["output_exists"].exit_code
    assert runtime_facts.format_size(5 * 2**30) == units.format_size(5 * 2**30)


def test_the_files_read_by_path_use_the_standard_library_only():
    """Loaded into Blender's process by path, their module-level code must import nothing of
    the project and nothing outside the standard library (a function the add-on never calls
    may import more)."""
    for rel in ("stageload/units.py", "runner/event_schema.py", "runner/errors.py",
                "runner/options.py", "stageload/pixal3d/choices.py"):
        tree = ast.parse((REPO / rel).read_text("utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, (rel, "relative import")
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, (rel, name)


def test_loading_them_imports_no_runner_or_stageload_package():
    code = ("import sys, blender_addon.runtime_facts, blender_addon.state, blender_addon.job; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('runner', 'stageload', 'torch', 'numpy', 'bpy')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
