"""The engine's own pieces against exact expectations: the sparse trilinear sample, the UV
rasteriser, the patches and the packer, the seam fill, the budget's piece sizes."""
import numpy as np
import pytest

from bounded_export import BadAsset, budget
from bounded_export.raster import chunks
from bounded_export.seams import fill
from bounded_export.unwrap import batches, patches, shelf_pack
from bounded_export.voxels import SparseVoxels


def linear_voxels(res=8, missing=()):
    cells = np.stack(np.meshgrid(*[np.arange(res)] * 3, indexing="ij"), -1).reshape(-1, 3)
    keep = np.ones(len(cells), bool)
    for cell in missing:
        keep &= ~(cells == cell).all(axis=1)
    cells = cells[keep]
    centres = (cells + 0.5) / res - 0.5  # origin -0.5, voxel size 1/res: value at the centre
    attrs = np.column_stack([centres, centres[:, :1] * 0 + 0.25, centres[:, 1:2] * 0 + 0.5,
                             centres[:, 2:] * 0 + 1.0]) * 0.5 + 0.25
    return SparseVoxels(cells, attrs.astype(np.float32), [-0.5] * 3, 1 / res, res), res


def test_trilinear_reproduces_a_linear_field_at_voxel_centres_convention():
    voxels, res = linear_voxels()
    rng = np.random.default_rng(1)
    # points between the first and last voxel centres: all eight corners exist
    points = rng.uniform(-0.5 + 0.5 / res, 0.5 - 0.5 / res, (500, 3))
    values, found = voxels.sample(points)
    assert found.all()
    np.testing.assert_allclose(values[:, :3], points * 0.5 + 0.25, atol=1e-5)
    # a point at a voxel's centre reads exactly that voxel
    centre = (np.array([[3, 4, 5]]) + 0.5) / res - 0.5
    np.testing.assert_allclose(voxels.sample(centre)[0][0, :3], centre[0] * 0.5 + 0.25, atol=1e-6)


def test_missing_corners_are_dropped_and_the_weights_renormalised():
    voxels, res = linear_voxels(missing=[(3, 3, 3)])
    centre = (np.array([[3, 3, 3]]) + 0.5) / res - 0.5
    point = centre + 0.25 / res  # inside the cube of corners (3..4)³; weight on (3,3,3) = 27/64
    value, found = voxels.sample(point)
    assert found[0]
    others = [(x, y, z) for x in (3, 4) for y in (3, 4) for z in (3, 4) if (x, y, z) != (3, 3, 3)]
    w = {c: np.prod([0.75 if v == 3 else 0.25 for v in c]) for c in others}
    expect = sum(w[c] * ((np.array(c) + 0.5) / res - 0.5) for c in others) / sum(w.values())
    np.testing.assert_allclose(value[0, :3], expect * 0.5 + 0.25, atol=1e-6)


def test_a_point_with_no_voxel_around_it_is_not_found():
    voxels, _ = linear_voxels(res=8)
    values, found = voxels.sample(np.array([[5.0, 5.0, 5.0], [0.0, 0.0, 0.0]]))
    assert found.tolist() == [False, True] and (values[0] == 0).all()


def test_raster_covers_each_texel_once_with_exact_barycentrics():
    uv = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], np.float32)
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    size = 16
    hits = np.zeros((size, size), int)
    for face_ids, rows, cols, bary, outside in chunks(uv, faces, size, chunk_texels=50):
        assert (outside == 0).all()
        np.add.at(hits, (rows, cols), 1)
        corners = uv[faces[face_ids]].astype(np.float64) * size
        point = np.einsum("kj,kjd->kd", bary, corners)
        np.testing.assert_allclose(point, np.column_stack([cols, rows]) + 0.5, atol=1e-9)
    # texels on the diagonal are inside both triangles (edges included), the rest in one
    expected = np.ones((size, size), int) + np.eye(size, dtype=int)
    np.testing.assert_array_equal(hits, expected)


def test_raster_border_texels_lie_within_grow_of_the_face():
    """With ``grow`` the texels whose centre is within that many texels outside the triangle
    come too, with their true distance, and barycentrics that extrapolate the plane."""
    uv = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75]], np.float32)
    size = 32
    (ids, rows, cols, bary, outside), = list(chunks(uv, np.array([[0, 1, 2]]), size, 10_000,
                                                   grow=1.0))
    centre = np.column_stack([cols, rows]) + 0.5
    np.testing.assert_allclose(bary @ (uv.astype(np.float64) * size), centre, atol=1e-9)
    inside = (bary >= -1e-7).all(axis=1)
    assert (outside[inside] == 0).all() and (outside[~inside] > 0).all()
    assert (outside <= 1.0).all() and (~inside).sum() > 0
    # beyond one edge only: the distance to that edge's line — the hypotenuse x + y = 32
    # (opposite corner 0) and the bottom edge y = 8 (opposite corner 2), in texels
    hyp = ~inside & (bary[:, 0] < 0) & (bary[:, 1] > 0) & (bary[:, 2] > 0)
    np.testing.assert_allclose(outside[hyp], (centre[hyp].sum(axis=1) - 32) / np.sqrt(2),
                               atol=1e-9)
    low = ~inside & (bary[:, 0] > 0) & (bary[:, 1] > 0) & (bary[:, 2] < 0)
    np.testing.assert_allclose(outside[low], 8 - centre[low, 1], atol=1e-9)
    assert hyp.sum() > 0 and low.sum() > 0


def test_patches_partition_the_faces_within_the_limit():
    rng = np.random.default_rng(0)
    vertices = rng.random((3000, 3)).astype(np.float32)
    faces = rng.integers(0, 3000, (10_000, 3))
    parts = patches(vertices, faces, limit=700)
    assert max(len(p) for p in parts) <= 700
    assert sorted(np.concatenate(parts).tolist()) == list(range(10_000))
    groups = batches(parts, 2000)
    assert all(sum(len(p) for p in g) <= 2000 for g in groups)
    assert sum(len(g) for g in groups) == len(parts)


def test_shelf_pack_places_rectangles_apart_inside_the_square():
    rng = np.random.default_rng(3)
    sizes = rng.uniform(5, 60, (40, 2))
    offsets, side = shelf_pack(sizes, pad=2)
    lo, hi = offsets, offsets + sizes
    assert (lo >= 0).all() and (hi <= side + 1e-9).all()
    for i in range(len(sizes)):
        for j in range(i + 1, len(sizes)):
            apart = (hi[i] + 2 <= lo[j] + 1e-9) | (hi[j] + 2 <= lo[i] + 1e-9)
            assert apart.any(), (i, j)
    assert (sizes.prod(axis=1).sum() / side ** 2) > 0.5  # not wasteful


def test_seam_fill_takes_the_nearest_baked_texel():
    channels = np.zeros((8, 8, 2), np.uint8)
    baked = np.zeros((8, 8), bool)
    channels[1, 1], baked[1, 1] = (10, 20), True
    channels[6, 6], baked[6, 6] = (200, 100), True
    fill(channels, baked)
    assert channels[0, 0].tolist() == [10, 20] and channels[7, 7].tolist() == [200, 100]
    assert channels[2, 3].tolist() == [10, 20] and channels[5, 4].tolist() == [200, 100]


def test_a_smaller_budget_gives_smaller_pieces():
    common = {"faces": 1_000_000, "voxels": 2_000_000, "target": 1_000_000, "texture": 2048,
              "file_bytes": 100 << 20}
    small, large = budget.plan(budget=520 << 20, **common), budget.plan(budget=8 << 30, **common)
    assert small.bake_chunk_texels <= large.bake_chunk_texels
    assert small.unwrap_batch_faces <= large.unwrap_batch_faces
    assert (small.bake_chunk_texels < large.bake_chunk_texels
            or small.unwrap_batch_faces < large.unwrap_batch_faces)
    assert small.peak <= 520 << 20
    common["faces"] = 5_000_000
    assert budget.plan(budget=2 << 30, **common).peak <= 2 << 30
    with pytest.raises(BadAsset, match="too large for an export budget"):
        budget.plan(budget=1 << 30, **common)
