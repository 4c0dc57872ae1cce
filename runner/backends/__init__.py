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
``--probe`` mode, which ``python -m runner check`` runs in a subprocess). ``precheck`` is the
light part the supervisor runs before the guard and the trace (files and folders only; it must
not import torch — tests/runner/test_precheck.py checks that).
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable

from meshfacts import options as options_table
from meshfacts import units
from meshfacts.errors import RunnerError
from stageload.pixal3d.plan import STAGES

Option = options_table.Option
"""A backend's own option: an entry of the options table (``meshfacts/options.py``) — ``flag``,
``dest`` (keyword passed to ``generate``/``check``), ``help``, ``choices``, ``default`` (applied
only when the option's backend is chosen), ``parse`` (text → value, ``ValueError`` with a
message for a person; the supervisor calls it before anything starts), ``affects_output``
(False for options that change how, not what, is computed — batch resume ignores those)."""


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
    precheck: str | None = None
    """``"module:function"`` of a cheap check (no torch, no weights: e.g. that a folder exists
    and holds the expected files) called with the backend's own options; it returns None or
    raises ``RunnerError``. None: nothing to check before the worker."""
    split_export: str | None = None
    """``"module:function"`` (like :attr:`precheck`, no torch) taking the job options and
    saying whether the job exports in a process of its own (:meth:`splits_export`). None:
    never."""
    texture_sizes: tuple[int, int] | tuple[int, ...] = (1, 4096)
    texture_floor: int | None = None
    """Smallest texture side (px) the backend really makes: a smaller ``--texture-size`` is
    accepted and raised to it (the command line says so on stderr). None: no floor."""
    height_range: tuple[float, float] | None = None
    texture_choices: bool = False
    needs_torch: bool = False
    """True when the backend imports torch: only then does the worker import it (and fail with
    ``no_torch`` when it cannot). The built-in backend needs NumPy, Pillow, SciPy, trimesh and
    psutil only, so it runs in Blender's own Python with the extension's bundled wheels."""
    torch_free_export: str | None = None
    """``"module:function"`` taking the job options: True when the export process of such a
    job needs no torch (the pixal3d backend's bounded export engine), so the worker in export
    mode does not import it. None: the export process imports torch when ``needs_torch``."""

    def validate(self, *, texture_size: int | None, height_m: float | None,
                 options: dict) -> None:
        """Refuse, before anything starts, values this backend would reject: ``texture_size``
        (px) outside ``texture_sizes`` (an inclusive ``(low, high)`` range, or the exact
        choices when ``texture_choices``), ``height_m`` (metres) given when ``height_range`` is
        None or outside it, an option of another backend (``options``: dest → value, None =
        not given), or an own option whose ``parse`` fails. Raises ``RunnerError('usage')``
        with a message naming the option and a hint with the accepted values."""
        if texture_size is not None:
            if self.texture_choices:
                if texture_size not in self.texture_sizes:
                    allowed = ", ".join(map(str, self.texture_sizes))
                    raise RunnerError("usage", f"--texture-size {texture_size} is not one the "
                                      f"{self.name} backend offers.", f"Choose one of {allowed}.")
            else:
                low, high = self.texture_sizes
                if not low <= texture_size <= high:
                    raise RunnerError("usage", f"--texture-size {texture_size} is outside the "
                                      f"{self.name} backend's range.",
                                      f"Give a size from {low} to {high} px, e.g. 1024.")
        if height_m is not None:
            if self.height_range is None:
                raise RunnerError("usage", f"--height is not supported by the {self.name} "
                                  "backend (it exports in its own unit box).",
                                  "Leave --height out; scale the imported mesh in Blender.")
            low, high = self.height_range
            if not low <= height_m <= high:
                raise RunnerError("usage", f"--height {height_m:g} is outside {low:g} to "
                                  f"{high:g} m.", f"Give the character's height in metres, "
                                  f"from {low:g} to {high:g} (e.g. 1.8).")
        mine = {o.dest for o in self.options}
        for opt in all_options():
            value = options.get(opt.dest)
            if value is None:
                continue
            if opt.dest not in mine:
                owners = [b.name for b in BACKENDS.values() if opt in b.options]
                raise RunnerError("usage", f"{opt.flag} applies to --backend "
                                  f"{' / '.join(owners)} only, not to {self.name}.",
                                  f"Leave {opt.flag} out, or add --backend {owners[0]}.")
            if opt.parse is not None:
                try:
                    opt.parse(value)
                except ValueError as exc:
                    raise RunnerError("usage", f"{opt.flag} {value!r}: {exc}") from None

    def job_options(self, options: dict) -> dict:
        """This backend's own options from ``options`` (dest → value, None = not given), with
        each option's ``default`` filled in; other backends' options dropped."""
        return {o.dest: options.get(o.dest) if options.get(o.dest) is not None else o.default
                for o in self.options}

    def planned_stages(self, options: dict | None = None) -> list[str]:
        """The stage names this backend will announce, in order."""
        stages = self.stages(options or {}) if callable(self.stages) else self.stages
        return list(stages)

    def run_precheck(self, options: dict) -> None:
        """Run :attr:`precheck` with :meth:`job_options` of ``options`` (dest → value, None = not
        given). Raises ``RunnerError`` (the backend's kind, e.g. ``pixal3d_missing``, exit 32)
        when the backend cannot run with them; returns None otherwise or when there is no
        precheck. Imports only the precheck's module, never torch."""
        if not self.precheck:
            return
        module, _, func = self.precheck.partition(":")
        getattr(importlib.import_module(module), func)(**self.job_options(options))

    def splits_export(self, options: dict) -> bool:
        """Whether a job with ``options`` exports in a process of its own: :attr:`split_export`
        (``"module:function"`` taking the job options, like :attr:`precheck`) says; False when
        there is none. Imports only that module, never torch."""
        if not self.split_export:
            return False
        module, _, func = self.split_export.partition(":")
        return bool(getattr(importlib.import_module(module), func)(self.job_options(options)))

    def export_needs_torch(self, options: dict) -> bool:
        """Whether the export process of a job with ``options`` imports torch
        (:attr:`torch_free_export`). Imports only that function's module, never torch."""
        if not self.needs_torch:
            return False
        if not self.torch_free_export:
            return True
        module, _, func = self.torch_free_export.partition(":")
        return not getattr(importlib.import_module(module), func)(self.job_options(options))

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


def parse_size(value) -> int:
    """Bytes from an option value: an int, or text such as ``1G`` or ``1000000000``
    (:func:`meshfacts.units.parse_size`: binary multiples, a bare number is bytes); None or
    ``""`` (not given) is 0. Raises ``ValueError`` with what to write for anything else."""
    if value is None or value == "":
        return 0
    return units.parse_size(value)


def parse_faces(text) -> int:
    """``--decimation-target``: a whole number of faces, 1 to ``choices.MAX_DECIMATION_TARGET``
    (the options table's range). Raises ``ValueError`` with a message for a person."""
    return options_table.get("decimation_target").convert(text)


def _pixal3d_stages() -> tuple:
    """The Pixal3D stage list from ``stageload.pixal3d.plan`` (torch-free, imports nothing of
    the port)."""
    return tuple(STAGES)


BACKENDS: dict[str, Backend] = {
    "builtin": Backend(
        name="builtin",
        module="runner.backends.builtin",
        title="built-in silhouette inflation (no weights, CPU, seconds)",
        stages=("matte", "shape", "texture", "export"),
        # runner.backends.builtin.generate's documented range (MAX_TEXTURE_SIZE; sizes under
        # 512 are raised to 512); a test checks the figure against the module.
        texture_sizes=(1, options_table.get("texture_size").high),
        texture_floor=512,  # runner.backends.builtin.texture.MIN_TEXTURE_SIZE (a test checks)
        # metres: a 1 cm figurine to a 100 m giant; beyond that float32 GLB coordinates and
        # Blender's default clip range make little sense for a character.
        height_range=(options_table.get("height").low, options_table.get("height").high),
    ),
    "pixal3d": Backend(
        name="pixal3d",
        module="runner.backends.pixal3d",
        title="Pixal3D (staged through stageload; needs a Pixal3D-mac checkout and its weights)",
        # SPEC §2.5's plan; the same for both pipeline types: stageload.pixal3d.plan.STAGES
        # (torch-free), the one source.
        stages=_pixal3d_stages(),
        # the options table's pixal3d entries (meshfacts/options.py), the export levers among them
        options=options_table.backend_options("pixal3d"),
        # runner.backends.pixal3d.TEXTURE_SIZES (checked by a test); no --height (unit box).
        texture_sizes=options_table.choices.TEXTURE_SIZES,
        texture_choices=True,
        height_range=None,
        install_hint="The Pixal3D backend is not installed in this version of the runner.",
        needs_torch=True,
        # the port folder exists and holds generate_mps.py and pixal3d/ (stageload.pixal3d.port.open
        # .locate_port: files only); importing the port and its names is left to the worker.
        precheck="runner.backends.pixal3d:precheck",
        # --export-process own (default): the export stage in a process of its own
        split_export="runner.backends.pixal3d:splits_export",
        # --export-engine bounded (default): the export process runs without torch
        torch_free_export="runner.backends.pixal3d:exports_without_torch",
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
