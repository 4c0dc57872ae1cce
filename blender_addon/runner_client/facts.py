"""The product's facts as the add-on reads them: the ``meshfacts`` package (byte units, the
event schema, the error kinds, the options table), imported by name.

``meshfacts`` is standard-library only and imports nothing of ``runner`` or ``stageload``, so
importing it keeps torch and the runner's packages out of Blender's process. Where it comes from:

- the installed extension: the copy the zip carries in its runtime folder
  (``<extension>/runtime/meshfacts``, the same files the runner's interpreter imports from
  ``PYTHONPATH``), imported as a subpackage of this add-on (``runtime`` has no ``__init__``, a
  namespace package) — an extension imports its own files relative to its package and never
  changes ``sys.path``;
- a repository checkout (tests, ``headless.py`` run from the checkout): the top-level
  ``meshfacts`` package next to ``blender_addon/`` (on ``sys.path`` there).

tests/blender/test_runner_facts.py checks that ``meshfacts`` uses the standard library only and
pins the add-on's remaining copies (image suffixes, which backends need torch).
"""
from __future__ import annotations

from pathlib import Path

if (Path(__file__).resolve().parents[1] / "runtime" / "meshfacts").is_dir():
    from ..runtime.meshfacts import errors as _errors
    from ..runtime.meshfacts import events as schema
    from ..runtime.meshfacts import options, units  # noqa: F401  (the add-on reads options)
else:  # a checkout: no runtime folder inside the add-on
    from meshfacts import errors as _errors
    from meshfacts import events as schema
    from meshfacts import options, units  # noqa: F401

#: The protocol version the add-on speaks (``meshfacts.events.PROTOCOL_VERSION``).
PROTOCOL_VERSION: int = schema.PROTOCOL_VERSION
#: error kind → exit status (``meshfacts.errors.KINDS``).
EXIT_CODES: dict[str, int] = {kind: k.exit_code for kind, k in _errors.KINDS.items()}


def format_size(n, unknown: str = "unknown") -> str:
    """Bytes for people, as ``meshfacts.units.format_size`` writes them (``8.3 GiB``)."""
    return units.format_size(n, unknown=unknown)
