"""Run with a bpy interpreter: ``python blender_import_glb.py GLB`` imports the GLB with the
add-on's importer (blender_addon/ui/importer.py, the real bpy module) into a factory scene and
prints one JSON line: the object's world bounding box (metres, Blender's Z-up axes), its
base colour image's size, and whether a metallic-roughness texture feeds the material."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import bpy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's blender_addon
from blender_addon.ui import importer

bpy.ops.wm.read_factory_settings(use_empty=True)
coll = importer.ensure_collection(bpy.context.scene)
obj = importer.import_glb(sys.argv[1], "asset", (0.0, 0.0, 0.0), coll, {"backend": "test"})
bpy.context.view_layer.update()
world = [obj.matrix_world @ v.co for v in obj.data.vertices]
lo = [min(p[i] for p in world) for i in range(3)]
hi = [max(p[i] for p in world) for i in range(3)]
image = importer.base_color_image(obj)
links = [(link.from_node.type, link.to_socket.name) for slot in obj.material_slots
         for link in slot.material.node_tree.links]
print("RESULT " + json.dumps({"min": lo, "max": hi, "faces": len(obj.data.polygons),
                              "image": list(image.size) if image else None,
                              "links": sorted(set(links))}))
