"""A backend check's verdicts (``{name: {"ok", "kind", "reason", "hint"}}``, what each
backend's ``check()`` answers in the worker's probe) in words and as an exit status: for
``python -m runner check`` (``runner.commands.check``) and each node of ``check --cluster``
(``runner.cluster.check``)."""
from __future__ import annotations

from meshfacts.errors import KINDS


def backend_lines(verdicts) -> list[str]:
    """One line per backend of a check's ``backends`` (``NAME: ok``, or ``NAME: cannot run:
    KIND: REASON — HINT``); also each node's lines of ``check --cluster``."""
    lines = []
    for name, verdict in (verdicts if isinstance(verdicts, dict) else {}).items():
        verdict = verdict if isinstance(verdict, dict) else {}
        if verdict.get("ok"):
            lines.append(f"{name}: ok")
            continue
        kind = f"{verdict['kind']}: " if verdict.get("kind") else ""
        hint = f" — {verdict['hint']}" if verdict.get("hint") else ""
        lines.append(f"{name}: cannot run: {kind}{verdict.get('reason') or 'unknown'}{hint}")
    return lines


def verdict_exit_code(verdicts: dict, wanted: list[str]) -> int:
    """Exit status for the first requested backend that cannot run: the ``kind`` its check
    reported when that is an environment kind (30-39, e.g. ``pixal3d_missing`` 32 — the code a
    run would exit with for the same reason), else ``backend_unavailable`` (31)."""
    for name in wanted:
        verdict = verdicts.get(name) or {}
        if not verdict.get("ok"):
            kind = verdict.get("kind")
            if kind in KINDS and 30 <= KINDS[kind].exit_code <= 39:
                return KINDS[kind].exit_code
            return KINDS["backend_unavailable"].exit_code
    return 0
