"""Staged Pixal3D: the Pixal3D-mac adapter (the only part of stageload that knows Pixal3D).

Use::

    from stageload.pixal3d import Pixal3DRun, RunOptions
    run = Pixal3DRun("/path/to/Pixal3D-mac", RunOptions(seed=42, texture_size=2048),
                     device="mps", events=print)
    run.generate("character.png", "character.glb")

or ``python -m stageload.pixal3d run IMAGE -o OUT.glb --pixal3d-dir DIR [--load eager]
[--keep-resident BYTES] [--fingerprint FOLDER] [--trace FILE]``, ``python -m stageload.pixal3d
check [--pixal3d-dir DIR]`` and ``python -m stageload.pixal3d compare A B``. User notes:
docs/pixal3d.md.

What the adapter relies on in the port — the functions, signatures and call orders read from
the port's sources, and where the plan differs from the product's: docs/ARCHITECTURE.md
("The Pixal3D adapter and the port"). Those facts are data in ``port/known.py``, checked by
``port/static.py`` and ``port/open.py`` before anything is loaded.

Not verified here (no Mac, no MPS, no real weights): see docs/pixal3d.md.
"""
from __future__ import annotations

from .._lazy import lazy_exports

#: submodule -> the public names it defines (imported on first use)
_EXPORTS = {
    "stageload.pixal3d.adapter": ("Pixal3DRun",),
    "stageload.pixal3d.options": ("RunOptions",),
    "stageload.pixal3d.build.staged": ("StagedRembg",),
    "stageload.pixal3d.port.open": ("open_port", "check_port", "static_report", "locate_port",
                                    "Port"),
    "stageload.pixal3d.errors": ("PortError", "PortMissing", "PortVersionError", "KnobRefused",
                                 "EmptyMeshError"),
    "stageload.pixal3d.port.static": ("check_static",),
    "stageload.pixal3d.plan": ("STAGES", "plan_for", "keep_across_gap"),
    "stageload.pixal3d.fingerprint": ("compare", "FingerprintRecorder"),
}

__all__ = sorted(name for names in _EXPORTS.values() for name in names)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
