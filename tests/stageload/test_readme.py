"""The README's stageload example is extracted from README.md and run exactly as written."""
from __future__ import annotations

import re
import subprocess
import sys

HEADING = "## stageload: only the current stage's models in memory"


def readme_block(readme: str) -> str:
    """The first ```python block of the stageload section (error if the section or block is
    gone)."""
    assert HEADING in readme, f"README.md lost its section {HEADING!r}"
    section = readme.split(HEADING, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)\n```", section, re.S)
    assert match, "the stageload section of README.md has no ```python block"
    return match.group(1)


def test_readme_example_runs(repo_root, tmp_path):
    code = readme_block((repo_root / "README.md").read_text(encoding="utf-8"))
    assert "StagedModels" in code and code.count("\n") >= 15
    script = tmp_path / "readme_example.py"
    script.write_text(code + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"README example failed:\n{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    assert "model 'encoder' was released by stage 'decode'" in out
    lines = out.splitlines()
    assert "load encoder 4160" in lines and "reload decoder 4352" in lines
    assert "ready decode 4160" in lines
