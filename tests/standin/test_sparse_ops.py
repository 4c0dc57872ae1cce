"""The stand-in port's sparse operations against brute-force references written here: the
vectorised submanifold neighbour map (both its dense-table and sorted-key look-ups) against a
Python dict walk in the port's ``conv_none`` order, the sparse convolution (both back ends)
against a dense ``conv3d`` of the same voxels, channel-to-space against a per-voxel loop, and
the flexible-dual-grid mesh extraction against a per-voxel quad walk. Small random cases,
seconds in all."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from standin import weights_module


@pytest.fixture(scope="module", autouse=True)
def port_on_path():
    """The stand-in port's folder on ``sys.path`` for its modules, as loading ``make_weights``
    puts it there (and leaves it: the session's weights fixture imports through it too)."""
    weights_module()


def _voxels(count: int, size: int, batches: int = 1, seed: int = 0) -> torch.Tensor:
    """``count`` distinct random voxels per batch in a ``size``³ grid: int32 [N, 4], batch-major."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for b in range(batches):
        cells = torch.randperm(size ** 3, generator=gen)[:count].sort().values
        xyz = torch.stack([cells // size ** 2, cells // size % size, cells % size], dim=1)
        rows.append(torch.cat([torch.full((count, 1), b), xyz], dim=1))
    return torch.cat(rows).int()


def _brute_neighbours(coords, kernel, dilation):
    """The port's conv_none map: per kernel offset (kz, ky, kx), per voxel in order."""
    index = {tuple(c): i for i, c in enumerate(coords.tolist())}
    src, tgt, ker = [], [], []
    for kz, ky, kx in itertools.product(*(range(k) for k in kernel)):
        off = [(kz - kernel[0] // 2) * dilation[0], (ky - kernel[1] // 2) * dilation[1],
               (kx - kernel[2] // 2) * dilation[2]]
        for i, (b, x, y, z) in enumerate(coords.tolist()):
            j = index.get((b, x + off[0], y + off[1], z + off[2]))
            if j is not None:
                src.append(j)
                tgt.append(i)
                ker.append(kz * kernel[1] * kernel[2] + ky * kernel[2] + kx)
    return [torch.tensor(v, dtype=torch.long) for v in (src, tgt, ker)]


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("dilation", [(1, 1, 1), (2, 1, 3)])
def test_neighbour_map_equals_the_ports_loop(monkeypatch, dense, dilation):
    import standin_sparse
    if not dense:
        monkeypatch.setattr(standin_sparse, "DENSE_TABLE_CELLS", 0)
    coords = _voxels(300, 9, batches=2, seed=1)
    got = standin_sparse.submanifold_neighbours(coords, (3, 3, 3), dilation)
    want = _brute_neighbours(coords, (3, 3, 3), dilation)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    assert len(want[0]) > 300  # neighbours were found, not only each voxel itself


def test_neighbour_map_of_no_voxels():
    import standin_sparse
    src, tgt, kernel = standin_sparse.submanifold_neighbours(torch.zeros(0, 4, dtype=torch.int32),
                                                             (3, 3, 3), (1, 1, 1))
    assert src.numel() == tgt.numel() == kernel.numel() == 0


def _dense_reference(conv, coords, feats):
    """The submanifold convolution as a dense conv3d over the grid, read at the voxels."""
    size = int(coords[:, 1:].max()) + 1
    grid = torch.zeros(int(coords[:, 0].max()) + 1, feats.shape[1], size, size, size,
                       dtype=torch.float64)
    c = coords.long()
    grid[c[:, 0], :, c[:, 1], c[:, 2], c[:, 3]] = feats.double()
    weight = conv.weight.double().permute(0, 4, 1, 2, 3)  # (Co, Kd, Kh, Kw, Ci) -> (Co, Ci, ...)
    out = F.conv3d(grid, weight, conv.bias.double(), padding=1)
    return out[c[:, 0], :, c[:, 1], c[:, 2], c[:, 3]]


@pytest.mark.parametrize("backend", ["none", "flex_gemm"])
def test_sparse_conv_equals_a_dense_convolution(backend):
    from pixal3d.modules.sparse import SparseTensor, config
    from pixal3d.modules.sparse.conv import SparseConv3d
    before = config.CONV
    config.set_conv_backend(backend)
    try:
        torch.manual_seed(0)
        conv = SparseConv3d(5, 7, 3)
        coords = _voxels(200, 8, batches=2, seed=2)
        x = SparseTensor(feats=torch.randn(len(coords), 5), coords=coords)
        out = conv(x)
        assert conv.weight.shape == (7, 3, 3, 3, 5) and conv.bias.shape == (7,)
        assert torch.allclose(out.feats.double(), _dense_reference(conv, coords, x.feats),
                              atol=1e-5)
        cached = [k for k in x.get_spatial_cache() if k.startswith("SubMConv3d")]
        assert len(cached) == 1  # the map is kept for the next convolution at this scale
        again = conv(x.replace(2 * x.feats))  # shares the cache: the same map, the same result
        fresh = conv(SparseTensor(feats=2 * x.feats, coords=coords))
        assert torch.equal(again.feats, fresh.feats)
    finally:
        config.set_conv_backend(before)


def test_sparse_conv_on_no_voxels_gives_its_bias_shape():
    from pixal3d.modules.sparse import SparseTensor
    from pixal3d.modules.sparse.conv import SparseConv3d
    conv = SparseConv3d(4, 6, 3)
    out = conv(SparseTensor(feats=torch.zeros(0, 4), coords=torch.zeros(0, 4, dtype=torch.int32)))
    assert out.feats.shape == (0, 6)


def test_channel_to_space_equals_a_per_voxel_loop():
    from pixal3d.modules.sparse import SparseChannel2Spatial, SparseTensor
    gen = torch.Generator().manual_seed(3)
    coords = _voxels(40, 6, batches=2, seed=3)
    feats = torch.randn(len(coords), 8 * 3, generator=gen)
    keep = torch.rand(len(coords), 8, generator=gen) > 0.6
    x = SparseTensor(feats=feats, coords=coords)
    out = SparseChannel2Spatial(2)(x, x.replace(keep))
    want_coords, want_feats = [], []
    for i, (b, cx, cy, cz) in enumerate(coords.tolist()):
        for s in range(8):
            if keep[i, s]:
                want_coords.append([b, 2 * cx + (s & 1), 2 * cy + (s >> 1 & 1),
                                    2 * cz + (s >> 2 & 1)])
                want_feats.append(feats[i, 3 * s:3 * s + 3])
    assert out.coords.tolist() == want_coords
    assert torch.equal(out.feats, torch.stack(want_feats))
    assert out._scale == tuple(s / 2 for s in x._scale)
    with pytest.raises(ValueError, match="subdivision"):
        SparseChannel2Spatial(2)(x)


_EDGES = (((0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0)),
          ((0, 0, 0), (1, 0, 0), (1, 0, 1), (0, 0, 1)),
          ((0, 0, 0), (0, 1, 0), (1, 1, 0), (1, 0, 0)))


def _brute_fdg(coords, intersected, split):
    """o_voxel's quads, voxel by voxel and axis by axis, split by the weights' products."""
    index = {tuple(c): i for i, c in enumerate(coords.tolist())}
    faces = []
    for i, c in enumerate(coords.tolist()):
        for axis in range(3):
            if not intersected[i, axis]:
                continue
            quad = [index.get(tuple(a + o for a, o in zip(c, off, strict=True)))
                    for off in _EDGES[axis]]
            if None in quad:
                continue
            w = [float(split[q]) for q in quad]
            order = (0, 1, 2, 0, 2, 3) if w[0] * w[2] > w[1] * w[3] else (0, 1, 3, 3, 1, 2)
            faces += [[quad[k] for k in order[:3]], [quad[k] for k in order[3:]]]
    return sorted(map(tuple, faces))


def test_flexible_dual_grid_extraction_equals_a_per_voxel_walk(monkeypatch):
    from pixal3d.utils.mesh_extract import flexible_dual_grid_to_mesh
    monkeypatch.delenv("PIXAL3D_FDG_CAP_PARTIAL_QUADS", raising=False)
    gen = torch.Generator().manual_seed(4)
    coords = _voxels(250, 8, seed=4)[:, 1:]
    dual = torch.rand(len(coords), 3, generator=gen)
    intersected = torch.rand(len(coords), 3, generator=gen) > 0.5
    split = torch.rand(len(coords), 1, generator=gen)
    vertices, faces = flexible_dual_grid_to_mesh(coords, dual, intersected, split,
                                                 aabb=[[-0.5] * 3, [0.5] * 3], grid_size=8)
    assert torch.allclose(vertices, (coords.float() + dual) / 8 - 0.5)
    got = sorted(map(tuple, faces.tolist()))
    assert got == _brute_fdg(coords, intersected, split) and len(got) > 0
    monkeypatch.setenv("PIXAL3D_FDG_CAP_PARTIAL_QUADS", "1")
    _, capped = flexible_dual_grid_to_mesh(coords, dual, intersected, split,
                                           aabb=[[-0.5] * 3, [0.5] * 3], grid_size=8)
    assert len(capped) > len(faces)  # one triangle per quad with three of its four voxels
    with pytest.raises(RuntimeError, match="Training mode"):
        flexible_dual_grid_to_mesh(coords, dual, intersected, split, aabb=[[-0.5] * 3, [0.5] * 3],
                                   grid_size=8, train=True)
