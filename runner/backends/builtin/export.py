"""Write the body as a GLB with a PBR base-colour texture (stage ``export``), with trimesh.

glTF 2.0 conventions (Khronos glTF 2.0 specification, §3.4 "Coordinate System and Units"):
+Y up, +Z is the asset's front, metres. trimesh writes the texture as an embedded PNG and flips
v to glTF's top-left origin itself.
"""
from __future__ import annotations

import os

import numpy as np
import trimesh
from PIL import Image
from trimesh.exchange.gltf import export_glb
from trimesh.visual.material import PBRMaterial
from trimesh.visual.texture import TextureVisuals

#: material and node name in the GLB: the method, named for what it is.
MATERIAL_NAME = "silhouette_inflation"


def build_mesh(vertices: np.ndarray, faces: np.ndarray, uv: np.ndarray, texture: Image.Image,
               *, name: str = "character") -> trimesh.Trimesh:
    """A textured trimesh mesh (not processed: vertices and faces are kept exactly as given).

    Args:
        vertices: float ``(N, 3)`` metres, +Y up, front towards +Z.
        faces: int ``(F, 3)`` counter-clockwise from outside.
        uv: float ``(N, 2)`` texture coordinates (v up, trimesh's convention).
        texture: the RGB base-colour image.
    """
    material = PBRMaterial(
        name=MATERIAL_NAME,
        baseColorTexture=texture,
        baseColorFactor=[255, 255, 255, 255],
        metallicFactor=0.0,
        roughnessFactor=0.8,
    )
    mesh = trimesh.Trimesh(
        vertices=vertices, faces=faces, visual=TextureVisuals(uv=uv, material=material),
        process=False
    )
    mesh.metadata["name"] = name
    return mesh


def write_glb(mesh: trimesh.Trimesh, output: str | os.PathLike, *, name: str = "character") -> int:
    """Write ``mesh`` as a binary glTF to exactly ``output`` (with smooth vertex normals).

    Returns:
        The file's size in bytes.

    Raises:
        OSError: the file cannot be written (the caller owns temporary names and renames).
    """
    scene = trimesh.Scene()
    scene.add_geometry(mesh, node_name=name, geom_name=name)
    data = export_glb(scene, include_normals=True)
    with open(output, "wb") as f:
        f.write(data)
    return len(data)
