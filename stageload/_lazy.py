"""Lazy public names for a package (PEP 562 module ``__getattr__`` and ``__dir__``).

A package lists ``submodule → the public names it defines`` and imports the submodule only when one
of its names is first used, so importing the package stays cheap (``python -m stageload guard`` and
the runner's supervisor must never pay for torch).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, Mapping


def lazy_exports(package: str, exports: Mapping[str, Iterable[str]],
                 namespace: dict) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public names live in submodules.

    ``exports`` maps each submodule (absolute name) to the public names it defines;
    ``namespace`` is the package's ``globals()``, where a name is cached after its first use.
    ``__getattr__`` raises ``AttributeError`` for a name not in ``exports``; a name listed
    under two submodules raises ``ValueError`` here.

    Example::

        __getattr__, __dir__ = lazy_exports(__name__, {"pkg.heavy": ("Model",)}, globals())
    """
    owner: dict[str, str] = {}
    for module, names in exports.items():
        for name in names:
            if owner.setdefault(name, module) != module:
                raise ValueError(f"{name!r} is listed under {owner[name]!r} and {module!r}")
    exports = owner

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # a name to module table imported on first use: `import stageload` must not import
        # torch (the runner's supervisor and the guard import the light parts only)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
