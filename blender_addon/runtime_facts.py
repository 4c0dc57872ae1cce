"""Facts the runner owns, read from the runner's own stdlib-only modules in the bundled runtime.

Blender's extension manager does the same with its command-line tool: it loads the module file
it also runs as a program. Here the add-on loads four files of ``runtime/`` (or of the
checkout) by path, under private names, without importing the ``runner`` or ``stageload``
packages into Blender (their ``__init__`` and the rest stay out of Blender's process):

- ``stageload/units.py``: the one byte formatter (binary multiples labelled KiB/MiB/GiB), so the
  panel and the memory chart print one figure for one peak;
- ``runner/event_schema.py``: the event protocol version and every event kind with its fields and
  their types, which the add-on checks each event it reads against (``events.clean``);
- ``runner/errors.py``: the error kinds and their exit statuses (the headless script exits with
  them);
- ``runner/options.py``: the options table — every job option with its type, default, choices
  or range, help and advice (it loads ``stageload/pixal3d/choices.py`` by path in turn); the
  panel's and the preferences' properties, the job description (``job.py``) and
  ``headless.py``'s arguments are made from it.

All of them use the standard library only (tests/blender/test_runner_facts.py checks it, and
pins the add-on's remaining copies: image suffixes and which backends need torch).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from . import config


def _load(relative: str):
    """The module at ``runtime_dir()/relative``, loaded by path as ``_image_to_mesh_<stem>``
    (cached in ``sys.modules`` under that private name). Raises ``config.ConfigError`` when the
    runtime is missing, ``ImportError`` when the file cannot be loaded."""
    name = f"_image_to_mesh_{Path(relative).stem}"
    if name in sys.modules:
        return sys.modules[name]
    path = config.runtime_dir() / relative
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


units = _load("stageload/units.py")
#: The runner's event schema (``runner/event_schema.py``): ``KINDS``, ``clean`` …
schema = _load("runner/event_schema.py")
_errors = _load("runner/errors.py")
#: The options table (``runner/options.py``): ``options.addon_options()``, ``property_spec`` …
options = _load("runner/options.py")

PROTOCOL_VERSION: int = schema.PROTOCOL_VERSION
#: error kind → exit status (runner/errors.py ``KINDS``).
EXIT_CODES: dict[str, int] = {kind: k.exit_code for kind, k in _errors.KINDS.items()}


def format_size(n, unknown: str = "unknown") -> str:
    """Bytes for people, as ``stageload.units.format_size`` writes them (``8.3 GiB``)."""
    return units.format_size(n, unknown=unknown)
