"""The lean decode (``stageload.pixal3d.lean.decoders``, ``decoder_rows``, ``rowconv``) against
the stand-in port's real-architecture decoders (TRELLIS.2's ``SparseUnetVaeDecoder`` and
``FlexiDualGridVaeDecoder``, conv back end ``none``): the convolution by output rows equals the
port's bit for bit, a whole shape + texture decode by voxel ranges (the mesh extraction too)
gives the port's mesh, voxels and sub-grids bit for bit (random weights, so every layer changes
what comes out, ranges forced on every level), and each precondition that fails says so in a
``warning`` and leaves the port's forward in place. Small widths and a few hundred latent
voxels: seconds."""
from __future__ import annotations

import importlib

import pytest
import torch

from stageload.pixal3d.lean import decoder_rows, decoders, extraction, rowconv
from standin import weights_module


@pytest.fixture(scope="module", autouse=True)
def port_on_path():
    weights_module()  # puts the stand-in port's folder on sys.path


def _port(name):
    return importlib.import_module(f"pixal3d.{name}")


def _coords(side: int, fill: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    xyz = (torch.rand(side, side, side, generator=gen) < fill).nonzero().int()
    return torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz], 1)


def _random_weights(model, seed: int) -> None:
    """Every parameter random (the released init zeroes each conv2: it would hide that layer)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            scale = 0.6 / p.shape[-1] ** 0.5 if p.dim() > 1 else 0.1
            p.copy_((torch.randn(p.shape, generator=gen) * scale).to(p.dtype))


def _args(**extra):
    return dict(model_channels=[32, 16, 16, 16, 16], latent_channels=8,
                num_blocks=[1, 0, 0, 1, 0], block_type=["SparseConvNeXtBlock3d"] * 5,
                up_block_type=["SparseResBlockC2S3d"] * 4,
                block_args=[{"use_checkpoint": False}] * 5, use_fp16=True, **extra)


@pytest.fixture(scope="module")
def pair():
    models = _port("models")
    shape = models.FlexiDualGridVaeDecoder(resolution=64, **_args()).eval()
    tex = models.SparseUnetVaeDecoder(out_channels=6, pred_subdiv=False, **_args()).eval()
    _random_weights(shape, 1)
    _random_weights(tex, 2)
    sparse = _port("modules.sparse")
    coords = _coords(4, 0.4, seed=3)
    gen = torch.Generator().manual_seed(4)
    latent = sparse.SparseTensor(feats=torch.randn(len(coords), 8, generator=gen),
                                 coords=coords)
    return shape, tex, latent


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_convolution_by_output_rows_is_the_ports_bit_for_bit(dtype):
    sparse = _port("modules.sparse")
    torch.manual_seed(0)
    conv = sparse.SparseConv3d(16, 24, 3).to(dtype)
    coords = _coords(12, 0.3, seed=5)
    x = sparse.SparseTensor(feats=torch.randn(len(coords), 16).to(dtype), coords=coords)
    port = conv(x).feats
    index = rowconv.conv_index(x, conv)
    n = len(coords)
    cuts = [0, 3, 200, n // 2, n]  # a range shorter than MIN_ROWS, uneven ones
    mine = torch.cat([rowconv.conv_rows(conv, x.feats, x.coords, index, a, b)
                      for a, b in zip(cuts, cuts[1:], strict=False)])
    assert torch.equal(mine, port)
    pre = torch.nn.LayerNorm(16).to(dtype)  # a per-row function computed only where read
    with torch.no_grad():
        ref = conv(x.replace(pre(x.feats))).feats
        mine = torch.cat([rowconv.conv_rows(conv, x.feats, x.coords, index, a, b, pre=pre)
                          for a, b in zip(cuts, cuts[1:], strict=False)])
    assert torch.equal(mine, ref)


@torch.no_grad()
def test_shape_and_texture_decode_by_ranges_is_the_ports_bit_for_bit(pair):
    shape, tex, latent = pair
    port_meshes, port_subs = shape(latent, return_subs=True)
    port_tex = tex(latent, guide_subs=port_subs)
    assert port_tex.feats.shape[0] > 2000  # four levels of subdivision happened
    events = []
    budget = 200 * (28 * 32 + 27 * 17)  # 64–192 rows a range: several ranges on every level
    handles = (decoders.chunk_decoder(shape, "shape_slat_decoder", budget, sink=events.append)
               + decoders.chunk_decoder(tex, "tex_slat_decoder", budget, sink=events.append)
               + extraction.install(_port("models.sc_vaes.fdg_vae"), "flexible_dual_grid_to_mesh",
                                    64 * extraction.BYTES_PER_VOXEL, sink=events.append))
    assert len(handles) == 3
    try:
        meshes, subs = shape(latent, return_subs=True)
        voxels = tex(latent, guide_subs=subs)
    finally:
        for handle in reversed(handles):
            handle.remove()
    for attr in ("vertices", "faces", "fdg_coords", "fdg_dual_vertices", "fdg_split_weight"):
        assert torch.equal(getattr(meshes[0], attr), getattr(port_meshes[0], attr)), attr
    for a, b in zip(subs, port_subs, strict=True):
        assert torch.equal(a.feats, b.feats) and torch.equal(a.coords, b.coords)
    assert torch.equal(voxels.feats, port_tex.feats)
    assert torch.equal(voxels.coords, port_tex.coords)
    said = [(e["target"], e["tool"]) for e in events if e["event"] == "working_memory"]
    assert said == [("shape_slat_decoder", "decoder_rows"),
                    ("shape_slat_decoder.flexible_dual_grid_to_mesh", "extraction_ranges"),
                    ("tex_slat_decoder", "decoder_rows")]
    assert len(meshes[0].fdg_coords) > 10 * 64 and len(meshes[0].faces) > 200  # many ranges
    assert all(e["bytes_saved"] > 0 for e in events)
    assert not [e for e in events if e["event"] == "warning"]
    sparse_unet = _port("models.sc_vaes.sparse_unet_vae")
    assert "forward" in vars(sparse_unet.SparseUnetVaeDecoder)
    assert sparse_unet.SparseUnetVaeDecoder.forward.__name__ == "forward"
    assert sparse_unet.SparseUnetVaeDecoder.forward.__qualname__.startswith(
        "SparseUnetVaeDecoder")  # the port's own again


def test_under_flex_gemm_the_port_decodes_and_a_warning_says_why(pair):
    config = _port("modules.sparse.config")
    before = config.CONV
    config.set_conv_backend("flex_gemm")
    try:
        events = []
        assert decoders.chunk_decoder(pair[1], "tex_slat_decoder", 1 << 20,
                                      sink=events.append) == []
    finally:
        config.set_conv_backend(before)
    (warning,) = events
    assert warning["event"] == "warning" and warning["fallback"] == "port_decoder"
    assert "config.CONV is 'flex_gemm'" in warning["cause"]


def test_a_convolution_lean_does_not_reproduce_is_refused_at_install(pair, monkeypatch):
    monkeypatch.setattr(rowconv, "kernel_deltas",
                        lambda index, kernel, dil: -_deltas(index, kernel, dil))
    events = []
    assert decoders.chunk_decoder(pair[1], "tex_slat_decoder", 1 << 20,
                                  sink=events.append) == []
    assert "differs from the port's convolution" in events[0]["cause"]


_deltas = rowconv.kernel_deltas


@torch.no_grad()
def test_children_in_another_order_run_the_ports_block_with_a_warning(pair, monkeypatch):
    shape, tex, latent = pair
    port_meshes, _ = shape(latent, return_subs=True)
    monkeypatch.setattr(decoder_rows, "children",
                        lambda feats, mask: feats.reshape(-1, feats.shape[1] // 8)
                        [mask.flip(1).reshape(-1)])
    events = []
    handles = decoders.chunk_decoder(shape, "shape_slat_decoder", 1 << 20, sink=events.append)
    try:
        meshes, _ = shape(latent, return_subs=True)
    finally:
        for handle in handles:
            handle.remove()
    assert torch.equal(meshes[0].vertices, port_meshes[0].vertices)
    warnings = [e for e in events if e["event"] == "warning"]
    assert warnings and all("orders the children otherwise" in e["cause"] for e in warnings)
    assert {e["cause"].split(":")[1].strip() for e in warnings} >= {"blocks.0.1"}


def test_block_rows_from_the_budget():
    assert decoders.block_rows(64 << 20, 64, 9) == (64 << 20) // (9 * 64 + 459) // 64 * 64
    assert decoders.block_rows(1 << 40, 64, 9) == decoders.block_rows(64 << 20, 64, 9)
    assert decoders.block_rows(10, 4096, 28) == 64
