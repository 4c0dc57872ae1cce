"""Where the lean conditioning cannot run its sampled pass, the next leanest path runs and says
so — never a crash, never a silent change (stand-in port, CPU, tiny sizes):

- the port's device switches (``PIXAL3D_PROJ_GRID_DEVICE``, ``PIXAL3D_NAF_DEVICE``; the stand-in
  mirrors how the real extractor reads them) give the port's result with a ``warning``: the
  port moves NAF's output, so lean hands it the whole map, computed in bands;
- NAF's output used as a tensor in any other way is made whole once, equal to NAF's own;
- two images (the sampled pass takes one) run the port's pass with NAF's upsampling in bands;
- every attribute lean reads on the port's objects is checked first: a missing one is a reason
  in words, not an ``AttributeError``;
- the saving a pass reports is the port's real peak (NAF's temporaries are freed before the
  whole grid's features exist), not the sum of both.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from stageload.pixal3d.lean import checks, sampled
from stageload.pixal3d.lean import conditioning as lean
from stageload.pixal3d.port.open import open_port

REL = 1e-5
GIB = 2 ** 30


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def pipeline(standin_dir, standin_weights):
    port = open_port(standin_dir)
    return port.gm.init_pipeline(port.gm.MODEL_PATH, torch.device("cpu"))


def _image(seed):
    from PIL import Image
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(96, 96, 3, generator=g) * 255).byte().numpy())


def _coords(resolution, n=1200, seed=3):
    g = torch.Generator().manual_seed(seed)
    xyz = torch.unique(torch.randint(0, resolution, (n, 3), generator=g), dim=0)
    return torch.cat([torch.zeros(len(xyz), 1, dtype=torch.long), xyz], dim=1).int()


def _pass(pipeline, extractor, images, resolution=64):
    return pipeline.get_proj_cond_shape(extractor, images, _coords(resolution),
                                        camera_angle_x=0.7, distance=2.1, mesh_scale=1.0,
                                        grid_resolution_override=resolution)


def _lean_pass(pipeline, extractor, images):
    events = []
    handle = lean.install(pipeline, events.append, stage=lambda: "texture")
    try:
        return _pass(pipeline, extractor, images), events
    finally:
        handle.remove()


def test_proj_grid_device_switch_gives_the_ports_result_and_says_the_map_is_whole(
        pipeline, monkeypatch):
    monkeypatch.setenv("PIXAL3D_PROJ_GRID_DEVICE", "cpu")
    extractor = pipeline.image_cond_model_tex_1024
    ported = _pass(pipeline, extractor, [_image(1)])
    alt = extractor._proj_grid_alt  # the port's own copy, made by its pass
    lean_out, events = _lean_pass(pipeline, extractor, [_image(1)])
    assert _rel(lean_out["cond"]["proj"].feats, ported["cond"]["proj"].feats) <= REL
    assert extractor._proj_grid_alt is alt  # the pass's copy of the restricted grid is gone
    (wm,) = [e for e in events if e["event"] == "working_memory"]
    assert "PIXAL3D_PROJ_GRID_DEVICE=cpu" in wm["note"] and wm["tool"] == "sampled_projection"
    (warning,) = [e for e in events if e["event"] == "warning"]
    assert warning["fallback"] == "banded_upsampler"
    assert "PIXAL3D_PROJ_GRID_DEVICE=cpu" in warning["cause"]
    assert "whole output" in warning["message"]


def test_naf_device_switch_gives_the_ports_result(pipeline, monkeypatch):
    extractor = pipeline.image_cond_model_shape_1024
    monkeypatch.setenv("PIXAL3D_NAF_DEVICE", "cpu")
    kept = extractor.naf_model
    try:
        extractor.naf_model = None
        extractor._load_naf()  # as the port loads it with the switch: pinned
        assert extractor._naf_device_pinned
        ported = _pass(pipeline, extractor, [_image(2)])
        lean_out, events = _lean_pass(pipeline, extractor, [_image(2)])
    finally:
        extractor.naf_model, extractor._naf_device_pinned = kept, False
    assert _rel(lean_out["cond"]["proj"].feats, ported["cond"]["proj"].feats) <= REL
    assert [e["tool"] for e in events if e["event"] == "working_memory"] == [
        "sampled_projection"]


def test_nafs_output_used_as_a_tensor_is_made_whole_once(pipeline):
    extractor = pipeline.image_cond_model_tex_1024
    naf, size = extractor.naf_model, extractor.naf_target_size
    g = torch.Generator().manual_seed(4)
    image = torch.rand(1, 3, 128, 128, generator=g)
    features = torch.randn(1, extractor.embed_dim, 16, 16, generator=g)
    with torch.no_grad():
        expected = naf(image, features, size)
        events = []
        lazy = sampled.LazyNAF(naf, events.append)(image, features, size)
        assert isinstance(lazy, sampled.LazyMap) and lazy.device == expected.device
        assert lazy.shape == tuple(expected.shape) and lazy.dtype == expected.dtype
        moved = lazy.to("cpu")
        assert _rel(moved, expected) <= REL
        assert torch.equal(torch.cat([lazy, lazy], dim=0)[1:], moved)  # a torch function
        assert torch.equal(lazy.contiguous(), moved)  # any other attribute
    warnings = [e for e in events if e["event"] == "warning"]
    assert len(warnings) == 1 and ".to(cpu)" in warnings[0]["cause"]


def test_two_images_run_the_ports_pass_with_naf_in_bands(pipeline):
    extractor = pipeline.image_cond_model_tex_1024
    images = [_image(5), _image(6)]
    ported = _pass(pipeline, extractor, images)
    lean_out, events = _lean_pass(pipeline, extractor, images)
    assert _rel(lean_out["cond"]["proj"].feats, ported["cond"]["proj"].feats) <= REL
    assert torch.equal(lean_out["cond"]["global"], ported["cond"]["global"])
    (warning,) = [e for e in events if e["event"] == "warning"]
    assert warning["fallback"] == "banded_upsampler" and "2 images" in warning["cause"]
    assert [e["tool"] for e in events if e["event"] == "working_memory"] == ["banded_upsampler"]
    assert "forward" not in vars(extractor.naf_model.upsampler)  # taken off after the pass


def test_a_missing_attribute_is_a_reason_not_an_attribute_error():
    naf = SimpleNamespace()  # none of NAF's layers
    extractor = SimpleNamespace(use_naf_upsample=True, naf_model=None)
    assert "naf_target_size or patch_number" in checks.banded_problem(extractor)
    extractor.naf_target_size, extractor.patch_number = (128, 128), 16
    assert checks.banded_problem(extractor) is None
    extractor.naf_model = naf
    assert "NAF has no image_encoder" in checks.banded_problem(extractor)
    assert "grid_resolution" in checks.sampled_problem(SimpleNamespace())
    assert "pipeline.device" in checks.pipeline_pass_problem(SimpleNamespace())
    assert "no low_vram" in checks.pipeline_pass_problem(SimpleNamespace(device="cpu"))
    assert checks.pipeline_pass_problem(SimpleNamespace(device=torch.device("cpu"),
                                                        low_vram=False)) is None
    assert "low_vram" in checks.pipeline_pass_problem(SimpleNamespace(device="cpu",
                                                                     low_vram="yes"))
    unloadable = SimpleNamespace(use_naf_upsample=True, naf_model=None)
    assert "_load_naf" in lean._load_naf(unloadable)


def test_the_saving_is_the_ports_peak_not_the_sum_of_its_phases():
    """The texture pass at 1024² (DINOv3-L 1024 channels, NAF 256, 64³ grid, 21,500 voxels):
    NAF's phase (its map 4 GiB, attention temporaries 15.8 GiB, the low-resolution projection
    1 GiB) is the peak, ≈ 20.6 GiB; the projection's phase after it is ≈ 8 GiB."""
    naf = SimpleNamespace(image_encoder=SimpleNamespace(out_channels=256))
    extractor = SimpleNamespace(embed_dim=1024, use_naf_upsample=True, naf_model=naf,
                                naf_target_size=(1024, 1024), patch_number=64)
    saved = checks.port_pass_bytes(extractor, 64, torch.zeros(21_500, 4))
    assert 20 * GIB <= saved <= 21 * GIB
