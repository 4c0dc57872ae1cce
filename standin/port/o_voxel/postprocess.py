"""Stand-in of the port's vendored ``o_voxel.postprocess`` (TRELLIS.2's o-voxel, Metal build, as
read in pedronaugusto/trellis2-apple ``o-voxel/o_voxel/postprocess.py``): the same module names
(``_MeshBackend``, ``_BVH``, ``_remesh_narrow_band_dc``, ``_HAS_FLEX_GEMM``, ``_grid_sample_3d``,
``_HAS_GPU_DEPS``, ``_BACKEND``) and ``to_glb`` doing its steps in the same order, keeping the
same things alive:

1. the mesh backend gets the full decoded mesh; ``fill_holes``; ``read()`` it back;
2. ``_BVH`` over that full mesh — kept until the bake has used it;
3. remesh on: ``_remesh_narrow_band_dc`` at ``resolution = grid_size`` (the pipeline's grid),
   then cleanup and ``simplify(decimation_target)``; remesh off: ``simplify(3 × target)``,
   cleanup, ``simplify(target)``, cleanup, ``unify_face_orientations``;
4. ``uv_unwrap``; vertex normals;
5. the bake: rasterise the UV layout at ``texture_size``², look every texel up on the full
   mesh through the BVH, sample the attribute volume (``_grid_sample_3d``: flex_gemm's sparse
   sampler, or — without flex_gemm — a dense ``C × D × H × W`` float32 volume);
6. a PBR material and a ``trimesh.Trimesh`` (the caller writes the GLB).

Memory per step follows the real drivers (``_memory``). The voxels' ``coords`` are on the
pipeline's grid (``grid_size``, ``voxel_size = 1 / resolution``), as the real decoder's.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import torch

from . import _memory
from ._mesh import BVH as _BVH  # noqa: F401  (module attribute, as cumesh.cuBVH in the real one)
from ._mesh import MeshBackend as _MeshBackend  # noqa: F401
from ._mesh import remesh_narrow_band_dc as _remesh_narrow_band_dc  # noqa: F401

_HAS_GPU_DEPS = True
_BACKEND = "metal"

try:
    from flex_gemm.ops.grid_sample import grid_sample_3d as _flex_grid_sample_3d
    _HAS_FLEX_GEMM = True
except ImportError:
    _HAS_FLEX_GEMM = False


def _grid_sample_3d(feats, coords, shape, grid, mode="trilinear"):
    """Sample the sparse volume at ``grid`` points: flex_gemm's sparse sampler when it imports,
    else the real module's dense fallback (a zero ``B × C × D × H × W`` float32 volume filled
    from the voxels). The stand-in's fallback gives the same values from the sparse voxels
    (``standin_sparse.sparse_trilinear``, the stand-in flex_gemm's code):
    the dense volume at the declared grid — 24 GiB at 1024 — is accounted by ``_bake``'s
    ``_memory.Block``, never allocated. Returns [M, C]."""
    if _HAS_FLEX_GEMM:
        return _flex_grid_sample_3d(feats, coords, shape, grid, mode=mode)[0]
    from standin_sparse import sparse_trilinear

    return sparse_trilinear(feats, coords, shape, grid)


def to_glb(vertices, faces, attr_volume, coords, attr_layout: Dict[str, slice], aabb,
           voxel_size=None, grid_size=None, decimation_target: int = 1000000,
           texture_size: int = 2048, remesh: bool = False, remesh_band: float = 1,
           remesh_project: float = 0.9, verbose: bool = False, use_tqdm: bool = False, **_unused):
    """Decoded mesh + sparse PBR voxels → a textured ``trimesh.Trimesh`` (see the module
    docstring for the steps). ``aabb`` [[min], [max]], ``grid_size`` int (the pipeline's grid)."""
    aabb = torch.as_tensor(np.asarray(aabb, dtype=np.float32))
    if grid_size is None:
        grid_size = round(float((aabb[1] - aabb[0])[0]) / voxel_size)
    grid = int(grid_size)
    vsize = (aabb[1] - aabb[0]) / grid
    inputs = _memory.per_face("mesh", len(faces))  # the tensors handed in, alive throughout
    mesh = _MeshBackend()
    mesh.init(vertices, faces)
    mesh.fill_holes(max_hole_perimeter=3e-2)
    vertices, faces = mesh.read()
    bvh = _BVH(vertices, faces)
    if remesh:
        center = aabb.mean(dim=0)
        extent = float((aabb[1] - aabb[0]).max())
        mesh.init(*_remesh_narrow_band_dc(vertices, faces, center=center,
                                          scale=(grid + 3 * remesh_band) / grid * extent,
                                          resolution=grid, band=remesh_band,
                                          project_back=remesh_project, verbose=verbose, bvh=bvh))
        _cleanup(mesh)
        mesh.simplify(decimation_target, verbose=verbose)
    else:
        mesh.simplify(decimation_target * 3, verbose=verbose)
        _cleanup(mesh)
        mesh.simplify(decimation_target, verbose=verbose)
        _cleanup(mesh)
        mesh.unify_face_orientations()
    out_v, out_f, out_uv, out_vmaps = mesh.uv_unwrap(return_vmaps=True, verbose=verbose)
    mesh.compute_vertex_normals()
    normals = mesh.read_vertex_normals()[out_vmaps]
    attrs, mask = _bake(out_v, out_f, out_uv, bvh, vertices, faces, attr_volume, coords, aabb,
                        vsize, grid, texture_size)
    del bvh, inputs
    return _textured_mesh(out_v, out_f, out_uv, normals, attrs, mask, attr_layout)


def _cleanup(mesh) -> None:
    mesh.remove_duplicate_faces()
    mesh.repair_non_manifold_edges()
    mesh.remove_small_connected_components(1e-5)
    mesh.fill_holes(max_hole_perimeter=3e-2)


def _rasterize(uvs, faces, size: int):
    """Face index [size, size] (-1 empty) and barycentric weights [size, size, 3] of the UV
    layout, texel centres, last face wins."""
    face_id = np.full((size, size), -1, dtype=np.int64)
    bary = np.zeros((size, size, 3), dtype=np.float32)
    tri = uvs[faces] * size - 0.5
    for k, t in enumerate(tri):
        x0, y0 = np.floor(t.min(0)).astype(int).clip(0, size - 1)
        x1, y1 = np.ceil(t.max(0)).astype(int).clip(0, size - 1)
        xs, ys = np.meshgrid(np.arange(x0, x1 + 1), np.arange(y0, y1 + 1))
        p = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float32)
        (ax, ay), (bx, by), (cx, cy) = t
        den = (by - cy) * (ax - cx) + (cx - bx) * (ay - cy)
        if abs(den) < 1e-12:
            continue
        w0 = ((by - cy) * (p[:, 0] - cx) + (cx - bx) * (p[:, 1] - cy)) / den
        w1 = ((cy - ay) * (p[:, 0] - cx) + (ax - cx) * (p[:, 1] - cy)) / den
        w = np.stack([w0, w1, 1 - w0 - w1], 1)
        inside = (w >= -1e-4).all(1)
        px, py = xs.ravel()[inside], ys.ravel()[inside]
        face_id[py, px] = k
        bary[py, px] = w[inside]
    return face_id, bary


def _bake(out_v, out_f, out_uv, bvh, full_v, full_f, attr_volume, coords, aabb, vsize, grid,
          size):
    """Every texel's attributes: its point on the new mesh, moved to the full mesh through the
    BVH, sampled from the voxels. Holds 150 B per texel while it works."""
    with _memory.Block(_memory.BYTES["texel"] * size * size):
        face_id, bary = _rasterize(out_uv.numpy(), out_f.numpy(), size)
        mask = face_id >= 0
        tri = out_v.numpy()[out_f.numpy()[face_id[mask]]]
        pos = (tri * bary[mask][..., None]).sum(1)
        _, near, uvw = bvh.unsigned_distance(pos, return_uvw=True)
        orig = full_v.numpy()[full_f.numpy()[near.numpy()]]
        pos = (orig * uvw.numpy()[..., None]).sum(1)
        points = torch.from_numpy((pos - aabb[0].numpy()) / vsize.numpy())
        c4 = torch.cat([torch.zeros_like(coords[:, :1]), coords], dim=1).int()
        shape = torch.Size([1, attr_volume.shape[1]] + [grid] * 3)
        attrs = np.zeros((size, size, attr_volume.shape[1]), dtype=np.float32)
        # without flex_gemm the real module builds the dense volume at the full grid
        dense = _memory.Block(0 if _HAS_FLEX_GEMM else 4 * attr_volume.shape[1] * grid ** 3)
        attrs[mask] = _grid_sample_3d(attr_volume.float(), c4, shape,
                                      points.reshape(1, -1, 3)).numpy()
        dense.free()
    return attrs, mask


def _textured_mesh(out_v, out_f, out_uv, normals, attrs, mask, layout):
    """Dilate the texels into the gutters, pack base colour + alpha and metallic/roughness
    textures into a PBR material, convert to glTF axes (y-up → z-up swap, as the real one)."""
    import trimesh
    from PIL import Image
    from scipy.ndimage import distance_transform_edt

    if mask.any():
        _, (iy, ix) = distance_transform_edt(~mask, return_indices=True)
        attrs = attrs[iy, ix]
    to8 = lambda a: (np.clip(a, 0, 1) * 255).astype(np.uint8)  # noqa: E731
    base = to8(attrs[..., layout["base_color"]])
    alpha = to8(attrs[..., layout["alpha"]])
    mr = np.concatenate([np.zeros_like(alpha), to8(attrs[..., layout["roughness"]]),
                         to8(attrs[..., layout["metallic"]])], axis=-1)
    material = trimesh.visual.material.PBRMaterial(
        baseColorTexture=Image.fromarray(np.concatenate([base, alpha], -1)),
        metallicRoughnessTexture=Image.fromarray(mr), metallicFactor=1.0, roughnessFactor=1.0,
        alphaMode="OPAQUE", doubleSided=True)
    v = out_v.numpy().copy()
    n = normals.numpy().copy()
    v[:, 1], v[:, 2] = v[:, 2].copy(), -v[:, 1].copy()
    n[:, 1], n[:, 2] = n[:, 2].copy(), -n[:, 1].copy()
    uv = out_uv.numpy().copy()
    uv[:, 1] = 1 - uv[:, 1]
    return trimesh.Trimesh(vertices=v, faces=out_f.numpy(), vertex_normals=n, process=False,
                           visual=trimesh.visual.TextureVisuals(uv=uv, material=material))
