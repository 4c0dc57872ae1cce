"""The port's fallback export paths, watched from outside its code: each one taken is a
``warning`` event (``fallback``, ``cause``, ``differs``), an error with ``strict``, and a disk
that filled during the native export is the ``ENOSPC`` error it was, never a fallback.

Read in Pixal3D-mac ``generate_mps.py`` at 0be9e69a (``asset_to_glb``,
``try_export_native_o_voxel_glb``, ``_run_native_o_voxel_in_process``); the full list, with
what each changes in the GLB, is in docs/pixal3d.md ("Fallbacks"). The port's native export
returns False — and ``asset_to_glb`` then calls ``export_fallback_texture_glb`` — when its
bridge module or ``o_voxel.postprocess`` cannot be imported (status 127), when the bridge
raises anything (``MemoryError``, ``OSError`` ``[Errno 28]`` … are caught and printed, status
1), when it wrote no GLB, when ``PIXAL3D_NATIVE_SUBPROCESS=1`` finds no native interpreter,
and when anything else in its ``try`` raises (e.g. writing its temporary ``.npz``). A mesh
without voxel attributes is exported without texture (``export_geometry_only``).

How: for the ``with`` block, :class:`FallbackWatch` wraps (``stageload.patching.patched``)
the bridge's ``main`` and the port's ``_write_mesh_npz`` to record what they raise (then
re-raise it, so the port behaves as written), ``_run_native_o_voxel_in_process`` to record its
status, and the two fallback exporters, which decide when called: the recorded error is a full
disk → raise it; ``strict`` → :class:`ExportFallbackRefused`; else one ``warning`` event, then
the port's own fallback runs. ``--force-texture-fallback`` / ``--no-texture`` asked for are
not fallbacks. Not run here: the real port's Metal o_voxel (the stand-in mirrors its control
flow).
"""
from __future__ import annotations

import contextlib
import errno
from typing import Callable, Optional

from stageload.events import make_event
from stageload.patching import patched
from stageload.pixal3d.errors import PortError

SOURCE = "Pixal3D-mac generate_mps.py asset_to_glb (0be9e69a); docs/pixal3d.md, Fallbacks"
BRIDGE = "pixal3d.utils.o_voxel_native_export"

#: fallback id → what differs in the GLB (for the warning event and docs/pixal3d.md).
DIFFERS = {
    "fallback_baker": "the port's simpler fallback export (export_fallback_texture_glb): its own "
                      "UV unwrap and texture bake of a mesh decimated to --bake-face-target "
                      "faces, instead of the native o_voxel export (hole filling, remesh, "
                      "simplification to the decimation target, PBR bake): other face counts "
                      "and another texture",
    "geometry_only": "a GLB without texture (export_geometry_only): the decoded mesh has no voxel "
                     "attributes to bake",
}
_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", -1))


class ExportFallbackRefused(PortError):
    """``strict``: the port was about to change its export method (``missing``: the fallback
    id). The runner maps it to ``export_fallback``."""


def disk_full(exc: Optional[BaseException]) -> Optional[OSError]:
    """The ``OSError`` with ``ENOSPC``/``EDQUOT`` in ``exc``'s cause chain, or None."""
    seen = []
    while exc is not None and all(exc is not s for s in seen):
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return exc
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return None


class FallbackWatch:
    """Context manager around the port's ``asset_to_glb`` (see the module docstring).

    ``gm``: the port's ``generate_mps`` module; ``args``: the port's namespace for this export;
    ``emit``: event sink; ``strict``: refuse any fallback. ``taken``: the fallback ids taken.
    Raises (from inside the block) ``ExportFallbackRefused`` or the recorded full-disk
    ``OSError``."""

    def __init__(self, gm, args, emit: Callable[[dict], None], strict: bool = False):
        self.gm, self.args, self.emit, self.strict = gm, args, emit, strict
        self.errors: list[BaseException] = []
        self.status: Optional[int] = None
        self.taken: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "FallbackWatch":
        gm, stack = self.gm, self._stack
        try:
            from pixal3d.utils import o_voxel_native_export as bridge  # BRIDGE, from the port
        except Exception:  # the port then fails its own import (status 127): recorded there
            bridge = None
        if bridge is not None and callable(getattr(bridge, "main", None)):
            stack.enter_context(patched(bridge, "main", self._recording(bridge.main)))
        if callable(getattr(gm, "_write_mesh_npz", None)):
            stack.enter_context(patched(gm, "_write_mesh_npz", self._recording(gm._write_mesh_npz)))
        if callable(getattr(gm, "_run_native_o_voxel_in_process", None)):
            stack.enter_context(patched(gm, "_run_native_o_voxel_in_process",
                                        self._status_of(gm._run_native_o_voxel_in_process)))
        for name, fallback in (("export_fallback_texture_glb", "fallback_baker"),
                               ("export_geometry_only", "geometry_only")):
            if callable(getattr(gm, name, None)):
                stack.enter_context(patched(gm, name, self._deciding(getattr(gm, name), fallback)))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _recording(self, fn: Callable) -> Callable:
        def recorded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                self.errors.append(exc)
                raise
        return recorded

    def _status_of(self, fn: Callable) -> Callable:
        def run(*args, **kwargs):
            self.status = fn(*args, **kwargs)
            return self.status
        return run

    def asked(self, fallback: str) -> bool:
        """Whether the person asked for this export (not a fallback)."""
        if fallback == "geometry_only":
            return bool(getattr(self.args, "no_texture", False))
        return bool(getattr(self.args, "force_texture_fallback", False))

    def cause(self) -> str:
        """Why the native export did not give the GLB, as far as it was seen."""
        if self.errors:
            exc = self.errors[-1]
            return f"the native o_voxel export raised {type(exc).__name__}: {exc}"
        if self.status == 127:
            return ("the native o_voxel bridge or o_voxel.postprocess cannot be imported in "
                    "this interpreter (status 127)")
        if self.status not in (None, 0):
            return f"the native o_voxel export ended with status {self.status}"
        if self.status == 0:
            return "the native o_voxel export wrote no GLB (or an empty one)"
        return "the port did not run its native o_voxel export (see its log on stderr)"

    def _deciding(self, fn: Callable, fallback: str) -> Callable:
        def decide(*args, **kwargs):
            if self.asked(fallback):
                return fn(*args, **kwargs)
            if fallback == "geometry_only":
                cause = "the decoded mesh has no voxel attributes (coords/attrs)"
            else:
                full = next((disk_full(e) for e in reversed(self.errors) if disk_full(e)), None)
                if full is not None:
                    raise full  # a full disk is disk_full, not a reason to export another way
                cause = self.cause()
            self.taken.append(fallback)
            if self.strict:
                raise ExportFallbackRefused(
                    f"The port's export fell back ({fallback}): {cause}. It would have written "
                    f"{DIFFERS[fallback]}.", "Free memory or disk space and run again, or drop "
                    "--strict-export to accept the fallback export (a warning says so).",
                    (fallback,))
            self.emit(make_event("warning", message=f"The export fell back ({fallback}): "
                                 f"{cause}; the GLB is {DIFFERS[fallback]}.", source=SOURCE,
                                 fallback=fallback, cause=cause, differs=DIFFERS[fallback]))
            return fn(*args, **kwargs)
        return decide
