"""The mesh extraction by voxel ranges (``stageload.pixal3d.lean.extraction``) against the
stand-in port's pure-PyTorch ``flexible_dual_grid_to_mesh`` (o_voxel's faces and vertices):
the same vertices and faces, bit for bit and in the same order, on a sphere's flexible dual grid
with voxels dropped (partial and dropped quads), flags flipped, voxels in shuffled order (so
every range cuts neighbour runs) and a voxel whose edges leave the grid — at ranges of 1, a few,
64 and more than the voxels; a control whose ranges lose an edge at each boundary is caught;
installed on the port's decoder module, each call lean does not compute goes to the port's
function with a ``warning``. A few hundred voxels: seconds. (The real decoder's outputs, by
ranges, are compared in ``test_lean_decode.py`` and through the pipeline in
``test_lean_model.py``.)"""
from __future__ import annotations

import importlib
import os

import pytest
import torch

from stageload.pixal3d.lean import extraction
from standin import weights_module

AABB = [[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]]


@pytest.fixture(scope="module", autouse=True)
def port_on_path():
    weights_module()  # puts the stand-in port's folder on sys.path


@pytest.fixture(autouse=True)
def port_defaults():
    """The port's switches as a fresh process has them: an in-process run earlier in the session
    (the port's command line sets ``PIXAL3D_FDG_CAP_PARTIAL_QUADS`` from its default) must not
    turn the partial quads on for the port's function here and off for lean's arguments. Not
    through ``monkeypatch``: a test's ``monkeypatch.undo()`` would put them back mid-test."""
    names = ("PIXAL3D_FDG_CAP_PARTIAL_QUADS", "PIXAL3D_FDG_VERBOSE")
    saved = {name: os.environ.pop(name, None) for name in names}
    yield
    for name, value in saved.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value


def _port_extract():
    return importlib.import_module("pixal3d.utils.mesh_extract").flexible_dual_grid_to_mesh


def sphere_grid(side: int = 20, radius: float = 6.7, seed: int = 0) -> tuple:
    """A sphere's flexible dual grid on a ``side``³ grid: the cells its surface crosses, each
    axis flag set where the sphere crosses the edge at the cell's far corner; then 8 % of the
    cells dropped and 3 % of the flags flipped (partial and dropped quads), one cell at the
    grid's far corner with every flag set (its edges leave the grid), the cells shuffled.
    Returns (coords int32 [N, 3] — a view of [N, 4] as the decoder hands it —, dual_vertices
    float32 [N, 3], intersected bool [N, 3], split_weight float32 [N, 1])."""
    gen = torch.Generator().manual_seed(seed)
    r = torch.arange(side + 1, dtype=torch.float64)
    corner = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1)
    inside = (corner - side / 2).norm(dim=-1) < radius
    cut = sum(inside[a:a + side, b:b + side, c:c + side].int()
              for a in (0, 1) for b in (0, 1) for c in (0, 1))
    xyz = ((cut > 0) & (cut < 8)).nonzero()
    x, y, z = xyz.T
    far = inside[x + 1, y + 1, z + 1]
    flags = torch.stack([inside[x, y + 1, z + 1] != far, inside[x + 1, y, z + 1] != far,
                         inside[x + 1, y + 1, z] != far], 1)
    flags ^= torch.rand(flags.shape, generator=gen) < 0.03
    keep = torch.rand(len(xyz), generator=gen) >= 0.08
    xyz = torch.cat([xyz[keep], torch.full((1, 3), side - 1)])
    flags = torch.cat([flags[keep], torch.ones(1, 3, dtype=torch.bool)])
    order = torch.randperm(len(xyz), generator=gen)
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz[order].int()], 1)
    dual = torch.rand(len(xyz), 3, generator=gen) * 2 - 0.5
    split = torch.nn.functional.softplus(torch.randn(len(xyz), 1, generator=gen))
    return coords[:, 1:], dual, flags[order], split


@pytest.fixture(scope="module")
def grid():
    return sphere_grid()


def _same(port, mine) -> bool:
    return all(p.dtype == m.dtype and p.shape == m.shape and torch.equal(p, m)
               for p, m in zip(port, mine, strict=True))


@pytest.mark.parametrize("cap", ["0", "1"])
@pytest.mark.parametrize("weights", [True, False])
def test_ranges_give_the_ports_mesh_bit_for_bit_in_its_order(grid, cap, weights, monkeypatch):
    monkeypatch.setenv("PIXAL3D_FDG_CAP_PARTIAL_QUADS", cap)
    coords, dual, flags, split = grid
    split = split if weights else None
    port = _port_extract()(coords, dual, flags, split, aabb=AABB, grid_size=20)
    assert len(port[1]) > 500  # a real surface, not an empty mesh
    for voxels in (1, 7, 64, len(coords) + 10):
        vertices, faces, counts = extraction.extract(coords, dual, flags, split, AABB,
                                                     grid_size=20, voxels=voxels,
                                                     cap_partial=cap == "1")
        assert _same(port, (vertices, faces)), voxels
    assert counts["full_quads"] < counts["intersections"]  # some edges lack a voxel
    assert (counts["partial_tris"] > 0) == (cap == "1")


def test_voxel_size_form_and_an_empty_mesh_are_the_ports(grid):
    coords, dual, flags, split = grid
    port = _port_extract()(coords, dual, flags, split, aabb=AABB, voxel_size=1 / 20)
    assert _same(port, extraction.extract(coords, dual, flags, split, AABB, voxel_size=1 / 20,
                                          voxels=9, cap_partial=False)[:2])
    none = torch.zeros_like(flags)
    port = _port_extract()(coords, dual, none, split, aabb=AABB, grid_size=20)
    assert len(port[0]) == 0
    assert _same(port, extraction.extract(coords, dual, none, split, AABB, grid_size=20,
                                          voxels=9, cap_partial=False)[:2])


def test_a_range_boundary_that_drops_an_edge_is_caught(grid, monkeypatch):
    """The control: the comparison above fails when each range loses its first edge."""
    coords, dual, flags, split = grid
    port = _port_extract()(coords, dual, flags, split, aabb=AABB, grid_size=20)
    find = extraction.VoxelIndex.find

    def lose_first(self, xyz):
        rows = find(self, xyz)
        rows[:1] = -1
        return rows
    monkeypatch.setattr(extraction.VoxelIndex, "find", lose_first)
    mine = extraction.extract(coords, dual, flags, split, AABB, grid_size=20, voxels=64,
                              cap_partial=False)
    assert not _same(port, mine[:2])
    assert 0 < len(port[1]) - len(mine[1]) <= 2 * (len(coords) // 64 + 1)


@pytest.fixture()
def fdg():
    module = importlib.import_module("pixal3d.models.sc_vaes.fdg_vae")
    before = module.flexible_dual_grid_to_mesh
    yield module
    assert module.flexible_dual_grid_to_mesh is before


def test_installed_on_the_decoder_module_it_reports_once_and_comes_off(grid, fdg):
    coords, dual, flags, split = grid
    port = fdg.flexible_dual_grid_to_mesh(coords, dual, flags, split, aabb=AABB, grid_size=20,
                                          train=False)
    events = []
    (handle,) = extraction.install(fdg, "flexible_dual_grid_to_mesh", 64 * 1536,
                                   sink=events.append, stage=lambda: "decode")
    try:
        for _ in range(2):
            mine = fdg.flexible_dual_grid_to_mesh(coords, dual, flags, split, aabb=AABB,
                                                  grid_size=20, train=False)
            assert _same(port, mine)
    finally:
        handle.remove()
    (event,) = events
    assert event["event"] == "working_memory" and event["tool"] == "extraction_ranges"
    assert event["chunk"] == 64 and event["stage"] == "decode"
    assert event["bytes_saved"] >= len(coords) * 36 * 4
    assert extraction.range_voxels(1 << 40) == (64 << 20) // 1536 // 64 * 64
    assert extraction.range_voxels(10) == 64


def _calls(fdg, grid, events, **extra):
    coords, dual, flags, split = grid
    (handle,) = extraction.install(fdg, "flexible_dual_grid_to_mesh", 1 << 20,
                                   sink=events.append)
    try:
        return fdg.flexible_dual_grid_to_mesh(coords, dual, flags, split, aabb=AABB,
                                              grid_size=20, **extra)
    finally:
        handle.remove()


def test_what_lean_does_not_compute_runs_the_ports_way_with_a_warning(grid, fdg, monkeypatch):
    coords, dual, flags, split = grid
    port = _port_extract()(coords, dual, flags, split, aabb=AABB, grid_size=20)
    events = []
    with pytest.raises(RuntimeError, match="Training mode"):
        _calls(fdg, grid, events, train=True)  # the port's own answer
    monkeypatch.setattr(extraction, "SPLIT_2", (0, 1, 3, 1, 3, 2))  # another winding
    assert _same(port, _calls(fdg, grid, events))
    monkeypatch.undo()
    twice = (torch.cat([coords, coords[:1]]), torch.cat([dual, dual[:1]]),
             torch.cat([flags, flags[:1]]), torch.cat([split, split[:1]]))
    port_twice = _port_extract()(*twice, aabb=AABB, grid_size=20)
    assert _same(port_twice, _calls(fdg, twice, events))

    def lacks(self, xyz):
        raise NotImplementedError("searchsorted is not implemented for this device")
    monkeypatch.setattr(extraction.VoxelIndex, "find", lacks)
    assert _same(port, _calls(fdg, grid, events))
    causes = [e["cause"] for e in events]
    assert all(e["event"] == "warning" and e["fallback"] == "port_extraction" for e in events)
    assert causes[0].startswith("train=True")
    assert causes[1] == "a probe by ranges differs from the port's extraction"
    assert causes[2] == "a voxel coordinate appears twice"
    assert causes[3].startswith("NotImplementedError on cpu: searchsorted")


def test_an_unknown_signature_is_left_to_the_port_with_a_warning(grid, fdg, monkeypatch):
    coords, dual, flags, split = grid
    events = []
    with pytest.raises(TypeError):  # the port's dispatcher passes it on; its function refuses
        _calls(fdg, grid, events, smooth=True)
    assert "arguments lean does not know" in events[0]["cause"]

    def other(coords, feats, aabb, grid_size):
        return "port"
    monkeypatch.setattr(fdg, "flexible_dual_grid_to_mesh", other)
    events = []
    assert extraction.install(fdg, "flexible_dual_grid_to_mesh", 1 << 20,
                              sink=events.append) == []
    assert fdg.flexible_dual_grid_to_mesh is other
    assert "is not the signature lean computes" in events[0]["cause"]
