"""The stand-in Pixal3D-mac port, for tests and the benchmark (not part of the product).

``PORT_DIR`` is a port folder (``generate_mps.py`` + ``pixal3d/``) with Pixal3D-mac's names,
signatures and control flow at commit 0be9e69a and tiny models (see ``port/README.md``); point
``--pixal3d-dir`` / ``Pixal3DRun(PORT_DIR)`` / ``open_port(PORT_DIR)`` at it.
``make_weights(root, scale)`` writes its weights (see ``port/make_weights.py``) and
``weights_module()`` is that module (``REAL_BYTES``, ``MODELS``, ``TEST_DECODERS``,
``REAL_DECODERS``).

Import it as ``from standin import PORT_DIR, make_weights`` from the repository root: pytest
puts the root on ``sys.path`` (``pythonpath = ["."]`` in pyproject.toml) and ``python -m``
does for the current folder. The port folder itself is put on ``sys.path`` by whoever imports
the port (``stageload.pixal3d.port.open.open_port``, or ``make_weights`` here), as for the real one.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The stand-in port folder.
PORT_DIR = Path(__file__).resolve().parent / "port"

_MODULE = "standin_make_weights"


def weights_module() -> ModuleType:
    """``port/make_weights.py`` as a module (loaded once; it puts ``PORT_DIR`` on ``sys.path``
    for the port's own imports, as running the script does)."""
    if _MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_MODULE, PORT_DIR / "make_weights.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE] = module
        spec.loader.exec_module(module)
    return sys.modules[_MODULE]


def make_weights(root, scale: float = 1e-4, seed: int = 0, decoders: str = "test"):
    """Write every stand-in checkpoint under ``root`` at ``scale`` x the real sizes (the
    decoders at ``decoders`` widths: ``"test"`` or ``"real"``); returns the ``WeightsInfo`` of
    ``port/make_weights.py`` (``env``, ``model_path``, ``bytes``). Raises ``ValueError`` for a
    scale outside (0, 1] or another ``decoders``."""
    return weights_module().make_weights(root, scale=scale, seed=seed, decoders=decoders)
