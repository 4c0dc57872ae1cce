"""README's demo section says what ``make demo`` writes:
every file of the Makefile's ``demo`` recipe — the GLB, ``.blend``, preview and the trace the
runner keeps next to the GLB — and, since the recipe passes ``--overwrite``, that a second run
replaces them."""
from __future__ import annotations

import re
from pathlib import Path

from runner.job.outputs import default_trace_path


def _demo_recipe(repo_root: Path) -> str:
    makefile = (repo_root / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert match, "the Makefile has no demo recipe"
    return match.group(1)


def _demo_section(repo_root: Path) -> str:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    section = readme.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.split())  # the words, whatever the line breaks


def test_the_readme_names_every_file_make_demo_writes(repo_root):
    recipe = _demo_recipe(repo_root)
    section = _demo_section(repo_root)
    written = {flag: Path(value).name for flag, value in
               re.findall(r"--(glb|blend|preview) (\S+)", recipe)}
    assert set(written) == {"glb", "blend", "preview"}, recipe
    names = list(written.values()) + [default_trace_path(Path(written["glb"])).name]
    for name in names:
        assert f"`{name}`" in section or f"{name}`" in section, name
    if "--overwrite" in recipe:
        assert "replaces" in section and "--overwrite" in section, section
