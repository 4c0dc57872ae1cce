"""Lean conditioning (stageload.pixal3d.lean.conditioning) against the computations it
replaces, on the stand-in port (its NAF, ``_torch_na2d`` and ``ProjGrid`` mirror the real ones;
tiny sizes):

- the banded upsampler equals natten-mps's reference ``na2d`` (a third-party pure-PyTorch
  neighbourhood attention) on NAF's resized keys and values; natten-mps refuses values wider
  than the queries, so the values are compared in slices as wide as the queries (attention
  weights depend on q and k only: the output is the slices' outputs side by side);
- it equals the port's own path (NAF's ``CrossAttention`` through ``_torch_na2d``), and
  ``remove()`` restores that path;
- NAF's image encoder run layer by layer in bands gives NAF's keys and queries;
- the lean pass's ``[N, 2 x C]`` features equal the port's ``get_proj_cond_shape``'s;
- a failed precondition gives a ``warning`` and exactly the port's result;
- ``check --static`` names a drifted NAF name (cached hub source) and a drifted projection name.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from stageload.pixal3d.lean import conditioning as lean
from stageload.pixal3d.lean import sampled
from stageload.pixal3d.port.open import open_port
from standin import weights_module

REL = 1e-5


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def port(standin_dir, standin_weights):
    port = open_port(standin_dir)  # runs load_runtime_deps: natten.na2d -> the port's binding
    return port


def _upsampler(port, dim=32, heads=4, kernel=9):
    naf = weights_module().build_naf({"dim": dim, "heads_attn": heads, "heads_rope": heads,
                                  "kernel_size": kernel, "img_layers": 1})
    return naf.upsampler


def _inputs(dq, dv, heads, hl, wl, r, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads * dq, hl * r, wl * r, generator=g),
            torch.randn(1, heads * dq, hl, wl, generator=g),
            torch.randn(1, heads * dv, hl, wl, generator=g))


@pytest.mark.parametrize("hl, wl, r, kernel", [(10, 12, 3, 9), (7, 6, 4, 5)])
def test_banded_upsampler_equals_natten_mps_na2d(port, hl, wl, r, kernel):
    from natten_mps.functional import na2d
    up = _upsampler(port, kernel=kernel)
    q, k, v = _inputs(8, 16, 4, hl, wl, r)
    handle = lean.banded_upsampler(up)
    assert handle.active
    out = up(q, k, v)
    handle.remove()
    size = (hl * r, wl * r)
    qh = rearrange(q, "b (n d) h w -> b h w n d", n=4)
    kh = rearrange(F.interpolate(k, size=size, mode="nearest-exact"), "b (n d) h w -> b h w n d",
                   n=4)
    vh = rearrange(F.interpolate(v, size=size, mode="nearest-exact"), "b (n d) h w -> b h w n d",
                   n=4)
    slices = [na2d(qh, kh, vh[..., i:i + 8].contiguous(), (kernel, kernel), dilation=(r, r))
              for i in (0, 8)]
    ref = rearrange(torch.cat(slices, dim=-1), "b h w n d -> b (n d) h w")
    assert out.shape == ref.shape == (1, 64, hl * r, wl * r)
    assert _rel(out, ref) <= REL


def test_banded_upsampler_equals_the_ports_path_and_remove_restores_it(port):
    up = _upsampler(port)
    q, k, v = _inputs(8, 16, 4, 12, 11, 4, seed=1)
    ported = up(q, k, v)  # NAF's CrossAttention -> natten.na2d -> the port's _torch_na2d
    events = []
    handle = lean.banded_upsampler(up, events.append, stage="texture", band_bytes=20_000)
    banded = up(q, k, v)
    up(q, k, v)
    handle.remove()
    assert _rel(banded, ported) <= REL and up.dilation == (4, 4)
    assert torch.equal(up(q, k, v), ported)
    assert [e["event"] for e in events] == ["working_memory"]  # once per shape
    event = events[0]
    assert (event["stage"], event["target"], event["tool"]) == ("texture", "naf.upsampler",
                                                               "banded_upsampler")
    assert event["bytes_saved"] > 0 and "48x44 from 12x11" in event["note"]


def test_a_failed_precondition_warns_and_keeps_the_ports_result(port):
    up = _upsampler(port)
    up.kernel_size = (8, 8)  # even: not the kernel NAF's attention has
    events = []
    assert not lean.banded_upsampler(up, events.append).active
    assert [e["event"] for e in events] == ["warning"] and "kernel_size" in events[0]["message"]
    assert "forward" not in vars(up)

    up = _upsampler(port, kernel=5)
    q, k, v = _inputs(8, 16, 4, 6, 6, 4, seed=2)
    q = q[..., :22, :22].contiguous()  # 22 / 6 is no integer ratio
    ported = up(q, k, v)
    events = []
    handle = lean.banded_upsampler(up, events.append)
    assert torch.equal(up(q, k, v), ported)
    handle.remove()
    assert [e["event"] for e in events] == ["warning"]
    assert "not an integer multiple" in events[0]["message"]


@pytest.mark.parametrize("image, out, low, layers", [(64, 32, 8, 2), (48, 48, 12, 1),
                                                     (200, 25, 5, 2)])
def test_banded_image_encoder_gives_nafs_keys_and_queries(port, image, out, low, layers):
    from stageload.pixal3d.lean import encoder as lean_encoder
    naf = weights_module().build_naf({"dim": 32, "heads_attn": 4, "heads_rope": 4,
                                      "kernel_size": 5, "img_layers": layers})
    x = torch.rand(1, 3, image, image, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        queries = naf.image_encoder(x, output_size=(out, out))
        keys = naf.key_encoder(queries, torch.zeros(1, 1, low, low))
        assert lean_encoder.problem(naf.image_encoder) is None
        encoded = lean_encoder.encode(naf.image_encoder, x, (out, out), band_bytes=5000)
        rows, cols = torch.randint(0, out, (40,)), torch.randint(0, out, (40,))
        assert _rel(encoded.keys((low, low), band_bytes=3000), keys) <= REL
        assert _rel(encoded.queries_at(rows, cols), queries[:, :, rows, cols]) <= REL
    naf.image_encoder.sem_encoder[1].residual = True
    assert "residual" in lean_encoder.problem(naf.image_encoder)


@pytest.fixture(scope="module")
def pipeline(port):
    return port.gm.init_pipeline(port.gm.MODEL_PATH, torch.device("cpu"))


def _pass(pipeline, extractor, resolution, n=1500, seed=3):
    from PIL import Image
    g = torch.Generator().manual_seed(seed)
    image = Image.fromarray((torch.rand(96, 96, 3, generator=g) * 255).byte().numpy())
    xyz = torch.unique(torch.randint(0, resolution, (n, 3), generator=g), dim=0)
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.long), xyz], dim=1).int()
    return pipeline.get_proj_cond_shape(extractor, [image], coords, camera_angle_x=0.7,
                                        distance=2.1, mesh_scale=1.0,
                                        grid_resolution_override=resolution)


def test_lean_pass_features_equal_the_ports(pipeline, monkeypatch):
    extractor = pipeline.image_cond_model_tex_1024
    ported = _pass(pipeline, extractor, 64)
    monkeypatch.setattr(sampled, "VOXEL_CHUNK", 300)  # several chunks of voxels
    events = []
    handle = lean.install(pipeline, events.append, stage=lambda: "texture")
    try:
        lean_out = _pass(pipeline, extractor, 64)
    finally:
        handle.remove()
    assert "get_proj_cond_shape" not in vars(pipeline)
    a, b = lean_out["cond"]["proj"], ported["cond"]["proj"]
    assert type(a) is type(b) and torch.equal(a.coords, b.coords)
    assert a.feats.shape == b.feats.shape == (len(b.coords), 2 * extractor.embed_dim)
    assert _rel(a.feats, b.feats) <= REL
    assert torch.equal(lean_out["cond"]["global"], ported["cond"]["global"])
    assert not lean_out["neg_cond"]["proj"].feats.any()
    assert [(e["event"], e["tool"], e["chunk"], e["stage"]) for e in events] == [
        ("working_memory", "sampled_projection", len(b.coords), "texture")]
    assert events[0]["target"] == "image_cond_model_tex_1024.conditioning"


def test_a_pass_that_cannot_run_lean_warns_and_runs_the_ports_path(pipeline):
    extractor = pipeline.image_cond_model_shape_512
    kept = extractor.naf_target_size
    events = []
    try:
        extractor.naf_target_size = (kept[0] + 1, kept[1] + 1)  # no integer ratio
        ported = _pass(pipeline, extractor, 32, seed=4)
        handle = lean.install(pipeline, events.append)
        try:
            odd = _pass(pipeline, extractor, 32, seed=4)
        finally:
            handle.remove()
    finally:
        extractor.naf_target_size = kept
    assert [e["event"] for e in events] == ["warning", "warning"]  # at install, at the pass
    assert all("image_cond_model_shape_512" in e["message"] and "integer multiple"
               in e["message"] for e in events)
    assert torch.equal(odd["cond"]["proj"].feats, ported["cond"]["proj"].feats)


CHECK = [sys.executable, "-m", "stageload.pixal3d", "check", "--static", "--pixal3d-dir"]


def test_check_static_names_drifted_naf_and_projection_names(standin_dir, tmp_path):
    hub = tmp_path / "torch" / "hub" / "valeoai_NAF_main"
    shutil.copytree(standin_dir / "naf_hub", hub, ignore=shutil.ignore_patterns("__pycache__"))
    env = {"TORCH_HOME": str(tmp_path / "torch"), "PATH": "/usr/bin:/bin"}

    def check(folder):
        proc = subprocess.run(CHECK + [str(folder)], capture_output=True, text=True, timeout=60,
                              env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["working_memory"]

    assert check(standin_dir) == {"naf_source": str(hub), "drift": [], "lean": "available"}
    attentions = hub / "src" / "layers" / "attentions.py"
    attentions.write_text(attentions.read_text().replace("self.num_heads = num_heads",
                                                         "self.heads = num_heads"))
    port_copy = tmp_path / "port"
    shutil.copytree(standin_dir, port_copy, ignore=shutil.ignore_patterns("__pycache__"))
    proj = port_copy / "pixal3d/trainers/flow_matching/mixins/image_conditioned_proj.py"
    proj.write_text(proj.read_text().replace("def sample_features(", "def sample_feats("))
    report = check(port_copy)
    assert report["lean"] == "falls back to the port's computation"
    assert "NAF src/layers/attentions.py: CrossAttention.num_heads (attribute missing)" \
        in report["drift"]
    assert any(item.startswith("port pixal3d/trainers/flow_matching/mixins/"
                               "image_conditioned_proj.py: sample_features (missing)")
               for item in report["drift"])
