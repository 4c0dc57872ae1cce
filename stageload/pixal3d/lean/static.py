"""``check --static`` for the lean conditioning: the names ``lean.py`` relies on in NAF's cached
hub source (``$TORCH_HOME/hub/valeoai_NAF_main``, where ``torch.hub.load("valeoai/NAF", ...)``
keeps it) and in the port's projection module, compared by ``ast`` with ``known.LEAN_NAF`` and
``known.LEAN_PROJECTION`` — no imports, no torch. A drift does not fail the check: the lean
path checks the live objects again and runs the port's computation (with a warning) where they
differ; the report says which it will be."""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Optional

from stageload.pixal3d.port import known
from stageload.pixal3d.port.static import calls, signature


def hub_dir() -> Path:
    """torch.hub's folder, resolved as ``torch.hub.get_dir()`` does without importing torch:
    ``$TORCH_HOME/hub``, ``TORCH_HOME`` defaulting to ``$XDG_CACHE_HOME/torch`` (then
    ``~/.cache/torch``)."""
    home = os.environ.get("TORCH_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "torch")
    return Path(home) / "hub"


def naf_source() -> Optional[Path]:
    """The cached NAF checkout torch.hub would load, or None when none is cached."""
    return next((hub_dir() / name for name in known.NAF_HUB_FOLDERS
                 if (hub_dir() / name / "hubconf.py").is_file()), None)


def _class_table(node: ast.ClassDef) -> dict:
    methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    attributes = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                and isinstance(sub.value, ast.Name) and sub.value.id == "self":
            attributes.add(sub.attr)
        if isinstance(sub, ast.Call) and getattr(sub.func, "attr", None) == "register_buffer" \
                and sub.args and isinstance(sub.args[0], ast.Constant):
            attributes.add(sub.args[0].value)
    return {"methods": methods, "attributes": attributes}


def _strings(node: ast.AST) -> set:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def _file_drift(rel: str, path: Path, want: dict) -> list:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except FileNotFoundError:
        return [f"{rel} (missing)"]
    except (OSError, SyntaxError, ValueError) as exc:
        return [f"{rel} (unreadable: {exc})"]
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: _class_table(n) for n in tree.body if isinstance(n, ast.ClassDef)}
    out = []
    for name, sig in want.get("functions", {}).items():
        if name not in functions:
            out.append(f"{rel}: {name} (missing)")
        elif signature(functions[name]) != sig:
            out.append(f"{rel}: {name}({', '.join(sig)}) (the source has "
                       f"({', '.join(signature(functions[name]))}))")
    for cls, spec in want.get("classes", {}).items():
        have = classes.get(cls)
        if have is None:
            out.append(f"{rel}: class {cls} (missing)")
            continue
        for name, sig in spec.get("methods", {}).items():
            node = have["methods"].get(name)
            if node is None:
                out.append(f"{rel}: {cls}.{name} (missing)")
            elif signature(node) != sig:
                out.append(f"{rel}: {cls}.{name}({', '.join(sig)}) (the source has "
                           f"({', '.join(signature(node))}))")
        out += [f"{rel}: {cls}.{a} (attribute missing)" for a in spec.get("attributes", ())
                if a not in have["attributes"]]
    for where, strings in want.get("strings", {}).items():
        cls, meth = where.split(".")
        node = classes.get(cls, {}).get("methods", {}).get(meth)
        out += [f"{rel}: {where} no longer says {s!r}" for s in strings
                if node is not None and s not in _strings(node)]
    for where, order in want.get("calls", {}).items():
        cls, meth = where.split(".")
        node = classes.get(cls, {}).get("methods", {}).get(meth)
        if node is not None and not _in_order(calls(node), order):
            out.append(f"{rel}: call order in {where}: expected {' -> '.join(order)}")
    return out


def _in_order(have: tuple, want: tuple) -> bool:
    it = iter(have)
    return all(any(name == h for h in it) for name in want)


def lean_report(port_root) -> dict:
    """``{"naf_source": cached NAF folder or None, "drift": [items], "lean": "available" |
    "falls back to the port's computation" | "NAF not cached: checked when it loads"}`` for a
    port folder and the NAF cached under ``TORCH_HOME``."""
    drift = []
    for rel, want in known.LEAN_PROJECTION.items():
        drift += [f"port {item}" for item in _file_drift(rel, Path(port_root) / rel, want)]
    source = naf_source()
    if source is not None:
        for rel, want in known.LEAN_NAF.items():
            drift += [f"NAF {item}" for item in _file_drift(rel, source / rel, want)]
    lean = ("falls back to the port's computation" if drift
            else "available" if source is not None else "NAF not cached: checked when it loads")
    return {"naf_source": str(source) if source is not None else None, "drift": drift,
            "lean": lean}
