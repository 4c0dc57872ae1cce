"""The build step and the add-on's import boundaries, without bpy."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from blender_addon.packaging import build, wheels

REPO = Path(__file__).resolve().parents[2]
ADDON = REPO / "blender_addon"
PY = sys.executable


def blender_ext_cli() -> Path:
    """Blender's own extension command-line tool, shipped inside the bpy wheel."""
    import importlib.util
    spec = importlib.util.find_spec("bpy")
    assert spec and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(root.glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
    assert found, f"blender_ext.py not found under {root}"
    return found[-1]


def test_build_writes_a_zip_blender_validates(tmp_path):
    proc = subprocess.run([PY, "-m", "blender_addon.packaging.build", "--out", str(tmp_path),
                           "--platform", "linux-x64"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    zpath = Path(proc.stdout.strip())
    manifest = build.read_manifest()
    assert zpath == tmp_path / f"image_to_mesh-{manifest['version']}-linux_x64.zip"
    names = set(zipfile.ZipFile(zpath).namelist())
    assert {"blender_manifest.toml", "__init__.py", "headless.py", "runtime/build_info.json",
            "runtime/runner/__main__.py", "runtime/runner/PROTOCOL.md",
            "runtime/stageload/__main__.py"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert not {"build.py", "wheels.py", "wheels.txt"} & names
    info = json.loads(zipfile.ZipFile(zpath).read("runtime/build_info.json"))
    assert info["version"] == manifest["version"] and info["platform"] == "linux-x64"
    assert "venv_python" not in info and "source" not in info  # points at no clone
    # The zip's manifest lists exactly its Linux wheels, one per pinned requirement.
    shipped = tomllib.loads(zipfile.ZipFile(zpath).read("blender_manifest.toml").decode())
    assert shipped["platforms"] == ["linux-x64"]
    assert [w.removeprefix("./") for w in shipped["wheels"]] == sorted(
        (n for n in names if n.startswith("wheels/")),
        key=[f"wheels/{w}" for w in info["wheels"]].index)
    pins = wheels.requirements()
    assert len(shipped["wheels"]) == len(pins)
    for (name, version), w in zip(pins, info["wheels"], strict=True):
        assert w.lower().startswith(f"{wheels._normal(name)}-{version}-")
        assert "win" not in w and "macosx" not in w
    assert not any(n == "numpy" for n, _ in pins)  # Blender ships NumPy
    # A sane size: the wheels dominate (SciPy ~38 MB on Linux).
    assert zpath.stat().st_size < 100 * 2**20
    # The size a person reads (docs/blender.md quotes none) is this zip's, from the build.
    mib = f"{zpath.stat().st_size / 2**20:.1f} MiB"
    assert f"built {zpath.name}: {mib}, {len(pins)} wheels" in proc.stderr.splitlines()
    # Blender's own validator accepts the package.
    check = subprocess.run([PY, str(blender_ext_cli()), "validate", str(zpath)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_build_without_fetched_wheels_names_the_command(tmp_path):
    with pytest.raises(build.BuildError, match="python -m blender_addon.packaging.wheels "
                                               "--platform macos-arm64"):
        build.build(tmp_path / "dist", "macos-arm64", wheel_cache=tmp_path / "empty")
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_no_zip_is_built_for_windows_which_the_runner_cannot_run_on(tmp_path):
    """docs/runner.md: Windows is not supported (POSIX process groups, sessions and pipe
    descriptors). A zip for it would install and fail at the first Generate, so none is
    built — by default or on request — and the refusal says why."""
    assert "windows-x64" not in wheels.PLATFORMS
    with pytest.raises(build.BuildError, match="windows-x64 is not supported: the runner "
                                               "needs POSIX"):
        build.build(tmp_path / "dist", "windows-x64", wheel_cache=tmp_path / "empty")
    proc = subprocess.run([PY, "-m", "blender_addon.packaging.build", "--out",
                           str(tmp_path / "dist"), "--platform", "windows-x64"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "invalid choice: 'windows-x64'" in proc.stderr


def test_platform_manifest_adds_platforms_and_wheels_before_the_first_table():
    text = build.MANIFEST.read_text("utf-8")
    out = build.platform_manifest(text, "macos-arm64", ["a-1-py3-none-any.whl"])
    data = tomllib.loads(out)
    assert data["platforms"] == ["macos-arm64"]
    assert data["wheels"] == ["./wheels/a-1-py3-none-any.whl"]
    assert data["permissions"] == tomllib.loads(text)["permissions"]
    with pytest.raises(build.BuildError, match="must not set platforms or wheels"):
        build.platform_manifest(out, "linux-x64", [])


def test_manifest_fields():
    m = build.read_manifest()
    assert m["schema_version"] == "1.0.0" and m["type"] == "add-on"
    assert m["name"] == "Image to Mesh" and m["id"] == "image_to_mesh"
    assert m["blender_version_min"] == "4.2.0" and m["license"] == ["SPDX:MIT"]
    assert set(m["permissions"]) == {"files"} and m["permissions"]["files"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'version = "{m["version"]}"' in pyproject


def test_broken_manifest_is_a_clear_build_error(tmp_path):
    repo = tmp_path / "repo"
    (repo / "blender_addon").mkdir(parents=True)
    (repo / "blender_addon" / "__init__.py").write_text("")
    (repo / "blender_manifest.toml").write_text('schema_version = "1.0.0"\nid = "x"\n')
    with pytest.raises(build.BuildError, match="lacks version"):
        build.build(tmp_path / "dist", "linux-x64", repo=repo)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_addon_never_imports_torch_runner_or_stageload():
    for f in ADDON.rglob("*.py"):
        assert not _imports(f) & {"torch", "runner", "stageload", "numpy"}, f.name


def test_pure_modules_load_without_bpy():
    code = ("import sys, blender_addon, blender_addon.packaging.build, "
            "blender_addon.runner_client.state, blender_addon.runner_client.batch_state, "
            "blender_addon.runner_client.config, blender_addon.runner_client.process; "
            "print(sorted(m for m in ('bpy', 'torch', 'runner', 'stageload') if m in sys.modules))")
    proc = subprocess.run([PY, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
