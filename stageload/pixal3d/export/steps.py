"""The export stage's sub-steps, seen from outside the port's code: ``on_call`` hooks on the
port's vendored ``o_voxel.postprocess`` (the module its native export bridge drives in-process)
turn each step into a ``stage`` event with ``"parent": "export"``.

Sub-steps, in order (``SUBSTEPS``), and the call that begins each one (names read in the port's
vendored o_voxel, pedronaugusto/trellis2-apple ``o-voxel/o_voxel/postprocess.py``, and in
Pixal3D-mac ``generate_mps.py`` / ``pixal3d/utils/o_voxel_native_export.py`` at 0be9e69a):

- ``prepare``: the export began (the port's pre-fill of holes, its temporary ``.npz``, the
  bridge reading it back);
- ``fill_holes``: ``postprocess.to_glb`` was called (its first step fills holes on the full
  decoded mesh);
- ``bvh``: ``postprocess._BVH(...)`` (a BVH over the full mesh, kept until the bake);
- ``remesh``: ``postprocess._remesh_narrow_band_dc(...)`` (remesh on);
- ``cleanup``: the remesh returned, or — remesh off — the BVH was built (cleanup and
  simplification to the decimation target);
- ``uv_unwrap``: ``uv_unwrap`` of the mesh backend ``to_glb`` created;
- ``bake``: ``uv_unwrap`` returned (rasterise, BVH look-ups, attribute sampling, material);
- ``write``: ``to_glb`` returned (the bridge's orientation fixes and the GLB written).

A step never goes backwards (a later hook for an earlier step is ignored). A name the port's
o_voxel lacks (e.g. an upstream build calling ``cumesh`` directly) is not hooked: its step is
then not marked and its time counts in the step before. The mesh backend's
hook is installed on each instance ``to_glb`` creates (``on_call`` on the module attribute
``_MeshBackend`` while ``to_glb`` runs only — the bridge patches that class's methods before
it calls ``to_glb``, and a wrapper in the module attribute then would receive them).

Levers applied here (``ResolvedExport``): ``free_between_steps`` runs ``gc.collect()`` and the
port's ``maybe_empty_cache(device)`` at every step change (the peer's "free Metal temporaries
between steps"); ``remesh_resolution`` (e.g. 512) wraps ``_remesh_narrow_band_dc`` to remesh at
``min(limit, resolution)``, recomputing its ``scale`` argument the way ``to_glb`` computes it
(``(resolution + 3·band)/resolution × extent``). ``remesh_limit_supported`` says whether the
port's ``to_glb`` calls it that way (read with ``ast`` from its source).

Not run here: the real Metal o_voxel/cumesh (no Mac); with ``PIXAL3D_NATIVE_SUBPROCESS=1`` the
port exports in another interpreter where no hook reaches, so only ``prepare`` and ``write``
are seen there.
"""
from __future__ import annotations

import ast
import gc
import inspect
import textwrap
from typing import Callable, Optional

from stageload.errors import HookError
from stageload.events import make_event
from stageload.hooks import on_call

SUBSTEPS = ("prepare", "fill_holes", "bvh", "remesh", "cleanup", "uv_unwrap", "bake", "write")
PARENT = "export"


def remesh_limit_supported(postprocess) -> tuple[bool, str]:
    """(True, "") when ``postprocess.to_glb`` remeshes through the module attribute
    ``_remesh_narrow_band_dc`` with ``resolution=``, ``scale=`` and ``band=`` keywords, which is
    what a remesh-resolution limit rewrites; else (False, the reason)."""
    if not callable(getattr(postprocess, "_remesh_narrow_band_dc", None)):
        return False, "its o_voxel.postprocess has no _remesh_narrow_band_dc to call"
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(postprocess.to_glb)))
    except (OSError, TypeError, SyntaxError) as exc:
        return False, f"the source of its o_voxel.postprocess.to_glb cannot be read ({exc})"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "_remesh_narrow_band_dc"):
            keys = {k.arg for k in node.keywords}
            if {"resolution", "scale", "band"} <= keys:
                return True, ""
            return False, ("its to_glb calls _remesh_narrow_band_dc without the resolution=, "
                           "scale= and band= keywords")
    return False, "its o_voxel.postprocess.to_glb never calls _remesh_narrow_band_dc"


def limited_remesh(original: Callable, limit: int) -> Callable:
    """``original`` (a ``_remesh_narrow_band_dc``) remeshing at ``min(limit, resolution)``; the
    ``scale`` keyword is recomputed for the new resolution from the box extent it encodes."""
    def remesh(*args, **kwargs):
        res, band = int(kwargs["resolution"]), float(kwargs.get("band", 1))
        if res > limit:
            extent = float(kwargs["scale"]) * res / (res + 3 * band)
            kwargs = {**kwargs, "resolution": limit, "scale": (limit + 3 * band) / limit * extent}
        return original(*args, **kwargs)
    return remesh


class ExportSteps:
    """Context manager: while active, the port's export reports its sub-steps to ``emit``.

    Args: ``emit`` (event sink), ``postprocess`` (the port's ``o_voxel.postprocess`` module, or
    None when it cannot be imported: then only ``prepare``/``write`` are marked by the caller),
    ``remesh`` (bool: the port will remesh — decides where ``cleanup`` begins),
    ``remesh_limit`` (int or None), ``free`` (callable run at each step change, or None).
    Attributes: ``seen`` (the sub-steps entered, in order).
    """

    def __init__(self, emit: Callable[[dict], None], postprocess, *, remesh: bool,
                 remesh_limit: Optional[int] = None, free: Optional[Callable[[], None]] = None):
        self._emit = emit
        self._pp = postprocess
        self._remesh = remesh
        self._limit = remesh_limit
        self._free = free
        self._hooks: list = []
        self._mesh_hook = None
        self._saved_remesh = None
        self.seen: list[str] = []

    def enter(self, name: str) -> None:
        """Begin sub-step ``name`` unless it is not after the current one."""
        if self.seen and SUBSTEPS.index(name) <= SUBSTEPS.index(self.seen[-1]):
            return
        if self._free is not None and self.seen:
            self._free()
        self.seen.append(name)
        self._emit(make_event("stage", stage=name, index=SUBSTEPS.index(name),
                              count=len(SUBSTEPS), parent=PARENT))

    def _to(self, name: str) -> Callable:
        return lambda *args, **kwargs: self.enter(name)

    def _watch_mesh(self, mesh, *args, **kwargs) -> None:
        try:
            self._hooks.append(on_call(mesh, "uv_unwrap", before=self._to("uv_unwrap"),
                                       after=self._to("bake")))
        except HookError:
            pass  # a backend without an instance __dict__: uv_unwrap stays inside cleanup

    def _begin_to_glb(self, *args, **kwargs) -> None:
        self.enter("fill_holes")
        if callable(getattr(self._pp, "_MeshBackend", None)):
            self._mesh_hook = on_call(self._pp, "_MeshBackend", after=self._watch_mesh)

    def _end_to_glb(self, *args, **kwargs) -> None:
        if self._mesh_hook is not None:
            self._mesh_hook.remove()
            self._mesh_hook = None
        self.enter("write")

    def __enter__(self) -> "ExportSteps":
        self.enter("prepare")
        pp = self._pp
        if pp is None:
            return self
        if self._limit is not None:
            self._saved_remesh = pp._remesh_narrow_band_dc
            pp._remesh_narrow_band_dc = limited_remesh(self._saved_remesh, self._limit)
        wanted = [("to_glb", self._begin_to_glb, self._end_to_glb),
                  ("_BVH", self._to("bvh"), None if self._remesh else self._to("cleanup")),
                  ("_remesh_narrow_band_dc", self._to("remesh"), self._to("cleanup"))]
        for name, before, after in wanted:
            if callable(getattr(pp, name, None)):  # an o_voxel without it: fewer sub-steps
                self._hooks.append(on_call(pp, name, before=before, after=after))
        return self

    def __exit__(self, *exc) -> None:
        for hook in reversed(self._hooks + ([self._mesh_hook] if self._mesh_hook else [])):
            hook.remove()
        self._hooks, self._mesh_hook = [], None
        if self._saved_remesh is not None:
            self._pp._remesh_narrow_band_dc = self._saved_remesh
            self._saved_remesh = None


def freer(gm, device) -> Callable[[], None]:
    """What ``free_between_steps`` runs: ``gc.collect()`` then the port's
    ``maybe_empty_cache(device)`` (``torch.mps.empty_cache()`` on MPS; nothing on the CPU)."""
    def free() -> None:
        gc.collect()
        gm.maybe_empty_cache(device)
    return free
