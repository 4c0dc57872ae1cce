"""The runner's structure as its imports draw it (read with ``ast``, every ``import`` — also
those inside functions, which hide a circle from the interpreter but not from a reader): no
circle among runner/'s modules nor among the add-on's, the export engine standing on its own
(nothing of the runner outside it), stageload importing nothing of the runner or the add-on,
the add-on nothing of the runner, stageload or torch; every module of the runner under 500
lines and every function under 60."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` under ``package``."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, tree: ast.AST) -> list[tuple[str, int]]:
    """The absolute names ``module`` (at ``path``) imports, with their line: ``import a.b`` is
    ``a.b``; ``from .x import y`` is ``PKG.x.y`` (a submodule or a name in ``PKG.x``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            names += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return names


def _graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of ``package`` it imports (a name in a module counts as that
    module; importing a package's submodule is not importing the package's own names)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _line in _imported(name, path, ast.parse(path.read_text("utf-8"))):
            if target.startswith(f"{package}.runtime."):
                continue  # the installed add-on's bundled runtime (meshfacts), not its own modules
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle_hidden_in_a_function():
    """The control: a circle closed by an import inside a function is found."""
    graph = {"runner.a": {"runner.b"}, "runner.b": {"runner.a"}, "runner.c": {"runner.a"}}
    assert _cycles(graph) == [["runner.a", "runner.b"]]
    tree = ast.parse("def f():\n    from .manifest import MANIFEST\n")
    assert _imported("runner.recovery", REPO / "runner" / "recovery.py", tree) == [
        ("runner.manifest.MANIFEST", 2)]


def test_no_import_circle_in_the_runner():
    assert _cycles(_graph("runner")) == []


def test_no_import_circle_in_the_addon():
    assert _cycles(_graph("blender_addon")) == []


def test_the_addon_imports_neither_the_runner_nor_stageload_nor_torch():
    """Blender's process holds none of them: the add-on imports the stdlib-only ``meshfacts``
    (``blender_addon/runner_client/facts.py``) and spawns the runner for the rest."""
    for name, path in _modules("blender_addon").items():
        for target, line in _imported(name, path, ast.parse(path.read_text("utf-8"))):
            assert target.split(".")[0] not in ("runner", "stageload", "torch"), \
                f"{path.relative_to(REPO)}:{line} imports {target}"


def test_the_export_engine_imports_nothing_of_the_runner_or_of_pixal3d():
    for name, path in _modules("bounded_export").items():
        for target, line in _imported(name, path, ast.parse(path.read_text("utf-8"))):
            assert target.split(".")[0] not in ("runner", "blender_addon", "torch") and \
                not target.startswith("stageload.pixal3d"), \
                f"{path.relative_to(REPO)}:{line} imports {target}"


def test_stageload_imports_neither_the_runner_nor_the_addon():
    for name, path in _modules("stageload").items():
        for target, line in _imported(name, path, ast.parse(path.read_text("utf-8"))):
            assert target.split(".")[0] not in ("runner", "blender_addon"), \
                f"{path.relative_to(REPO)}:{line} imports {target}"


def test_modules_and_functions_stay_small():
    """No module of runner/ over 500 lines, no function over 60."""
    too_long = []
    for package in ("runner",):
        for path in _modules(package).values():
            text = path.read_text("utf-8")
            where = path.relative_to(REPO)
            if len(text.splitlines()) > 500:
                too_long.append(f"{where}: {len(text.splitlines())} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > 60:
                        too_long.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []
