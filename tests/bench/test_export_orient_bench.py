"""The orient benchmark's measuring path on a small mesh (the full-size run is
``python -m bench.export_orient``): the FDG winding reverses about half the faces, the engine's
orient child in its own process gives every face back its outward winding, its peak is read,
and the table names what was measured."""
from __future__ import annotations

import json

import numpy as np

from bench.export_orient import fdg_winding, not_outward, orient_child, prepared, table


def test_the_bench_winds_like_fdg_and_the_child_winds_it_back(tmp_path):
    from standin.sphere_asset import sphere_mesh

    vertices, faces = sphere_mesh(4)
    wound, reversed_ = fdg_winding(vertices, faces)
    assert 0.35 * len(faces) < reversed_ < 0.65 * len(faces)
    assert np.count_nonzero((wound != faces).any(axis=1)) == reversed_
    prep = prepared(tmp_path, "s4", vertices, faces)
    ran = orient_child(tmp_path, "s4", prep.pop("path"))
    assert ran["facts"]["flipped"] == prep["reversed"] and ran["peak"] > 10 << 20
    assert not_outward(tmp_path, "s4") == 0
    row = {**prep, **ran, "differing_faces": 0}
    result = {"measured": "now", "machine": "here", "step": {
        "sphere_8": row, "full": row, "bytes_per_face": 1.0, "base": 0},
        "trimesh": [], "budget": {"predicted_orient": 1 << 30, "default_budget": 3 << 30}}
    text = table(json.loads(json.dumps(result)))
    assert f"| full | {len(faces):,} | {reversed_:,} |" in text
