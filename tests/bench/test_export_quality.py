"""The export benchmark's quality measures (bench/export_engine/quality.py) on inputs whose
answer is known: exact point-to-surface distances (against trimesh's own), the reference
trilinear sampler on a linear field, colour read back through a GLB written here, unfilled
texels found, and the axes."""
from __future__ import annotations

import numpy as np
import pytest
import trimesh
from PIL import Image

from bench.export_engine import quality


def test_axes_undo_the_ports_y_up():
    p = np.random.default_rng(0).random((10, 3))
    glb = np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1)  # o_voxel's (x, y, z) → (x, z, −y)
    np.testing.assert_allclose(quality.to_port(glb), p)


def test_distances_are_exact():
    sphere = trimesh.creation.icosphere(subdivisions=2)
    sphere.vertices *= np.array([1.0, 0.6, 0.3])  # long, thin faces too
    points = np.random.default_rng(1).normal(size=(300, 3)) * 0.6
    ours = quality.Surface(sphere.vertices, sphere.faces).distance(points)
    # brute force with trimesh's per-triangle closest point: every point against every face
    tri = sphere.triangles
    pairs = np.repeat(points, len(tri), axis=0)
    closest = trimesh.triangles.closest_point(np.tile(tri, (len(points), 1, 1)), pairs)
    exact = np.linalg.norm(closest - pairs, axis=1).reshape(len(points), len(tri)).min(1)
    np.testing.assert_allclose(ours, exact, atol=1e-9)


def test_two_sided_distance_sees_an_offset():
    sphere = trimesh.creation.icosphere(subdivisions=4)
    bigger = sphere.vertices * 1.01
    glb = quality.GlbMesh(bigger, sphere.faces, np.zeros((len(bigger), 2)),
                          np.zeros((4, 4, 4), np.uint8), None)
    d = quality.surface_distance(glb, sphere.vertices, sphere.faces, voxel_size=0.001,
                                 samples=20_000)
    assert 8.5 < d["both"]["mean"] < 10.5 and d["both"]["max"] < 11  # 0.01 = 10 voxels
    same = quality.surface_distance(
        quality.GlbMesh(sphere.vertices, sphere.faces, glb.uv, glb.base, None),
        sphere.vertices, sphere.faces, voxel_size=0.001, samples=20_000)
    assert same["both"]["max"] < 1e-6


def test_reference_sampler_is_trilinear_on_centres():
    res = 16
    c = np.argwhere(np.ones((res,) * 3, bool))
    centre = (c + 0.5) / res - 0.5  # origin −0.5, voxel size 1/16
    attrs = np.stack([centre[:, 0] + 0.5, 0.25 + 0.5 * centre[:, 1], 0.5 + centre[:, 2] / 2],
                     axis=1)
    vox = quality.ReferenceVoxels(c, attrs, [-0.5] * 3, 1 / res, res)
    p = np.random.default_rng(2).uniform(-0.45, 0.45, size=(500, 3))
    values, found = vox.sample(p)
    assert found.all()
    expect = np.stack([p[:, 0] + 0.5, 0.25 + 0.5 * p[:, 1], 0.5 + p[:, 2] / 2], axis=1)
    np.testing.assert_allclose(values, expect, atol=1e-6)
    batch = quality.ReferenceVoxels(np.c_[np.zeros(len(c), int), c], attrs, [-0.5] * 3,
                                    1 / res, res)
    np.testing.assert_allclose(batch.sample(p)[0], values)
    # a voxel left out: the other corners' weights renormalised; far away: not found
    keep = ~((c == [8, 8, 8]).all(1))
    part = quality.ReferenceVoxels(c[keep], attrs[keep], [-0.5] * 3, 1 / res, res)
    v, f = part.sample(np.array([[0.03, 0.03, 0.03], [5.0, 5.0, 5.0]]))
    assert f.tolist() == [True, False] and 0 < v[0, 0] < 1


def _quad_glb(path, texture: np.ndarray):
    """A unit square in the port's z = 0 plane, UVs over the whole texture, written +Y up."""
    v = np.array([[-0.25, -0.25, 0.0], [0.25, -0.25, 0.0], [0.25, 0.25, 0.0], [-0.25, 0.25, 0.0]])
    f = np.array([[0, 1, 2], [0, 2, 3]])
    uv = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    material = trimesh.visual.material.PBRMaterial(baseColorTexture=Image.fromarray(texture))
    glb_v = np.stack([v[:, 0], v[:, 2], -v[:, 1]], axis=1)
    mesh = trimesh.Trimesh(glb_v, f, visual=trimesh.visual.TextureVisuals(uv=uv, material=material),
                           process=False)
    path.write_bytes(mesh.export(file_type="glb"))
    return v


def test_colour_and_unfilled_texels_through_a_glb(tmp_path):
    res = 32
    c = np.argwhere(np.ones((res,) * 3, bool))
    centre = (c + 0.5) / res - 0.5
    attrs = np.zeros((len(c), 6), np.float32)
    attrs[:, 0] = np.clip(centre[:, 0] + 0.5, 0, 1)  # red grows along x
    attrs[:, 1] = 0.5
    attrs[:, 5] = 1
    vox = quality.ReferenceVoxels(c, attrs, [-0.5] * 3, 1 / res, res)
    size = 64
    x = (np.arange(size) + 0.5) / size * 0.5 - 0.25  # texel centre → port x
    tex = np.zeros((size, size, 4), np.uint8)
    tex[..., 0] = np.rint((x + 0.5) * 255)[None, :]
    tex[..., 1] = 128
    tex[..., 3] = 255
    glb_path = tmp_path / "quad.glb"
    _quad_glb(glb_path, tex)
    glb = quality.read_glb(glb_path)
    good = quality.colour(glb, vox, samples=5000)
    assert good["mean"] < 1.0 and good["p99"] < 2.0 and good["not_found"] == 0
    assert quality.unfilled_texels(glb) == {"used": size * size, "unfilled": 0,
                                            "faces_touching_unfilled": 0}
    tex[:, : size // 2, 0] = 0  # half the texture wrong, and a hole in it
    tex[10:14, 40:44, 3] = 0
    _quad_glb(glb_path, tex)
    glb = quality.read_glb(glb_path)
    bad = quality.colour(glb, vox, samples=5000)
    assert bad["mean"] > 10 and bad["max"] > 60  # red off by 64–128 on half the quad
    holes = quality.unfilled_texels(glb)
    assert holes["unfilled"] == 16 and holes["faces_touching_unfilled"] >= 1


def test_read_glb_refuses_an_untextured_mesh(tmp_path):
    path = tmp_path / "plain.glb"
    path.write_bytes(trimesh.creation.box().export(file_type="glb"))
    with pytest.raises(ValueError, match="no UVs or no base colour texture"):
        quality.read_glb(path)


def _pillow(mesh: trimesh.Trimesh) -> tuple[np.ndarray, np.ndarray]:
    """``mesh`` with a two-face pillow hung on its first edge: a new vertex and the same face
    twice, opposite windings (what fast-simplification's collapse once folded)."""
    a, b = mesh.faces[0, :2]
    tip = (mesh.vertices[a] + mesh.vertices[b]) / 2 * 1.01
    vertices = np.vstack([mesh.vertices, tip])
    x = len(mesh.vertices)
    return vertices, np.vstack([mesh.faces, [[x, a, b], [x, b, a]]])


def test_topology_finds_a_pillow_and_an_open_border():
    sphere = trimesh.creation.icosphere(3)
    closed = quality.topology(sphere.vertices, sphere.faces)
    assert closed == {"faces": 1280, "open_edges": 0, "nonmanifold_edges": 0, "twin_faces": 0,
                      "euler": 2, "closed": True}
    split = sphere.copy()
    split.unmerge_vertices()  # every face its own corners: a weld at equal positions rejoins
    assert quality.topology(split.vertices, split.faces) == closed
    assert quality.topology_kept(closed, closed)
    folded = quality.topology(*_pillow(sphere))
    assert folded["nonmanifold_edges"] == 1 and folded["twin_faces"] == 2
    assert folded["euler"] == 3 and not folded["closed"]
    assert not quality.topology_kept(folded, closed)
    cut = sphere.faces[1:]  # one face gone: open, Euler number 1
    holed = quality.topology(sphere.vertices, cut)
    assert holed["open_edges"] == 3 and holed["euler"] == 1 and not holed["closed"]
    assert not quality.topology_kept(holed, closed)  # a closed asset must stay closed
    assert quality.topology_kept(holed, holed)  # an open asset may stay open
