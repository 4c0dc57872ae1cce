"""Write the GLB the way the port's o_voxel ``to_glb`` builds it, through trimesh: glTF 2.0 PBR
material with ``baseColorTexture`` = RGBA (alpha from the alpha channel), a
``metallicRoughnessTexture`` with G = roughness and B = metallic (R = 0),
``metallicFactor`` = ``roughnessFactor`` = 1, ``alphaMode`` BLEND when the baked alpha's
minimum over the covered texels is below 250 (else OPAQUE), double-sided; positions and
normals turned Y-up as the port does, (x, y, z) → (x, z, −y) (a rotation: winding kept).

The file is written under a temporary name in the output's folder and renamed onto the output
only when complete, so a failure or a cancel never leaves a partial GLB.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

BLEND_BELOW = 250


def y_up(points: np.ndarray) -> np.ndarray:
    """(x, y, z) → (x, z, −y), float32 [N, 3]."""
    p = np.asarray(points, dtype=np.float32)
    return np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1)


def vertex_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Area-weighted vertex normals, unit length (float32 [V, 3]; zero where undefined)."""
    tri = vertices[faces].astype(np.float64)
    cross = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    index = faces.reshape(-1)
    normals = np.stack([np.bincount(index, weights=np.repeat(cross[:, axis], 3),
                                    minlength=len(vertices)) for axis in range(3)], axis=1)
    length = np.linalg.norm(normals, axis=1, keepdims=True)
    return (normals / np.where(length > 0, length, 1.0)).astype(np.float32)


def alpha_mode(alpha: np.ndarray, covered: np.ndarray) -> str:
    """``BLEND`` when the covered texels' smallest alpha (0..255) is below 250, else
    ``OPAQUE`` (the port's rule)."""
    used = alpha[covered]
    return "BLEND" if used.size and int(used.min()) < BLEND_BELOW else "OPAQUE"


def write(path, vertices, faces, uv, normals, channels, covered) -> dict:
    """Write the GLB at ``path`` (replaced only when complete). ``channels`` uint8 [T, T, 6]
    (rows are v, glTF's texture orientation); ``uv`` [W, 2] with v downwards. Returns
    ``{"bytes", "alpha_mode"}``."""
    import trimesh
    from PIL import Image

    mode = alpha_mode(channels[..., 5], covered)
    zeros = np.zeros(channels.shape[:2] + (1,), np.uint8)
    material = trimesh.visual.material.PBRMaterial(
        baseColorTexture=Image.fromarray(np.ascontiguousarray(channels[..., [0, 1, 2, 5]])),
        metallicRoughnessTexture=Image.fromarray(np.concatenate(
            [zeros, channels[..., 4:5], channels[..., 3:4]], axis=2)),
        baseColorFactor=np.array([255, 255, 255, 255], np.uint8), metallicFactor=1.0,
        roughnessFactor=1.0, alphaMode=mode, doubleSided=True)
    # trimesh keeps UVs with v upwards and flips them when it writes glTF
    flipped = np.column_stack([uv[:, 0], 1.0 - uv[:, 1]]).astype(np.float32)
    mesh = trimesh.Trimesh(vertices=y_up(vertices), faces=faces, vertex_normals=y_up(normals),
                           visual=trimesh.visual.TextureVisuals(uv=flipped, material=material),
                           process=False)
    data = mesh.export(file_type="glb")
    path = Path(path)
    temp = path.with_name(f".{path.stem}.writing-{os.getpid()}.glb")
    try:
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return {"bytes": len(data), "alpha_mode": mode}
