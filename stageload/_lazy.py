"""Lazy public names for a package (PEP 562 module ``__getattr__`` and ``__dir__``).

A package lists ``name → submodule`` and imports the submodule only when the name is first
used, so importing the package stays cheap (``python -m stageload guard`` and the runner's
supervisor must never pay for torch).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str],
                 namespace: dict) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public names live in submodules.

    ``exports`` maps each public name to the module that defines it; ``namespace`` is the
    package's ``globals()``, where a name is cached after its first use. ``__getattr__`` raises
    ``AttributeError`` for a name not in ``exports``.
    """
    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
