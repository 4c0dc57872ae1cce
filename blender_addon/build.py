"""Build the installable extension zip: ``python -m blender_addon.build --out dist``.

Layout of ``dist/image_to_mesh-<version>.zip`` (Blender's extension format: the manifest and the
add-on's ``__init__.py`` at the top of the archive —
https://docs.blender.org/manual/en/latest/advanced/extensions/getting_started.html)::

    blender_manifest.toml        the repository's top-level manifest
    __init__.py, *.py            the add-on package (blender_addon/, without this build script)
    runtime/runner/…             the runner and stageload packages, started by the add-on as
    runtime/stageload/…          `python -m runner` with PYTHONPATH=<extension>/runtime
    runtime/build_info.json      version, and the .venv Python of the repository built from
                                 (the add-on's default runner interpreter when it exists)

The runtime packages sit in ``runtime/`` rather than next to ``__init__.py`` so that the add-on's
own module files never shadow a module of the runner's interpreter on its PYTHONPATH.

Written with :mod:`zipfile` rather than ``blender --command extension build`` because the build
must work on a machine with only the ``.venv`` (no Blender binary); the tests validate the result
with Blender's own extension validator and install it with Blender's own operator.
"""
from __future__ import annotations

import argparse
import json
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ADDON_DIR = REPO / "blender_addon"
MANIFEST = REPO / "blender_manifest.toml"
RUNTIME_PACKAGES = ("runner", "stageload")
EXCLUDED_ADDON_FILES = {"build.py"}
REQUIRED_MANIFEST_KEYS = ("schema_version", "id", "version", "name", "tagline", "maintainer",
                          "type", "blender_version_min", "license")


class BuildError(RuntimeError):
    """The extension cannot be built; the message says what is missing."""


def read_manifest(path: Path = MANIFEST) -> dict:
    """The parsed manifest (dict). Raises :class:`BuildError` when it is missing, not TOML, or
    lacks a key Blender requires (schema 1.0.0)."""
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise BuildError(f"{path} is missing") from None
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path} is not valid TOML: {exc}") from None
    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in data]
    if missing:
        raise BuildError(f"{path} lacks {', '.join(missing)}")
    return data


def _files(root: Path):
    """Every file under ``root`` except caches, sorted (a reproducible archive order)."""
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"):
            yield p


def build(out_dir: Path, repo: Path = REPO) -> Path:
    """Write ``out_dir/<id>-<version>.zip`` and return its path (an existing zip of the same
    version is replaced: it is a build product, not a user's file).

    Raises :class:`BuildError` when the manifest or a runtime package is missing."""
    manifest = read_manifest(repo / "blender_manifest.toml")
    addon_dir = repo / "blender_addon"
    if not (addon_dir / "__init__.py").is_file():
        raise BuildError(f"{addon_dir}/__init__.py is missing")
    for pkg in RUNTIME_PACKAGES:
        if not (repo / pkg).is_dir():
            raise BuildError(f"{repo / pkg} is missing; the extension must carry it")
    venv_python = repo / ".venv" / "bin" / "python"
    info = {
        "version": manifest["version"],
        "source": str(repo),
        "venv_python": str(venv_python) if venv_python.exists() else None,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{manifest['id']}-{manifest['version']}.zip"
    tmp = target.with_suffix(".zip.part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(repo / "blender_manifest.toml", "blender_manifest.toml")
        for f in _files(addon_dir):
            rel = f.relative_to(addon_dir)
            if rel.as_posix() in EXCLUDED_ADDON_FILES:
                continue
            zf.write(f, rel.as_posix())
        for pkg in RUNTIME_PACKAGES:
            for f in _files(repo / pkg):
                zf.write(f, f"runtime/{f.relative_to(repo).as_posix()}")
        zf.writestr("runtime/build_info.json", json.dumps(info, indent=2) + "\n")
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--out DIR`` (default ``dist``). Prints the zip's path; exit 1 with one
    line on failure."""
    ap = argparse.ArgumentParser(prog="python -m blender_addon.build", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="dist", type=Path, help="output folder (default: dist)")
    ns = ap.parse_args(argv)
    try:
        path = build(ns.out)
    except (BuildError, OSError) as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
