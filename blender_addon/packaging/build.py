"""Build the installable extension zips: ``python -m blender_addon.packaging.build --out dist``.

One zip per platform, ``dist/image_to_mesh-<version>-<platform>.zip`` (``linux_x64``,
``macos_arm64``: the names and the split Blender's own ``extension build
--split-platforms`` uses), laid out in Blender's extension format (the manifest and the add-on's
``__init__.py`` at the top of the archive —
https://docs.blender.org/manual/en/latest/advanced/extensions/getting_started.html)::

    blender_manifest.toml        the repository's manifest plus `platforms = [<platform>]` and
                                 `wheels = ["./wheels/…whl", …]` for that platform
    __init__.py, */*.py          the add-on package (blender_addon/, without packaging/: the build)
    wheels/*.whl                 SciPy, Pillow, trimesh, psutil, matplotlib … for the platform
                                 (blender_addon/packaging/wheels.txt, fetched by
                                 blender_addon.packaging.wheels);
                                 Blender installs them when it installs the zip
    runtime/runner/…             the runner, stageload, the export engine and the shared facts,
    runtime/stageload/…          started by the add-on as `python -m runner` with
    runtime/bounded_export/…     PYTHONPATH=<extension>/runtime; the add-on itself imports
    runtime/meshfacts/…          runtime/meshfacts as its subpackage (runner_client/facts.py)
    runtime/build_info.json      version and platform

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

from . import wheels as _wheels

REPO = Path(__file__).resolve().parents[2]
ADDON_DIR = REPO / "blender_addon"
MANIFEST = REPO / "blender_manifest.toml"
RUNTIME_PACKAGES = ("runner", "stageload", "meshfacts", "bounded_export")
#: Folders of the add-on the zip leaves out: the build itself (it runs from the checkout).
EXCLUDED_ADDON_DIRS = ("packaging",)
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


def platform_manifest(text: str, platform: str, wheel_names: list[str]) -> str:
    """The manifest ``text`` with ``platforms = [platform]`` and ``wheels`` (paths
    ``./wheels/<name>``, forward slashes as Blender requires) added as top-level keys, before the
    first table. Raises :class:`BuildError` when ``text`` already sets either key."""
    data = tomllib.loads(text)
    if "platforms" in data or "wheels" in data:
        raise BuildError("blender_manifest.toml must not set platforms or wheels: the build "
                         "writes them per platform from blender_addon/packaging/wheels.txt")
    keys = f"platforms = [{json.dumps(platform)}]\nwheels = [\n" + "".join(
        f"  {json.dumps('./wheels/' + n)},\n" for n in wheel_names) + "]\n"
    lines = text.splitlines(keepends=True)
    at = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), len(lines))
    return "".join(lines[:at]) + keys + "\n" + "".join(lines[at:])


def build(out_dir: Path, platform: str, repo: Path = REPO,
          wheel_cache: Path = _wheels.CACHE) -> Path:
    """Write ``out_dir/<id>-<version>-<platform with _>.zip`` for one Blender ``platform``
    (a key of :data:`wheels.PLATFORMS`) and return its path (an existing zip of the same name is
    replaced: it is a build product, not a user's file).

    Raises :class:`BuildError` when the manifest, a runtime package or a wheel is missing."""
    manifest = read_manifest(repo / "blender_manifest.toml")
    addon_dir = repo / "blender_addon"
    if not (addon_dir / "__init__.py").is_file():
        raise BuildError(f"{addon_dir}/__init__.py is missing")
    for pkg in RUNTIME_PACKAGES:
        if not (repo / pkg).is_dir():
            raise BuildError(f"{repo / pkg} is missing; the extension must carry it")
    try:
        wheel_files = _wheels.wheels_for(platform, wheel_cache)
    except _wheels.WheelError as exc:
        raise BuildError(str(exc)) from None
    info = {"version": manifest["version"], "platform": platform,
            "wheels": [f.name for f in wheel_files]}
    text = platform_manifest((repo / "blender_manifest.toml").read_text("utf-8"), platform,
                             info["wheels"])
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{manifest['id']}-{manifest['version']}-{platform.replace('-', '_')}.zip"
    tmp = target.with_suffix(".zip.part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("blender_manifest.toml", text)
        for f in _files(addon_dir):
            rel = f.relative_to(addon_dir)
            if rel.parts[0] in EXCLUDED_ADDON_DIRS:
                continue
            zf.write(f, rel.as_posix())
        for f in wheel_files:  # already compressed: stored as they are
            zf.write(f, f"wheels/{f.name}", compress_type=zipfile.ZIP_STORED)
        for pkg in RUNTIME_PACKAGES:
            for f in _files(repo / pkg):
                zf.write(f, f"runtime/{f.relative_to(repo).as_posix()}")
        zf.writestr("runtime/build_info.json", json.dumps(info, indent=2) + "\n")
    tmp.replace(target)
    return target


def size_line(target: Path) -> str:
    """``built NAME: SIZE MiB, N wheels`` for the zip at ``target`` (MiB = 1024² bytes, one
    decimal; the wheels counted from its ``wheels/`` folder). Raises ``OSError`` when the file
    cannot be read."""
    with zipfile.ZipFile(target) as zf:
        count = sum(1 for n in zf.namelist() if n.startswith("wheels/") and n.endswith(".whl"))
    return f"built {target.name}: {target.stat().st_size / 2**20:.1f} MiB, {count} wheels"


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--out DIR`` (default ``dist``), ``--platform P`` (repeatable; default
    every platform of :data:`wheels.PLATFORMS`). Prints each zip's path on stdout (what scripts
    read) and, for a person, its size and wheel count on stderr (``built NAME: 61.9 MiB, 16
    wheels``: the figure docs/blender.md points to instead of quoting one); exit 1 with one
    line on failure (e.g. wheels not fetched yet: it names the command that fetches them)."""
    ap = argparse.ArgumentParser(prog="python -m blender_addon.packaging.build",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="dist", type=Path, help="output folder (default: dist)")
    ap.add_argument("--platform", action="append", choices=sorted(_wheels.PLATFORMS),
                    help="Blender platform to build for (default: all)")
    ns = ap.parse_args(argv)
    try:
        for platform in ns.platform or list(_wheels.PLATFORMS):
            target = build(ns.out, platform)
            print(target, flush=True)
            print(size_line(target), file=sys.stderr, flush=True)
    except (BuildError, OSError) as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
