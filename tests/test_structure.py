"""The product's structure as its imports draw it, over every product package — runner,
stageload, blender_addon, bounded_export, meshfacts — read with ``ast`` (every ``import``, also
those inside functions, which hide a circle from the interpreter but not from a reader):

- no import circle among the product's modules;
- dependencies one way (``DIRECTION``): the add-on imports none of the runner, stageload, the
  export engine or torch; stageload none of the runner, the add-on or the engine; the engine
  none of the runner, the add-on, stageload or torch; meshfacts nothing of ours and only the
  standard library; and inside packages no import against the declared layers (``LAYERS``);
- no private name (``_x``) imported from another module;
- files of at most 500 lines, functions of at most 60, no folder of more than 20 modules;
- at most 8 imports of a name known only at run time, each with its reason in a comment;
- the export engine imports and exports an asset with no torch in its process.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("runner", "stageload", "blender_addon", "bounded_export", "meshfacts")
THIRD = {"torch", "bpy"}
"""Outside packages the direction names (the heavy or host-bound ones)."""

DIRECTION = {
    "blender_addon": {"runner", "stageload", "bounded_export", "torch"},
    "stageload": {"runner", "blender_addon", "bounded_export"},
    "bounded_export": {"runner", "blender_addon", "stageload", "torch"},
    "meshfacts": {"runner", "blender_addon", "stageload", "bounded_export", "torch", "bpy"},
    "runner": {"blender_addon"},
}
"""Top-level package → the top-level names it must never import (blender_addon → (spawns)
runner → stageload, bounded_export; everything → meshfacts)."""

LAYERS = {
    "blender_addon.runner_client": ("blender_addon.ui", "blender_addon.background", "bpy"),
    "blender_addon.packaging": ("blender_addon.ui", "blender_addon.background", "bpy"),
    "stageload": ("stageload.pixal3d",),
    "runner": ("runner.commands", "runner.__main__"),
    "runner.job": ("runner.worker", "runner.batch", "runner.cluster", "runner.backends"),
    "runner.backends": ("runner.worker", "runner.batch", "runner.cluster"),
    "runner.worker": ("runner.batch", "runner.cluster"),
}
"""Package prefix → the modules its modules must not import (what stands above them): the
add-on's runner side and packaging hold no bpy; stageload's core knows nothing of Pixal3D; no
module but a command imports the commands; a job knows no backend (it is handed its hand-over),
the worker and backends no batch."""

EXEMPT = {
    "stageload": ("stageload.pixal3d", "stageload.__main__"),
    "runner": ("runner.commands", "runner.__main__"),
    "blender_addon.runner_client": (),
    "blender_addon.packaging": (),
    "runner.job": (),
    "runner.backends": (),
    "runner.worker": (),
}
"""Modules under a ``LAYERS`` prefix that stand at or above the layer (the package's own
commands, the Pixal3D adapter itself)."""


def modules(package: str) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` under ``package``."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, tree: ast.AST) -> list[tuple[str, int, str]]:
    """``(absolute target, line, imported name)`` for every import of ``module`` (at ``path``):
    ``import a.b`` is ``a.b``; ``from .x import y`` is ``PKG.x.y`` (a submodule or a name in
    ``PKG.x``), with ``y`` as the name."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)]
                                + ([node.module] if node.module else []))
            else:
                base = node.module
            names += [(f"{base}.{alias.name}", node.lineno, alias.name) for alias in node.names]
    return names


def product() -> dict[str, Path]:
    """Every module of every product package."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        found.update(modules(package))
    return found


def _runtime(target: str) -> bool:
    """The installed add-on's bundled runtime (its own copy of meshfacts), not its modules."""
    return target.startswith("blender_addon.runtime.")


def graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the product modules it imports (a name in a module counts as that module;
    importing a package's submodule is not importing the package's own names)."""
    edges: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        for target, _line, _alias in imported(name, path, ast.parse(path.read_text("utf-8"))):
            if _runtime(target):
                continue
            while target not in found and "." in target:
                target = target.rpartition(".")[0]
            if target in found and target != name:
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def wrong_way(found: dict[str, Path]) -> list[str]:
    """Every import against :data:`DIRECTION` or :data:`LAYERS`, as ``path:line imports X``."""
    bad = []
    for name, path in found.items():
        top = name.split(".")[0]
        layers = [p for p in LAYERS if _under(name, p)
                  and not any(_under(name, e) for e in EXEMPT.get(p, ()))]
        for target, line, _alias in imported(name, path, ast.parse(path.read_text("utf-8"))):
            if _runtime(target):
                continue
            where = f"{path.relative_to(REPO)}:{line} imports {target}"
            if target.split(".")[0] in DIRECTION.get(top, ()):
                bad.append(where)
            for layer in layers:
                if any(_under(target, above) for above in LAYERS[layer]):
                    bad.append(where)
    return bad


def foreign_to_meshfacts(found: dict[str, Path]) -> list[str]:
    """Imports of meshfacts that are neither the standard library nor meshfacts itself."""
    bad = []
    for name, path in found.items():
        if not _under(name, "meshfacts"):
            continue
        for target, line, _alias in imported(name, path, ast.parse(path.read_text("utf-8"))):
            top = target.split(".")[0]
            if top not in sys.stdlib_module_names and top != "meshfacts":
                bad.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    return bad


def private_imports(found: dict[str, Path]) -> list[str]:
    """``from other_module import _name`` of a product module: a private name taken across
    modules. A package's private module (``stageload/meter/_linux.py``, the psutil layout)
    imported by the package's own modules is its inside, not a private name taken; dunders
    are not private names."""
    bad = []
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target, line, alias in imported(name, path, ast.parse(path.read_text("utf-8"))):
            if not alias.startswith("_") or alias.startswith("__"):
                continue
            owner = target.rpartition(".")[0]
            if target in found and owner == package:
                continue
            if owner.split(".")[0] in PACKAGES and owner != name:
                bad.append(f"{path.relative_to(REPO)}:{line} imports {alias} from {owner}")
    return bad


def too_long(found: dict[str, Path]) -> list[str]:
    """Files over 500 lines and functions over 60."""
    bad = []
    for path in found.values():
        text = path.read_text("utf-8")
        where = path.relative_to(REPO)
        if len(text.splitlines()) > 500:
            bad.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    bad.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    return bad


def crowded_folders() -> list[str]:
    """Folders of the product holding more than 20 Python modules directly."""
    bad = []
    for package in PACKAGES:
        for folder in [REPO / package, *(p for p in (REPO / package).rglob("*") if p.is_dir())]:
            count = len(list(folder.glob("*.py")))
            if count > 20:
                bad.append(f"{folder.relative_to(REPO)}: {count} modules")
    return bad


def test_the_finders_find_what_they_look_for():
    """The controls: a circle closed by an import inside a function, an import against the
    direction, a private name taken from another module, a long function."""
    edges = {"runner.a": {"runner.b"}, "runner.b": {"runner.a"}, "runner.c": {"runner.a"}}
    assert cycles(edges) == [["runner.a", "runner.b"]]
    tree = ast.parse("def f():\n    from .manifest import _MANIFEST\n    import torch\n")
    assert imported("runner.recovery", REPO / "runner" / "recovery.py", tree) == [
        ("runner.manifest._MANIFEST", 2, "_MANIFEST"), ("torch", 3, "")]
    fake = REPO / "bounded_export" / "x.py"
    assert [f"{t}" for t, *_ in imported("bounded_export.x", fake, tree)
            if t.split(".")[0] in DIRECTION["bounded_export"]] == ["torch"]
    long_body = "def f():\n" + "    x = 1\n" * 60
    assert any(isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > 60
               for n in ast.walk(ast.parse(long_body)))


def test_no_import_circle_in_the_product():
    assert cycles(graph(product())) == []


def test_every_import_goes_the_declared_way():
    assert wrong_way(product()) == []


def test_meshfacts_imports_only_the_standard_library():
    assert foreign_to_meshfacts(product()) == []


def test_no_private_name_is_imported_across_modules():
    assert private_imports(product()) == []


def test_modules_functions_and_folders_stay_small():
    """No module of the product over 500 lines, no function over 60, no folder of more than 20
    modules (a feature is a folder a newcomer finds by its name)."""
    assert too_long(product()) + crowded_folders() == []


RUN_TIME_IMPORT = ("import_module", "__import__", "spec_from_file_location", "run_path")
"""What imports a module by a name or path known only at run time."""


def run_time_imports(found: dict[str, Path]) -> tuple[list[str], list[str]]:
    """Every call of :data:`RUN_TIME_IMPORT` in the product, and those without a comment on
    their line or the line above (the reason: torch, Ray or bpy kept out of a light process, or
    a name known only at run time)."""
    sites, unexplained = [], []
    for path in found.values():
        lines = path.read_text("utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in RUN_TIME_IMPORT:
                    where = f"{path.relative_to(REPO)}:{node.lineno}"
                    sites.append(where)
                    near = lines[max(0, node.lineno - 2):node.lineno]
                    if not any("#" in line for line in near):
                        unexplained.append(where)
    return sites, unexplained


def test_names_imported_at_run_time_are_few_and_each_says_why():
    """Plain imports everywhere but where a plain import cannot do (at most 8 places), each with
    a comment saying why."""
    sites, unexplained = run_time_imports(product())
    assert len(sites) <= 8, sites
    assert unexplained == []


ENGINE_ALONE = r"""
import sys, tempfile
from pathlib import Path
import bounded_export
from bounded_export import ExportLevers, export_asset
from standin.sphere_asset import make_sphere_asset
folder = Path(tempfile.mkdtemp())
asset = make_sphere_asset(folder / "sphere.npz", subdivisions=2, resolution=16)
info = export_asset(asset, folder / "sphere.glb", ExportLevers(texture_size=512))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "runner")
               or m.startswith("stageload"))
print(info["faces"] > 0, (folder / "sphere.glb").stat().st_size > 0, heavy)
"""


def test_the_export_engine_runs_without_torch_in_its_process():
    """Import the engine and export a small asset in a fresh interpreter: torch, the runner
    and stageload (Pixal3D's or not) are never imported."""
    done = subprocess.run([sys.executable, "-c", ENGINE_ALONE], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "True True []", done.stdout
