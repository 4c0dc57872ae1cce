"""``--working-memory lean|port`` on the stand-in port, on the CPU: with ``port`` nothing is
installed and a staged run equals an eager one bit for bit (every sampler output, the mesh and
the GLB); with ``lean`` (the default) each part is installed (its ``working_memory`` events) or,
where this build lacks it, named in a ``warning`` event, the stages still come in the plan's
order with every load in its stage, and the run stays within the bound
docs/pixal3d.md states against ``port``; an unknown mode is refused before anything loads."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import trimesh

from stageload.pixal3d import compare, plan_for
from stageload.pixal3d.lean.working import PARTS, check_mode
from tests.pixal3d.runs import new_run

SEED, TEXTURE, STEPS = 3, 512, 1
#: The largest relative difference of a lean run's latents from the port's
#: (docs/pixal3d.md, "Working memory": max |lean - port| / max |port| per sampler output).
LEAN_BOUND = 1e-4


def _run(standin_dir, image, tmp_path, name, **kwargs):
    events: list[dict] = []
    run = new_run(standin_dir, events=events.append, prefetch=False, seed=SEED,
                  texture_size=TEXTURE, fingerprint=tmp_path / f"{name}.fp", **kwargs)
    result = run.generate(image, tmp_path / f"{name}.glb", steps=STEPS)
    run.close()
    return {"run": run, "events": events, "result": result, "glb": tmp_path / f"{name}.glb"}


def _glb(path):
    (geom,) = trimesh.load(path, force="scene").geometry.values()
    return geom.vertices, geom.faces, np.asarray(geom.visual.material.baseColorTexture)


def _parts(latent):
    return [latent] if isinstance(latent, torch.Tensor) else [latent.feats, latent.coords]


@pytest.fixture(scope="module")
def runs(standin_dir, standin_weights, rgb_image, tmp_path_factory):
    out = tmp_path_factory.mktemp("working-memory")
    return {"staged_port": _run(standin_dir, rgb_image, out, "staged_port",
                                working_memory="port"),
            "eager_port": _run(standin_dir, rgb_image, out, "eager_port", load="eager",
                               working_memory="port"),
            "staged_lean": _run(standin_dir, rgb_image, out, "staged_lean")}


def test_port_staged_equals_eager_bit_for_bit(runs):
    staged, eager = runs["staged_port"], runs["eager_port"]
    assert staged["run"].working_memory.installed == []
    assert not [e for e in staged["events"] if e["event"] == "working_memory"]
    report = compare(staged["result"]["fingerprint"], eager["result"]["fingerprint"])
    assert report["identical"] and "mesh" in report["entries"], report
    va, fa, ta = _glb(staged["glb"])
    vb, fb, tb = _glb(eager["glb"])
    assert np.array_equal(va, vb) and np.array_equal(fa, fb) and ta.tobytes() == tb.tobytes()
    assert len(fa) > 100 and ta.std() > 0  # a real mesh and bake, not an empty one


def test_lean_installs_each_part_and_each_says_what_it_changed(runs):
    lean = runs["staged_lean"]
    wm = lean["run"].working_memory
    assert wm.mode == "lean" and wm.installed == [n for n, _ in PARTS]
    assert [e for e in lean["events"] if e["event"] == "working_memory"]
    # the run's stage hooks wrap the parts (one replaces get_proj_cond_shape outright): every
    # stage is entered in the plan's order and each model loads in a stage that lists it
    plan = plan_for("1024_cascade")
    assert [e["stage"] for e in lean["events"]
            if e["event"] == "stage" and e.get("parent") is None] == list(plan)
    loads = [e for e in lean["events"] if e["event"] in ("load", "reload")]
    assert loads and all(not e["outside_stage"] and e["model"] in plan[e["stage"]]
                         for e in loads)


def test_lean_marks_the_substeps_inside_each_stage_in_the_trace(runs):
    """lean_model's sub-steps: conditioning and sampling inside each flow stage, the two
    decoders and the mesh inside decode, each after its stage began; none with port."""
    def substeps(events):
        out, stage = [], None
        for e in events:
            if e["event"] == "stage" and e.get("parent") is None:
                stage = e["stage"]
            elif e["event"] == "stage":
                assert e["parent"] == stage, e  # inside the stage announced last
                out.append((e["parent"], e["stage"], e["index"], e["count"]))
        return out

    flow = [(stage, step, i, 2) for stage in ("structure", "shape_512", "shape_1024", "texture")
            for i, step in enumerate(("conditioning", "sampling"))]
    decode = [("decode", step, i, 3) for i, step in
              enumerate(("decode_shape", "mesh", "decode_texture"))]
    found = [s for s in substeps(runs["staged_lean"]["events"]) if s[0] != "export"]
    assert found == flow + decode
    assert [s for s in substeps(runs["staged_port"]["events"]) if s[0] != "export"] == []


def test_lean_stays_within_the_stated_bound_of_port(runs):
    lean, port = runs["staged_lean"]["run"], runs["staged_port"]["run"]
    assert list(lean.last_latents) == list(port.last_latents)
    for key in port.last_latents:
        for a, b in zip(_parts(lean.last_latents[key]), _parts(port.last_latents[key]),
                        strict=True):
            assert a.shape == b.shape, key
            if not a.is_floating_point():  # voxel coordinates: the same voxels
                assert torch.equal(a, b), key
                continue
            scale = float(b.abs().max()) or 1.0
            assert float((a - b).abs().max()) / scale <= LEAN_BOUND, key
    va, fa, _ = _glb(runs["staged_lean"]["glb"])
    vb, fb, _ = _glb(runs["staged_port"]["glb"])
    assert len(fa) == len(fb) and np.abs(va - vb).max() <= 1e-3  # the same mesh, to the bound


def test_an_unknown_mode_is_refused_before_anything_loads(standin_dir, standin_weights):
    with pytest.raises(ValueError, match="working_memory must be one of lean, port"):
        new_run(standin_dir, working_memory="tiny")
    assert check_mode(None) == "lean" and check_mode("port") == "port"
