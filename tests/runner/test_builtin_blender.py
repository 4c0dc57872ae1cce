"""The built-in backend's GLB through Blender's own glTF importer (the real bpy module).

Runs in a subprocess so bpy's global state stays out of the test process.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PIL import Image

from runner.backends.builtin import generate

pytestmark = pytest.mark.blender

SCRIPT = r"""
import json, sys
import bpy
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.import_scene.gltf(filepath=sys.argv[1])
meshes = [o for o in bpy.context.scene.objects if o.type == "MESH"]
out = {"meshes": len(meshes)}
obj = meshes[0]
bpy.context.view_layer.update()
out["dimensions"] = list(obj.dimensions)
corners = [obj.matrix_world @ __import__("mathutils").Vector(c) for c in obj.bound_box]
out["min_z"] = min(c.z for c in corners)
out["materials"] = [m.name for m in obj.data.materials]
mat = obj.data.materials[0]
bsdf = next(n for n in mat.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
link = bsdf.inputs["Base Color"].links[0]
out["base_color_from"] = link.from_node.type
out["image_size"] = list(link.from_node.image.size)
# Which way does the front sheet face? Mean normal of faces whose centre is in front (Blender -Y).
me = obj.data
front = [p.normal for p in me.polygons if (obj.matrix_world @ p.center).y < -0.05]
out["front_normal_y"] = sum(n.y for n in front) / max(1, len(front))
print("RESULT " + json.dumps(out))
"""


def test_blender_imports_an_upright_textured_character(shared_images, tmp_path):
    pytest.importorskip("bpy")
    path = next((p for p in shared_images if p.name == "typical_humanoid_dwarf.png"),
                shared_images[0])
    with Image.open(path) as im:
        had_alpha = "A" in im.getbands()
        image = im.convert("RGBA")
    glb = tmp_path / "dwarf.glb"
    result = generate(image, glb, had_alpha=had_alpha)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(glb)], capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["meshes"] == 1 and out["materials"] == ["silhouette_inflation"]
    assert out["base_color_from"] == "TEX_IMAGE" and out["image_size"] == [1024, 1024]
    # glTF +Y up → Blender +Z up: 1 m tall, standing on the ground.
    assert abs(out["dimensions"][2] - 1.0) < 0.01 and abs(out["min_z"]) < 1e-4, out
    assert abs(out["dimensions"][1] - result["depth_m"]) < 0.01, out
    # glTF front (+Z) → Blender front view looks along +Y at the −Y side: front faces point −Y.
    assert out["front_normal_y"] < -0.3, out
