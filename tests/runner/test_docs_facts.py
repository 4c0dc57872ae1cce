"""What the user documentation states about the product's facts matches the facts: the panel's
texture sizes (docs/blender.md) are the options table's, and the README's install list names
every runtime dependency of pyproject.toml, the export engine's included, and the cluster
extra (Ray)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from meshfacts.choices import TEXTURE_SIZES

REPO = Path(__file__).resolve().parents[2]


def test_the_panels_texture_sizes_in_blender_md_are_the_choices():
    text = (REPO / "docs" / "blender.md").read_text(encoding="utf-8")
    found = re.search(r"\*\*Texture\*\* size \(([\d /\n]+) px", text)
    assert found, "docs/blender.md names no Texture sizes"
    assert [int(n) for n in re.findall(r"\d+", found.group(1))] == list(TEXTURE_SIZES)


def test_the_readme_install_list_names_every_dependency_and_ray():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    setup = readme[readme.index("`make` creates"):readme.index("## In Blender")].lower()
    names = [re.split(r"[<>=\[ ]", dep, maxsplit=1)[0].lower()
             for dep in project["dependencies"]]
    assert [name for name in names if name not in setup] == []
    (ray,) = project["optional-dependencies"]["cluster"]
    assert ray.lower() in setup and "ray" in setup
