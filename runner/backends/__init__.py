"""Backend registry: name → the module that runs it, its planned stages, its options, and a
``check()`` that says whether it can run here (and if not, why and what to do).

The supervisor uses only this file (no backend module is imported there, so no torch): it needs
the planned stage names for ``hello`` and the options to forward. The worker imports the module
and calls ``generate(image, output, *, had_alpha, seed, texture_size, emit, **options)``.

A backend module provides:

- ``generate(...) -> dict`` (writes the GLB to ``output``; returns facts about the result),
- ``STAGES`` (tuple of stage names; the registry's ``stages`` must match — a test checks it),
- optionally ``check(**options) -> dict`` with ``ok`` (bool), ``reason``, ``hint``,
- optionally ``ERRORS``: ``{exception class name: runner error kind}`` for its own exceptions.

``check()`` here imports the module, so call it where importing torch is fine (the worker's
``--probe`` mode, which ``python -m runner check`` runs in a subprocess).
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Option:
    """A backend-specific command-line option: ``flag`` (e.g. ``--pixal3d-dir``), ``dest``
    (keyword passed to ``generate``/``check``), ``help``, ``choices``, ``default``."""

    flag: str
    dest: str
    help: str
    choices: tuple[str, ...] | None = None
    default: object = None


@dataclass(frozen=True)
class Backend:
    """One backend: ``name``, ``module`` (dotted path), ``title`` (what it is, for people),
    ``stages`` (planned stage names, or a callable ``options -> tuple`` when they depend on
    options), ``options`` (``Option`` list), ``install_hint`` (what to do when the module is
    not there)."""

    name: str
    module: str
    title: str
    stages: tuple[str, ...] | Callable[[dict], tuple[str, ...]]
    options: tuple[Option, ...] = field(default_factory=tuple)
    install_hint: str = ""

    def planned_stages(self, options: dict | None = None) -> list[str]:
        """The stage names this backend will announce, in order."""
        stages = self.stages(options or {}) if callable(self.stages) else self.stages
        return list(stages)

    def installed(self) -> bool:
        """True when the module can be found (without importing it)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def load(self):
        """Import and return the backend module (may import torch). Raises ``ImportError``."""
        return importlib.import_module(self.module)

    def check(self, **options) -> dict:
        """Can it run here? ``{"ok": bool, "reason": str|None, "hint": str|None, ...}``.
        Imports the module; never raises."""
        if not self.installed():
            return {"ok": False, "reason": "not installed",
                    "hint": self.install_hint or f"{self.module} is missing from this install."}
        try:
            module = self.load()
        except Exception as exc:  # broken install, missing dependency
            return {"ok": False, "reason": f"cannot be imported: {type(exc).__name__}: {exc}",
                    "hint": "Reinstall the project's dependencies into this interpreter."}
        own = getattr(module, "check", None)
        if own is None:
            return {"ok": True, "reason": None, "hint": None}
        try:
            result = dict(own(**options))
        except Exception as exc:
            return {"ok": False, "reason": f"its check failed: {type(exc).__name__}: {exc}",
                    "hint": "See the log on stderr."}
        result.setdefault("reason", None)
        result.setdefault("hint", None)
        result["ok"] = bool(result.get("ok"))
        return result


BACKENDS: dict[str, Backend] = {
    "builtin": Backend(
        name="builtin",
        module="runner.backends.builtin",
        title="built-in silhouette inflation (no weights, CPU, seconds)",
        stages=("matte", "shape", "texture", "export"),
    ),
    "pixal3d": Backend(
        name="pixal3d",
        module="runner.backends.pixal3d",
        title="Pixal3D (staged through stageload; needs a Pixal3D-mac checkout and its weights)",
        # SPEC §2.5's plan; the same for both pipeline types (runner.backends.pixal3d.STAGES,
        # checked by tests/runner/test_contract.py).
        stages=("setup", "preprocess", "camera", "structure", "shape_512", "shape_1024",
                "texture", "decode", "export"),
        options=(
            Option("--pixal3d-dir", "pixal3d_dir", "folder of the Pixal3D-mac checkout "
                   "(default: $PIXAL3D_DIR)"),
            Option("--pipeline-type", "pipeline_type", "Pixal3D pipeline type",
                   ("1024_cascade", "1536_cascade"), "1024_cascade"),
            Option("--load", "load", "staged: load each model when its stage needs it; eager: "
                   "the port's own loading (for comparison)", ("staged", "eager"), "staged"),
            Option("--keep-resident", "keep_resident", "bytes (or 1G) a model needed again later "
                   "may stay loaded across stages that do not use it (default 0)", default="0"),
        ),
        install_hint="The Pixal3D backend is not installed in this version of the runner.",
    ),
}

DEFAULT = "builtin"


def names() -> list[str]:
    """Registered backend names, default first."""
    return [DEFAULT] + [n for n in BACKENDS if n != DEFAULT]


def get(name: str) -> Backend:
    """The backend called ``name``. Raises ``KeyError`` naming the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(names())}") from None


def all_options() -> list[Option]:
    """Every backend option once (for the command line), in registry order."""
    seen, out = set(), []
    for backend in BACKENDS.values():
        for opt in backend.options:
            if opt.dest not in seen:
                seen.add(opt.dest)
                out.append(opt)
    return out
