"""Registration of the add-on's classes, and the guarantees around it: disabling the add-on or
quitting Blender stops any runner it started (``unregister`` and an ``atexit`` hook both call
:meth:`controller.Controller.shutdown`; the runner also stops by itself when its stdin pipe —
held only by Blender — closes)."""
from __future__ import annotations

import atexit

import bpy

from . import controller, operators, panel, preferences

CLASSES = preferences.CLASSES + panel.CLASSES + operators.CLASSES


def _shutdown() -> None:
    controller.CONTROLLER.shutdown()


def register() -> None:
    """Register every class, the scene settings and the quit hook."""
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    panel.register_props()
    atexit.register(_shutdown)


def unregister() -> None:
    """Stop the running job (waits until the runner has exited), then unregister."""
    _shutdown()
    atexit.unregister(_shutdown)
    for fn in (controller.tick, preferences.check_poll):
        if bpy.app.timers.is_registered(fn):
            bpy.app.timers.unregister(fn)
    panel.unregister_props()
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
