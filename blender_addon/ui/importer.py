"""Bring a runner's GLB into the scene with Blender's own glTF importer. Main thread only.

One mesh object named after the image, at a given location (the 3D cursor), in a collection
("Image to Mesh" or a batch collection under it), helper empties and other non-mesh objects of
the import removed, the material with its base-colour image texture as the importer made it, and
the run's metadata in custom properties — among them the kept asset (``NAME.asset.npz``, a
Pixal3D run's ``--keep-asset``) the object can be re-exported from, recorded only when the file
exists and read back only through :func:`recorded_asset`, which checks it again.
"""
from __future__ import annotations

from pathlib import Path

import bpy

ROOT_COLLECTION = "Image to Mesh"

#: Custom property names set on the imported object.
PROP_BACKEND, PROP_SEED, PROP_PEAK, PROP_TRACE, PROP_IMAGE, PROP_GLB = (
    "image_to_mesh_backend", "image_to_mesh_seed", "image_to_mesh_peak_footprint",
    "image_to_mesh_trace", "image_to_mesh_image", "image_to_mesh_glb")
#: The kept asset (absolute path of an existing ``.npz``) the object can be re-exported from.
PROP_ASSET = "image_to_mesh_asset"
#: The kept asset's suffix beside the GLB (``runner/job/run.py`` ``kept_asset_path``).
ASSET_SUFFIX = ".asset.npz"
#: metres between the objects of a batch, side by side along X
BATCH_SPACING = 1.5


def imported(glb: str | Path) -> bool:
    """True when an object of the open file was imported from ``glb`` (its ``PROP_GLB``)."""
    glb = str(glb)
    return any(o.get(PROP_GLB) == glb for o in bpy.data.objects)


class MeshImportError(RuntimeError):
    """The GLB could not be imported as a mesh; the message says why."""


def ensure_collection(scene: bpy.types.Scene, name: str = ROOT_COLLECTION,
                      parent: bpy.types.Collection | None = None) -> bpy.types.Collection:
    """The collection ``name`` linked under ``parent`` (default: the scene's master collection),
    created or linked as needed."""
    parent = parent or scene.collection
    coll = bpy.data.collections.get(name)
    if coll is None:
        coll = bpy.data.collections.new(name)
    if coll.name not in parent.children and coll != parent:
        parent.children.link(coll)
    return coll


def base_color_image(obj: bpy.types.Object) -> bpy.types.Image | None:
    """The first image texture that feeds a Principled BSDF's Base Color in ``obj``'s materials
    (searched upstream through any nodes in between, e.g. the importer's vertex-colour mix), or
    None."""
    for slot in obj.material_slots:
        image = _base_color_image(slot.material)
        if image is not None:
            return image
    return None


def _base_color_image(mat) -> bpy.types.Image | None:
    # No Material.use_nodes check: it is deprecated in Blender 5.0 (materials always use
    # nodes there); a material without a node tree has no texture either way.
    if mat is None or mat.node_tree is None:
        return None
    for node in mat.node_tree.nodes:
        if node.type != "BSDF_PRINCIPLED":
            continue
        todo = [link.from_node for link in node.inputs["Base Color"].links]
        seen = set()
        while todo:
            n = todo.pop()
            if n.name in seen:
                continue
            seen.add(n.name)
            if n.type == "TEX_IMAGE" and n.image is not None:
                return n.image
            for inp in n.inputs:
                todo.extend(link.from_node for link in inp.links)
    return None


def name_materials(obj: bpy.types.Object, name: str) -> None:
    """Name ``obj``'s materials and base-colour textures after the image (``name``): material
    ``goblin`` and texture ``goblin_base_color`` instead of the importer's ``Material_0`` and
    ``Image_0``; a second material gets ``goblin_2`` … (Blender appends ``.001`` on a clash
    with an earlier run's)."""
    for i, slot in enumerate(obj.material_slots):
        if slot.material is None:
            continue
        suffix = "" if i == 0 else f"_{i + 1}"
        slot.material.name = f"{name}{suffix}"
        image = _base_color_image(slot.material)
        if image is not None:
            image.name = f"{name}{suffix}_base_color"


def free_name(name: str, obj=None) -> str:
    """``name``, or ``name_2``, ``name_3`` … — the first no other object in the file has (the
    project's pattern for later runs, docs/blender.md; Blender's own would be ``name.001``).
    ``obj``: the object being named (its own current name does not count)."""
    taken = {o.name for o in bpy.data.objects if o is not obj}
    if name not in taken:
        return name
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


def window_context():
    """A context override with a window when Blender has one: timer callbacks run without a
    window, and the glTF importer and view-layer selection want one. A no-op override in
    background mode (no windows)."""
    wm = bpy.context.window_manager
    if wm is not None and wm.windows and bpy.context.window is None:
        win = wm.windows[0]
        return bpy.context.temp_override(window=win, screen=win.screen)
    return bpy.context.temp_override()


def import_glb(glb: str | Path, name: str, location, collection: bpy.types.Collection,
               metadata: dict, after_existing: bool = False) -> bpy.types.Object:
    """Import ``glb`` and return the one mesh object made from it.

    ``name``: object and mesh name (the image's stem); ``location``: 3 floats in metres (world
    space); ``collection``: where the object ends up (it is unlinked from any other);
    ``metadata``: keys ``backend`` (str), ``seed`` (int), ``peak`` (bytes or None), ``trace``
    (path str), ``image`` (path str), ``asset`` (the kept asset's path or None: recorded as
    ``PROP_ASSET`` only when :func:`asset_file` accepts it) → custom properties (``PROP_*``;
    the peak is stored as a float because Blender's integer properties are 32-bit;
    ``PROP_GLB`` records ``glb``).
    ``after_existing``: place it :data:`BATCH_SPACING` metres along X after each mesh object
    already in ``collection`` (a batch's results side by side, a resumed batch after the
    first run's).

    Several mesh objects in one GLB are joined into one. Raises :class:`MeshImportError` when
    the file is missing or holds no mesh (anything the import created is removed again).
    """
    glb = Path(glb)
    with window_context():  # the glTF importer and the selection want a window (once here)
        obj = _join(_import_meshes(glb))
        name = free_name(name, obj)
        obj.name = name
        obj.data.name = name
        name_materials(obj, name)
        _place(obj, location, collection, after_existing)
        _record(obj, glb, metadata)
        _select_only(obj)
    return obj


def _import_meshes(glb: Path) -> list:
    """Run Blender's glTF importer on ``glb`` and return the mesh objects it made, their
    parents (the importer's helper empties) baked into their world matrices and every non-mesh
    object it made removed. Raises :class:`MeshImportError` when the file is missing, cannot be
    read or holds no mesh (anything the import created is removed again)."""
    if not glb.is_file():
        raise MeshImportError(f"The runner's GLB is missing: {glb}")
    before = set(bpy.data.objects)
    result = bpy.ops.import_scene.gltf(filepath=str(glb), import_pack_images=True)
    new = [o for o in bpy.data.objects if o not in before]
    if "FINISHED" not in result:
        for o in new:
            bpy.data.objects.remove(o, do_unlink=True)
        raise MeshImportError(f"Blender's glTF importer could not read {glb.name}")
    meshes = [o for o in new if o.type == "MESH"]
    if not meshes:
        for o in new:
            bpy.data.objects.remove(o, do_unlink=True)
        raise MeshImportError(f"{glb.name} holds no mesh")
    # Bake parents (the importer's helper empties) into the meshes, then drop every non-mesh.
    for o in meshes:
        mw = o.matrix_world.copy()
        o.parent = None
        o.matrix_world = mw
    for o in new:
        if o.type != "MESH":
            bpy.data.objects.remove(o, do_unlink=True)
    return meshes


def _join(meshes: list) -> bpy.types.Object:
    """One mesh object of ``meshes`` (non-empty): the first, with the others joined into it."""
    obj = meshes[0]
    if len(meshes) > 1:
        with bpy.context.temp_override(active_object=obj, object=obj,
                                       selected_objects=meshes, selected_editable_objects=meshes):
            bpy.ops.object.join()
    return obj


def _place(obj: bpy.types.Object, location, collection: bpy.types.Collection,
           after_existing: bool) -> None:
    """Move ``obj`` into ``collection`` alone (unlinked from any other) at ``location`` (3
    floats, metres), shifted along X past the collection's mesh objects when
    ``after_existing`` (:func:`import_glb`)."""
    location = list(location)
    if after_existing:
        location[0] += BATCH_SPACING * sum(1 for o in collection.objects if o.type == "MESH")
    for c in list(obj.users_collection):
        c.objects.unlink(obj)
    collection.objects.link(obj)
    obj.location = tuple(location)


def _record(obj: bpy.types.Object, glb: Path, metadata: dict) -> None:
    """The run's facts as ``obj``'s custom properties (``PROP_*``; see :func:`import_glb`)."""
    obj[PROP_GLB] = str(glb)
    obj[PROP_BACKEND] = str(metadata.get("backend") or "")  # none: a re-export's own
    obj[PROP_SEED] = int(metadata.get("seed", 0))
    peak = metadata.get("peak")
    obj[PROP_PEAK] = float(peak) if peak is not None else -1.0
    obj[PROP_TRACE] = str(metadata.get("trace", ""))
    obj[PROP_IMAGE] = str(metadata.get("image", ""))
    asset, _why = asset_file(metadata.get("asset"))
    if asset is not None:
        obj[PROP_ASSET] = str(asset)
    elif PROP_ASSET in obj:
        del obj[PROP_ASSET]


def asset_file(value) -> tuple[Path | None, str]:
    """``(path, "")`` when ``value`` names a kept asset that can be re-exported — a string,
    an absolute path ending in ``.npz``, an existing non-empty file — else ``(None, why)``,
    ``why`` for people ("" when ``value`` is empty: no asset was kept). The file's content is
    the runner's to check (``runner export``: ``bad_asset``)."""
    if value is None or value == "":
        return None, ""
    if not isinstance(value, str) or "\0" in value:
        return None, f"the recorded asset {value!r:.80} is not a path"
    path = Path(value)
    if not path.is_absolute() or path.suffix.lower() != ".npz":
        return None, f"the recorded asset {value!r:.200} is not an absolute .npz path"
    try:
        ok = path.is_file() and path.stat().st_size > 0
    except OSError:
        ok = False
    if not ok:
        return None, f"its kept asset is gone: {path}"
    return path, ""


def recorded_asset(obj) -> tuple[Path | None, str]:
    """The kept asset ``obj`` (a Blender object, or None) can be re-exported from, checked
    again now (:func:`asset_file`): ``(path, "")``, or ``(None, why)`` with a sentence for
    people saying what is missing and what to do (not imported by the add-on, no asset kept,
    the file gone or the property not a path)."""
    if obj is None:
        return None, "Select an object imported by Image to Mesh to re-export it."
    if obj.get(PROP_GLB) is None:
        return None, f"{obj.name} was not imported by Image to Mesh: nothing to re-export."
    value = obj.get(PROP_ASSET)
    if value is None:
        return None, (f"No asset was kept for {obj.name}. Generate it with Pixal3D and "
                      "“Keep asset for re-export” on (Export sub-panel) to re-export it.")
    path, why = asset_file(value)
    if path is None:
        return None, (f"{obj.name} cannot be re-exported: {why or 'no asset recorded'}. "
                      "Generate it again with “Keep asset for re-export” on.")
    return path, ""


def _select_only(obj: bpy.types.Object) -> None:
    """Make ``obj`` the only selected object and the active one in the current view layer."""
    layer = bpy.context.view_layer
    if layer is None:
        return
    layer.update()  # the view layer's object list still names the empties removed above
    if obj.name not in layer.objects:
        return
    for o in layer.objects:
        if o is not None and o.select_get():
            o.select_set(False)
    obj.select_set(True)
    layer.objects.active = obj
