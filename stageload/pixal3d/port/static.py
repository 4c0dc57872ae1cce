"""``check --static``: verify a port folder from its sources with ``ast`` — no imports, no torch,
no port dependencies — so it runs on any machine and in the runner's light precheck.

:func:`scan` reads the two required files (``known.REQUIRED_FILES``) into a table: every
top-level function of ``generate_mps.py`` and every method of ``Pixal3DImageTo3DPipeline`` with
its signature (see ``known`` for the format), the module-level names assigned in
``generate_mps.py``, and the call names inside each function in source order.
:func:`check_static` compares the table with the commits in ``known.KNOWN_COMMITS`` and
reports the port's commit (``.git``), which known API the sources match, and otherwise every
drifted item of the newest API.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Optional

from stageload.pixal3d.errors import PortMissing, PortVersionError
from stageload.pixal3d.port import known


def signature(node: ast.FunctionDef) -> tuple:
    """The parameter list of a function definition: names in order, ``name=`` with a default,
    ``*`` before keyword-only ones, ``*args``/``**kwargs``."""
    a = node.args
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    out = [p.arg + ("=" if i >= first_default else "") for i, p in enumerate(positional)]
    if a.vararg is not None:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    out += [p.arg + ("=" if d is not None else "")
            for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg is not None:
        out.append("**" + a.kwarg.arg)
    return tuple(out)


def calls(node: ast.AST) -> tuple:
    """Names of the functions called inside ``node`` (``f(...)`` → ``f``, ``x.y.f(...)`` → ``f``),
    in source order."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name:
                found.append((sub.lineno, sub.col_offset, name))
    return tuple(name for _, _, name in sorted(found))


def _functions(body) -> dict:
    return {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def scan(root: os.PathLike | str) -> dict:
    """The table of a port folder's sources: ``{"generate": {name: signature}, "generate_names":
    [assigned or defined names], "pipeline": {method: signature}, "calls": {"file:function":
    call names}, "not_checked": [other port files that are absent]}``.

    Raises ``PortMissing`` when a required file is absent or cannot be parsed (naming it)."""
    root = Path(root)
    trees = {}
    for rel in known.REQUIRED_FILES:
        path = root / rel
        try:
            trees[rel] = ast.parse(path.read_bytes(), filename=str(path))
        except FileNotFoundError:
            raise PortMissing(f"{root} has no {rel}, which the adapter needs.",
                              "Point --pixal3d-dir at a complete Pixal3D-mac checkout.",
                              (rel,)) from None
        except (OSError, SyntaxError, ValueError) as exc:
            raise PortMissing(f"Cannot parse {path}: {exc}",
                              "Check the file; it must be the port's Python "
                              "source.", (rel,)) from None
    gen = trees[known.GENERATE].body
    gen_funcs = _functions(gen)
    names = set(gen_funcs) | {n.name for n in gen if isinstance(n, ast.ClassDef)}
    for n in gen:
        if isinstance(n, ast.Assign):
            targets = n.targets
        else:
            targets = [n.target] if isinstance(n, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    cls = next((n for n in trees[known.PIPELINE].body
                if isinstance(n, ast.ClassDef) and n.name == known.PIPELINE_CLASS), None)
    methods = _functions(cls.body) if cls is not None else {}
    table_calls = {f"{known.GENERATE}:{k}": calls(v) for k, v in gen_funcs.items()}
    table_calls.update({f"{known.PIPELINE}:{k}": calls(v) for k, v in methods.items()})
    return {"generate": {k: signature(v) for k, v in gen_funcs.items()},
            "generate_names": sorted(names),
            "pipeline": {k: signature(v) for k, v in methods.items()} if cls is not None else None,
            "calls": table_calls,
            "not_checked": [rel for rel in known.OTHER_FILES if not (root / rel).is_file()]}


def _in_order(have: tuple, want: tuple) -> bool:
    it = iter(have)
    return all(any(name == h for h in it) for name in want)


def _bare(param: str) -> str:
    return param.lstrip("*").rstrip("=")


def _required(param: str) -> bool:
    return not param.endswith("=") and not param.startswith("*")


def changes(want: tuple, have: tuple) -> list:
    """What turned ``want`` (a signature as :func:`signature` writes it) into ``have``, for
    people: ``gained required parameter x``, ``gained optional parameter x``, ``lost parameter
    x``, ``x lost its default``, ``x gained a default``, ``parameters reordered``, in that
    order (empty when equal)."""
    wants, haves = {_bare(p): p for p in want}, {_bare(p): p for p in have}
    out = [f"gained {'required' if _required(p) else 'optional'} parameter {n}"
           for n, p in haves.items() if n not in wants and n]
    out += [f"lost parameter {n}" for n in wants if n not in haves and n]
    for n, p in wants.items():
        if n in haves and p != haves[n] and not p.startswith("*"):
            out.append(f"{n} lost its default" if p.endswith("=") else f"{n} gained a default")
    shared = [n for n in wants if n in haves]
    if shared != [n for n in haves if n in wants]:
        out.append("parameters reordered")
    return out


def _signature_drift(owner: str, have_all: dict, want_all: dict) -> list:
    """One item per function of ``want_all`` that ``have_all`` lacks (``(missing)``, with the
    likely new name when one close to it appeared) or has with another signature (both
    signatures and what changed: a gained required parameter breaks every call the adapter's
    hooks and the port's own callers make)."""
    import difflib

    out = []
    new_names = [n for n in have_all if n not in want_all]
    for name, want in want_all.items():
        have = have_all.get(name)
        if have is None:
            close = difflib.get_close_matches(name, new_names, n=1, cutoff=0.8)
            out.append(f"{owner}.{name} (missing" + (f"; renamed to {close[0]}?)" if close
                                                     else ")"))
        elif have != want:
            out.append(f"{owner}.{name}({', '.join(want)}) (the port has ({', '.join(have)}): "
                       f"{', '.join(changes(want, have))})")
    return out


def drift(table: dict, api: known.PortApi) -> list:
    """Every item of ``api`` that ``table`` (from :func:`scan`) does not have, as text naming it
    exactly (``generate_mps.image_to_asset(pipeline, image, args, device=, *, tmp_dir=)``, …)."""
    out = _signature_drift("generate_mps", table["generate"], api.generate)
    out += [f"generate_mps.{n} (missing)" for n in api.generate_names
            if n not in table["generate_names"]]
    if table["pipeline"] is None:
        out.append(f"{known.PIPELINE_CLASS} (missing from {known.PIPELINE})")
    else:
        out += _signature_drift(known.PIPELINE_CLASS, table["pipeline"], api.pipeline)
    for where, want in api.orders.items():
        have = table["calls"].get(where)
        if have is not None and not _in_order(have, want):
            out.append(f"call order in {where}: expected {' -> '.join(want)}")
    return out


def check_static(root: os.PathLike | str, commit: Optional[str] = None) -> dict:
    """Compare a port folder's sources with the known commits.

    Returns ``{"ok", "root", "commit", "known_commit" (label or None), "matches" (label of the
    known API the sources equal, or None), "runs" (driver for it or None), "drift" (items of the
    newest API that differ; empty when ok), "not_checked" (absent optional files)}``. ``ok``:
    the sources have everything some known API relies on. ``commit``: as read from ``.git``
    (pass it; None when unknown). Raises ``PortMissing`` for a missing or unparsable required
    file."""
    table = scan(root)
    matches = next((key for key, c in known.KNOWN_COMMITS.items() if not drift(table, c.api)), None)
    newest = known.KNOWN_COMMITS[known.NEWEST]
    entry = known.KNOWN_COMMITS.get(commit or "")
    return {"ok": matches is not None, "root": str(root), "commit": commit,
            "known_commit": entry.label if entry else None,
            "matches": known.KNOWN_COMMITS[matches].label if matches else None,
            "runs": known.KNOWN_COMMITS[matches].runs if matches else None,
            "drift": [] if matches else drift(table, (entry or newest).api),
            "not_checked": table["not_checked"]}


def require_static(root: os.PathLike | str, commit: Optional[str] = None) -> dict:
    """:func:`check_static`, raising ``PortVersionError`` (naming every drifted item) when the
    sources match no known API."""
    report = check_static(root, commit)
    if not report["ok"]:
        raise PortVersionError(
            f"The Pixal3D-mac sources in {root} (commit {commit or 'unknown'}) differ from what "
            f"the adapter "
            f"relies on: {'; '.join(report['drift'])}. Nothing was loaded.",
            "Use a Pixal3D-mac commit listed in docs/pixal3d.md (newest supported: "
            f"{known.KNOWN_COMMITS[known.NEWEST].label}).", tuple(report["drift"]))
    return report
