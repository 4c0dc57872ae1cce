"""The orient step: faces made by the stand-in's flexible dual grid extraction (about half wound
inward, as the port's decoder makes them) come out consistently wound and outward, per part;
parts with no outside are said in a ``warning``; the engine's GLB is outward."""
from __future__ import annotations

import numpy as np
import pytest
import trimesh

from bounded_export import ExportLevers, export_asset
from bounded_export.orient import orient, orient_file, undecided_warning
from tests.export_engine.fdg_mesh import fdg_ball, fdg_box, join
from tests.export_engine.glbread import read_glb


def _welded(vertices, faces) -> trimesh.Trimesh:
    """The mesh with coincident vertices merged (UV seams closed), nothing else changed."""
    mesh = trimesh.Trimesh(np.asarray(vertices, np.float64), faces, process=False)
    mesh.merge_vertices(merge_tex=True, merge_norm=True)
    mesh.remove_unreferenced_vertices()
    return mesh


def _outward_share(mesh: trimesh.Trimesh, centre) -> float:
    """Share of faces whose normal points away from ``centre`` (a star-shaped solid's)."""
    away = np.einsum("ij,ij->i", mesh.triangles_center - centre, mesh.face_normals)
    return float(np.mean(away > 0))


def test_the_fdg_extraction_winds_about_half_the_faces_inward():
    # the fixture has the product's bug: without this the other tests could not fail
    mesh = _welded(*fdg_ball())
    assert mesh.is_watertight and not mesh.is_winding_consistent
    assert 0.4 < _outward_share(mesh, 0.0) < 0.6


@pytest.mark.parametrize("make, centre", [(fdg_ball, 0.0), (fdg_box, (0.025, -0.025, -0.025))])
def test_an_fdg_solid_comes_out_consistent_and_outward(make, centre):
    vertices, faces = make()
    out, facts = orient(vertices, faces)
    mesh = _welded(vertices, out)
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.volume > 0
    assert _outward_share(mesh, np.asarray(centre)) == 1.0
    assert 0.4 * len(faces) < facts["flipped"] < 0.6 * len(faces)
    assert facts["parts"] == 1 and facts["open_parts"] == 0
    assert facts["twisted_parts"] == facts["flat_parts"] == 0
    assert undecided_warning(facts) is None
    # the same triangles: only the order of corners changed
    assert np.array_equal(np.sort(out, axis=1), np.sort(faces, axis=1))


def test_each_part_is_outward_on_its_own():
    ball = fdg_ball(40, centre=(-0.22, 0, 0), radius=0.18)
    box = fdg_box(40, low=(0.1, -0.2, -0.2), high=(0.4, 0.2, 0.2))
    small = fdg_ball(40, centre=(0.0, 0.3, 0.3), radius=0.1)
    inverted = (small[0], small[1][:, ::-1].copy())  # a part wound wholly inward
    vertices, faces = join(ball, box, inverted)
    out, facts = orient(vertices, faces)
    mesh = _welded(vertices, out)
    bodies = mesh.split(only_watertight=False)
    assert len(bodies) == 3 == facts["parts"]
    for body in bodies:
        assert body.is_watertight and body.is_winding_consistent and body.volume > 0
        assert _outward_share(body, body.bounds.mean(axis=0)) == 1.0


def test_an_open_part_is_outward_by_its_volume_about_its_centroid():
    vertices, faces = fdg_ball(40)
    centres = vertices[faces].mean(axis=1)
    cup = faces[centres[:, 2] < 0.15]  # the ball with its cap cut off: open
    out, facts = orient(vertices, cup)
    mesh = _welded(vertices, out)
    assert not mesh.is_watertight and mesh.is_winding_consistent
    assert facts["open_parts"] == 1 and facts["open_edges"] > 0 and facts["flat_parts"] == 0
    assert _outward_share(mesh, 0.0) == 1.0


def _sheet(n: int = 12):
    """A flat square of 2·n² triangles in z = 0, every other triangle wound the other way."""
    grid = np.stack(np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"), -1)
    vertices = np.concatenate([grid.reshape(-1, 2) / n - 0.5,
                               np.zeros(((n + 1) ** 2, 1))], axis=1).astype(np.float32)
    i = (np.arange(n)[:, None] * (n + 1) + np.arange(n)).ravel()
    faces = np.concatenate([np.stack([i, i + n + 1, i + 1], 1),
                            np.stack([i + 1, i + n + 1, i + n + 2], 1)])
    faces[::2] = faces[::2, ::-1]
    return vertices, faces.astype(np.int32)


def test_a_flat_open_part_has_no_outside_and_says_so():
    ball = fdg_ball(24)
    vertices, faces = join(ball, _sheet())
    sheet = slice(len(ball[1]), None)
    out, facts = orient(vertices, faces)
    assert facts["parts"] == 2 and facts["flat_parts"] == 1
    assert facts["flat_faces"] == len(faces[sheet])
    assert _welded(vertices, out[sheet]).is_winding_consistent
    assert _outward_share(_welded(vertices, out[:sheet.start]), 0.0) == 1.0
    event = undecided_warning(facts)
    assert event["event"] == "warning" and "open and flat" in event["message"]
    assert f"{len(faces[sheet]):,} faces" in event["differs"]


def test_a_moebius_strip_cannot_be_wound_consistently_and_says_so():
    n = 24
    t = np.arange(n) / n * 2 * np.pi
    ring = np.stack([np.cos(t), np.sin(t), np.zeros(n)], 1) * 0.3
    across = np.stack([np.cos(t / 2) * np.cos(t), np.cos(t / 2) * np.sin(t),
                       np.sin(t / 2)], 1) * 0.05
    vertices = np.concatenate([ring - across, ring + across]).astype(np.float32)
    a, b = np.arange(n), (np.arange(n) + 1) % n
    top = np.where(b == 0, n, n + b)  # the half twist joins the last rung to the first reversed
    low = np.where(b == 0, n + 0, b)
    faces = np.concatenate([np.stack([a, low, n + a], 1),
                            np.stack([n + a, low, top], 1)]).astype(np.int32)
    faces[np.flatnonzero(b == 0)] = [n - 1, n, 2 * n - 1]
    faces[n + np.flatnonzero(b == 0)] = [2 * n - 1, n, 0]
    out, facts = orient(vertices, faces)
    assert facts["twisted_parts"] == 1 and facts["twisted_faces"] == len(faces)
    assert np.array_equal(out, faces)  # left as it came
    assert "cannot be wound consistently" in undecided_warning(facts)["message"]


def test_orient_file_writes_the_oriented_mesh(tmp_path):
    vertices, faces = fdg_ball(16)
    np.savez(tmp_path / "in.npz", vertices=vertices, faces=faces)
    facts = orient_file(str(tmp_path / "in.npz"), str(tmp_path / "out.npz"))
    with np.load(tmp_path / "out.npz") as data:
        assert np.array_equal(data["vertices"], vertices)
        assert np.array_equal(data["faces"], orient(vertices, faces)[0])
    assert int(facts["flipped"]) > 0


@pytest.fixture(scope="module")
def fdg_asset(small_arrays, tmp_path_factory):
    """The small asset (its voxels) with its mesh made by the FDG extraction of the same bumpy
    sphere: about half its faces wound inward."""
    from standin.sphere_asset import radius_at

    vertices, faces = fdg_ball(64, radius=radius_at)
    path = tmp_path_factory.mktemp("fdg") / "fdg.npz"
    np.savez(path, **{**small_arrays, "vertices": vertices, "faces": faces})
    return path, len(faces)


def test_the_engine_exports_an_fdg_mesh_outward(fdg_asset, tmp_path):
    path, count = fdg_asset
    events: list = []
    info = export_asset(path, tmp_path / "out.glb",
                        ExportLevers(decimation_target=6000, texture_size=512),
                        emit=events.append)
    assert [e["stage"] for e in events if e["event"] == "stage"][2] == "orient"
    assert 0.4 * count < info["orientation"]["flipped"] < 0.6 * count
    assert not [e for e in events if e["event"] == "warning"]
    glb = read_glb(tmp_path / "out.glb")
    mesh = _welded(glb["positions"], glb["faces"].astype(np.int64))
    assert mesh.is_watertight and mesh.is_winding_consistent and mesh.volume > 0
    # a few decimated faces of the bumps lean past the radial direction; none is wound inward
    assert _outward_share(mesh, 0.0) > 0.99
    # the written normals point out (glTF's Y-up: the centre is still the origin)
    assert np.mean(np.einsum("ij,ij->i", glb["normals"], glb["positions"]) > 0) > 0.99


def test_the_engine_warns_of_a_part_with_no_outside(fdg_asset, small_arrays, tmp_path):
    from bounded_export.orient import SOURCE
    from standin.sphere_asset import radius_at

    vertices, faces = _sheet()
    sheet = (vertices * 0.1 + np.float32([0.0, 0.0, 0.45]), faces)  # beside the ball
    vertices, faces = join(fdg_ball(64, radius=radius_at), sheet)
    path = tmp_path / "sheet.npz"
    np.savez(path, **{**small_arrays, "vertices": vertices, "faces": faces})
    events: list = []
    info = export_asset(path, tmp_path / "out.glb",
                        ExportLevers(decimation_target=6000, texture_size=512),
                        emit=events.append)
    warned = [e for e in events if e["event"] == "warning" and e["source"] == SOURCE]
    assert len(warned) == 1 and "1 of the mesh's 2 parts" in warned[0]["message"]
    assert info["orientation"]["flat_parts"] == 1
    assert info["orientation"]["flat_faces"] == len(sheet[1])


def test_the_budget_plans_the_orient_step_and_the_defaults_row_fits():
    from bounded_export import budget

    # docs/benchmark.md's defaults row: the 1024 asset of standin.asset
    sizes = {"faces": 7_902_022, "voxels": 10_103_323, "target": 1_000_000, "texture": 2048,
             "file_bytes": 505_957_766}
    plan = budget.plan(**sizes)
    assert budget.MIN_BUDGET < plan.peaks["orient"] < plan.peaks["decimate"]
    assert plan.peak <= budget.DEFAULT_BUDGET
    more = budget.plan(**{**sizes, "faces": 9_000_000, "vertices": 6_000_000})
    assert more.peaks["orient"] > plan.peaks["orient"]
