"""Prefetch on the stand-in port (staged, CPU): after each stage's ``ready`` the next stage's
weight files are read ahead (real thread, real files), the later loads say so, and the run's
latents and GLB are the same bit for bit with prefetch on and off (staged ≡ eager with prefetch
on is test_staged_run's, prefetch being on by default)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import trimesh

from stageload.pixal3d import compare, plan_for
from tests.pixal3d.runs import new_run

SEED = 3
TEXTURE = 512


def _run(standin_dir, image, out, name, **kwargs):
    events = []
    run = new_run(standin_dir, events=events.append, fingerprint=out / f"{name}.fp",
                  seed=SEED, texture_size=TEXTURE, **kwargs)
    run.generate(image, out / f"{name}.glb")
    run.close()
    return {"run": run, "events": events, "glb": out / f"{name}.glb", "fp": out / f"{name}.fp"}


@pytest.fixture(scope="module")
def runs(standin_dir, standin_weights, rgb_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("prefetch-runs")
    return {"on": _run(standin_dir, rgb_image, out, "on"),
            "off": _run(standin_dir, rgb_image, out, "off", prefetch=False)}


def _of(events, kind):
    return [e for e in events if e["event"] == kind]


def test_the_next_stages_files_are_read_ahead_and_the_loads_say_so(runs):
    events = runs["on"]["events"]
    plan, order = plan_for("1024_cascade"), list(plan_for("1024_cascade"))
    pre = _of(events, "prefetch")
    assert pre, "no prefetch event"
    for e in pre:
        assert order.index(e["for_stage"]) == order.index(e["stage"]) + 1, e
        assert e["model"] in plan[e["for_stage"]], e
    done = {(e["model"], e["for_stage"]) for e in pre if e["state"] == "done"}
    # the pipeline's own checkpoints are known files: read ahead for their stage
    for model in ("sparse_structure_flow_model", "shape_slat_flow_model_1024",
                  "tex_slat_flow_model_1024", "tex_slat_decoder"):
        assert any(m == model for m, _ in done), (model, pre)
    assert all(e["bytes"] == e["file_bytes"] > 0 for e in pre if e["state"] == "done")
    skipped = {e["model"]: e["reason"] for e in pre if e["state"] == "skipped"}
    assert skipped.get("naf") == "no files known for this model"
    for load in _of(events, "load") + _of(events, "reload"):
        assert load["prefetched"] is ((load["model"], load["stage"]) in done), load
    assert not [t for t in threading.enumerate() if t.name == "stageload-prefetch"]


def test_prefetch_off_reads_nothing_ahead_and_gives_the_same_result(runs):
    assert not _of(runs["off"]["events"], "prefetch")
    assert not any(e["prefetched"] for e in _of(runs["off"]["events"], "load"))
    assert compare(runs["on"]["fp"], runs["off"]["fp"])["identical"]
    a = trimesh.load(runs["on"]["glb"], force="scene")
    b = trimesh.load(runs["off"]["glb"], force="scene")
    (ga,), (gb,) = a.geometry.values(), b.geometry.values()
    assert np.array_equal(ga.vertices, gb.vertices) and np.array_equal(ga.faces, gb.faces)
    ta = np.asarray(ga.visual.material.baseColorTexture)
    tb = np.asarray(gb.visual.material.baseColorTexture)
    assert ta.tobytes() == tb.tobytes()
