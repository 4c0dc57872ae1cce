"""The preferences' Check with its "Deep" choice: the command line it runs and its answer in
words. No bpy.

A deep Check runs ``<python> -m runner check --backend pixal3d --deep --report FILE``
(docs/runner.md, "check --deep"): each lean part against the port on the user's port, weights
and device, about two minutes on an M-series Mac; the report is a new JSON file in the output
folder, never over an existing one. :func:`deep_lines` turns the ``check`` event's ``deep``
field into the lines the preferences show under the plain check's.
"""
from __future__ import annotations

import time
from pathlib import Path

from . import facts

#: Seconds a deep Check may take before the preferences give up on it (the runner's own limit
#: for its worker is 900 s).
DEEP_TIMEOUT = 960
#: Seconds a plain Check may take.
QUICK_TIMEOUT = 120


def check_argv(python: str, pixal3d_dir: str, report: Path | None = None) -> list[str]:
    """``runner check`` for ``python``: with ``--pixal3d-dir`` when a folder is given, and with
    ``report`` the deep check writing its report there."""
    argv = [python, "-m", "runner", "check"]
    if pixal3d_dir:
        argv += ["--pixal3d-dir", pixal3d_dir]
    if report is not None:
        argv += ["--backend", "pixal3d", "--deep", "--report", str(report)]
    return argv


def report_path(folder: Path, now: float | None = None) -> Path:
    """A new file in ``folder`` for the deep check's report: ``self-check YYYY-MM-DD
    HH.MM.SS.json`` (``_2`` … when taken; the runner refuses an existing file anyway)."""
    stamp = time.strftime("%Y-%m-%d %H.%M.%S", time.localtime(now))
    path, n = folder / f"self-check {stamp}.json", 1
    while path.exists():
        n += 1
        path = folder / f"self-check {stamp}_{n}.json"
    return path


def _held(path) -> str:
    if not isinstance(path, dict):
        return "—"
    memory = path.get("memory") if isinstance(path.get("memory"), dict) else {}
    held = ", ".join(f"{name} {facts.format_size(value)}" for name, value in memory.items())
    seconds = path.get("seconds")
    took = f"{seconds:.1f} s" if isinstance(seconds, (int, float)) else "?"
    return f"{took}, {held}" if held else took


def deep_lines(deep: dict) -> list[str]:
    """The deep check's answer for a person: its verdict, one line per part (status,
    agreement, port and lean time and memory, or why it could not run), what could not be
    checked, and the report's path. Unknown or missing fields are skipped."""
    error = deep.get("error") if isinstance(deep.get("error"), dict) else None
    if not deep.get("ran"):
        why = f"{error.get('kind')}: {error.get('message')}" if error else "it did not run"
        return [f"Deep check not run — {why}"]
    lines = ["Deep check: every lean part agrees with the port" if deep.get("ok") else
             f"Deep check FAILED: {error.get('message') if error else 'see the parts'}"]
    for part in deep.get("parts") or []:
        if not isinstance(part, dict):
            continue
        line = f"{part.get('part')}: {part.get('status')}"
        if isinstance(part.get("agreement"), (int, float)):
            line += f" {part['agreement']:.1e}"
        if part.get("status") in ("agrees", "differs"):
            line += f" · port {_held(part.get('port'))} · lean {_held(part.get('lean'))}"
        elif part.get("note"):
            line += f" — {part['note']}"
        lines.append(line)
    lines += [f"not checked: {what}" for what in deep.get("unchecked") or []]
    if deep.get("report"):
        lines.append(f"report: {deep['report']}")
    return lines
