"""Read a GLB by the glTF 2.0 specification itself (not through trimesh, which wrote it): the
JSON chunk, the binary chunk, accessors, and the images. For the engine's tests."""
from __future__ import annotations

import io
import json
import struct

import numpy as np
from PIL import Image

_TYPES = {5126: np.float32, 5125: np.uint32, 5123: np.uint16, 5121: np.uint8}
_WIDTH = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4}


def read_glb(path) -> dict:
    """``{"gltf", "positions" [V, 3], "normals", "uv" [V, 2], "faces" [F, 3], "material",
    "base" uint8 [H, W, 4], "metal_rough" uint8 [H, W, 3]}`` of the first primitive."""
    with open(path, "rb") as f:
        data = f.read()
    magic, _version, length = struct.unpack_from("<III", data, 0)
    assert magic == 0x46546C67, "not a GLB"
    chunks, off = [], 12
    while off < length:
        size, _kind = struct.unpack_from("<II", data, off)
        chunks.append(data[off + 8:off + 8 + size])
        off += 8 + size
    gltf, binary = json.loads(chunks[0]), chunks[1]

    def accessor(i):
        a = gltf["accessors"][i]
        view = gltf["bufferViews"][a["bufferView"]]
        width = _WIDTH[a["type"]]
        start = view.get("byteOffset", 0) + a.get("byteOffset", 0)
        arr = np.frombuffer(binary, _TYPES[a["componentType"]], a["count"] * width, start)
        return arr.reshape(a["count"], width) if width > 1 else arr

    def image(texture):
        img = gltf["images"][gltf["textures"][texture["index"]]["source"]]
        view = gltf["bufferViews"][img["bufferView"]]
        start = view.get("byteOffset", 0)
        return np.asarray(Image.open(io.BytesIO(binary[start:start + view["byteLength"]])))

    prim = gltf["meshes"][0]["primitives"][0]
    attrs = prim["attributes"]
    material = gltf["materials"][prim["material"]]
    pbr = material["pbrMetallicRoughness"]
    return {"gltf": gltf, "positions": accessor(attrs["POSITION"]),
            "normals": accessor(attrs["NORMAL"]) if "NORMAL" in attrs else None,
            "uv": accessor(attrs["TEXCOORD_0"]), "faces": accessor(prim["indices"]).reshape(-1, 3),
            "material": material, "base": image(pbr["baseColorTexture"]),
            "metal_rough": image(pbr["metallicRoughnessTexture"])}


def texel_lookup(image: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Bilinear read of ``image`` at glTF UVs (origin top-left, texel centres at +0.5), float."""
    h, w = image.shape[:2]
    x, y = uv[:, 0] * w - 0.5, uv[:, 1] * h - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]

    def at(yy, xx):
        return image[np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)].astype(np.float64)

    top = at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx
    bottom = at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx
    return top * (1 - fy) + bottom * fy


def surface_samples(positions, faces, uv, count: int, seed: int = 0):
    """``count`` uniform random points on faces (uniform per face, not per area): (points
    [n, 3], uv [n, 2])."""
    rng = np.random.default_rng(seed)
    face = rng.integers(0, len(faces), count)
    r = rng.random((count, 2))
    flip = r.sum(axis=1) > 1
    r[flip] = 1 - r[flip]
    bary = np.column_stack([1 - r.sum(axis=1), r])
    corners = faces[face]
    points = np.einsum("kj,kjd->kd", bary, positions[corners].astype(np.float64))
    uvs = np.einsum("kj,kjd->kd", bary, uv[corners].astype(np.float64))
    return points, uvs
