"""Lean working memory in the flow models and decoders (``stageload.pixal3d.lean.models``) on
the stand-in port's real pipeline object: the sliced attention gives the port's ``naive``
numbers bit for bit, the decoders by voxel ranges the same meshes and voxels, sub-steps and one
``working_memory`` event per tool reach the sink, remove() restores everything, and a refused
Metal allocation becomes ``out_of_memory`` naming the stage (MPS itself cannot run here: the
error is raised by a stand-in ``run``)."""
from __future__ import annotations

import importlib

import pytest
import torch

from stageload.pixal3d.errors import StageOutOfMemory
from stageload.pixal3d.lean import models as lean_model
from stageload.pixal3d.lean import mps_limit
from tests.pixal3d.runs import new_run


@pytest.fixture(scope="module")
def run(standin_dir, standin_weights):
    run = new_run(standin_dir, load="eager", working_memory="port")
    run.hooks.remove()  # the pipeline alone: these tests call its methods and install lean_model
    yield run
    run.close()


def _port(name):
    return importlib.import_module(f"pixal3d.{name}")


@pytest.fixture()
def naive():
    config = _port("modules.sparse.config")
    before = config.ATTN
    config.set_attn_backend("naive")
    yield config
    config.set_attn_backend(before)


def _tokens(count: int, channels: int, seed: int = 0):
    sparse = _port("modules.sparse")
    gen = torch.Generator().manual_seed(seed)
    coords = torch.cat([torch.zeros(count, 1, dtype=torch.int32),
                        torch.randint(0, 64, (count, 3), generator=gen, dtype=torch.int32)], 1)
    return sparse.SparseTensor(feats=torch.randn(count, channels, generator=gen), coords=coords)


@torch.no_grad()
def test_sliced_attention_is_the_ports_naive_attention_bit_for_bit(run, naive):
    modules = _port("modules.sparse.attention.modules")
    original = modules.sparse_scaled_dot_product_attention
    torch.manual_seed(0)
    attn = modules.SparseMultiHeadAttention(16, 2, type="self")
    cross = modules.SparseMultiHeadAttention(16, 2, ctx_channels=16, type="cross")
    x, context = _tokens(2500, 16), torch.randn(1, 5, 16)
    port_self, port_cross = attn(x).feats, cross(x, context).feats  # 2 of the port's chunks
    events = []
    budget = 2 * 300 * 2500 * 4 * 2  # 300 queries' scores and softmax, 2 heads, 2,500 keys
    lean = lean_model.install(run.pipeline, events.append, budget_bytes=budget)
    try:
        assert modules.sparse_scaled_dot_product_attention is not original
        assert torch.equal(attn(x).feats, port_self)
        assert torch.equal(cross(x, context).feats, port_cross)  # the (q, kv) form: the port's
        naive.set_attn_backend("sdpa")
        assert torch.allclose(attn(x).feats, port_self, atol=1e-6)  # not naive: the port's sdpa
    finally:
        lean.remove()
    assert modules.sparse_scaled_dot_product_attention is original
    installed, sliced, cross_note, sdpa_note = [
        e for e in events if e["event"] == "working_memory" and e["tool"] == "slice_attention"]
    assert installed["note"].startswith("naive: self-attention in query slices")
    assert sliced["chunk"] == 256  # 300 in 64s
    assert sliced["bytes_saved"] == 2 * (2048 - 256) * 2500 * 4 * 2
    # what passes through says why, once each, saving nothing
    assert cross_note["bytes_saved"] == 0 and "(sparse, dense) form" in cross_note["note"]
    assert sdpa_note["bytes_saved"] == 0 and sdpa_note["note"].startswith("sdpa: nothing")


def _live_blocks(decoder):
    """The stand-in decoder's ConvNeXt blocks with small non-zero last MLP layers (its weights
    make them identities), so their LayerNorm32 and MLP rows change what comes out."""
    torch.manual_seed(1)
    blocks = [m for m in decoder.modules() if type(m).__name__ == "SparseConvNeXtBlock3d"]
    for block in blocks:
        torch.nn.init.normal_(block.mlp[2].weight, std=0.01)
    return blocks


def _box_tokens(channels: int, seed: int):
    """The 64-grid box the stand-in's weights make (its shape and texture latents share it)."""
    sparse = _port("modules.sparse")
    r = torch.arange(30, 34)
    xyz = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3).int()
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz], 1)
    gen = torch.Generator().manual_seed(seed)
    return sparse.SparseTensor(feats=torch.randn(len(xyz), channels, generator=gen),
                               coords=coords)


@torch.no_grad()
def test_decoders_by_voxel_ranges_give_the_same_mesh_and_voxels(run, monkeypatch):
    pipeline = run.pipeline
    saved = {}
    for name in ("shape_slat_decoder", "tex_slat_decoder"):
        for block in _live_blocks(pipeline.models[name]):
            saved[block] = block.mlp[2].weight.detach().clone()
    shape_slat, tex_slat = _box_tokens(8, seed=2), _box_tokens(8, seed=3)
    port = pipeline.decode_latent(shape_slat, tex_slat, 1024)[0]
    freed, events = [], []
    monkeypatch.setattr(lean_model, "empty_allocator_cache", lambda: freed.append(1))
    lean = lean_model.install(pipeline, events.append, budget_bytes=64 * 2 * 64 * 4)
    try:
        lean_mesh = pipeline.decode_latent(shape_slat, tex_slat, 1024)[0]
    finally:
        lean.remove()
        for block in saved:
            torch.nn.init.zeros_(block.mlp[2].weight)
    for attr in ("vertices", "faces", "attrs", "coords"):
        assert torch.equal(getattr(lean_mesh, attr), getattr(port, attr)), attr
    assert len(port.faces) > 1000
    steps = [(e["stage"], e["index"], e["count"], e["parent"]) for e in events
             if e["event"] == "stage"]
    assert steps == [("decode_shape", 0, 3, "decode"), ("mesh", 1, 3, "decode"),
                     ("decode_texture", 2, 3, "decode")]
    tools = [(e["target"], e["tool"], e["stage"]) for e in events if e["event"] ==
             "working_memory" and e["tool"] in ("decoder_rows", "extraction_ranges")]
    assert tools == [("shape_slat_decoder", "decoder_rows", "decode"),
                     ("shape_slat_decoder.flexible_dual_grid_to_mesh", "extraction_ranges",
                      "decode"),
                     ("tex_slat_decoder", "decoder_rows", "decode")]
    assert not [e for e in events if e["event"] == "warning"]
    assert len(freed) == 2  # after each decoder
    assert not any(m.endswith("_slat") for m in vars(pipeline))


@torch.no_grad()
def test_conditioning_and_sampling_substeps_and_remove(run, rgb_image, monkeypatch):
    from PIL import Image
    pipeline = run.pipeline
    before = dict(vars(pipeline))
    monkeypatch.setattr(lean_model, "empty_allocator_cache", lambda: None)
    events = []
    with lean_model.install(pipeline, events.append):
        cond = pipeline.get_proj_cond_ss([Image.open(rgb_image).convert("RGB")])
        pipeline.sample_sparse_structure(cond, 32)
    steps = [(e["stage"], e["index"], e["count"], e["parent"]) for e in events
             if e["event"] == "stage"]
    assert steps == [("conditioning", 0, 2, "structure"), ("sampling", 1, 2, "structure")]
    assert vars(pipeline).keys() == before.keys()
    assert "sample" not in vars(pipeline.sparse_structure_sampler)


def test_a_refused_metal_allocation_names_the_stage():
    """MPS cannot run here: a stand-in ``run`` raises the MPS allocator's own wording."""
    from runner.worker.run import _classify

    class Pipeline:
        def run(self):
            raise RuntimeError("MPS backend out of memory (MPS allocated: 18.50 GiB, other "
                               "allocations: 448.00 KiB, max allowed: 18.72 GiB). Tried to "
                               "allocate 512.00 MiB on shared pool.")

    pipeline = Pipeline()
    hook = mps_limit.name_the_stage(pipeline, lambda: "texture")
    with pytest.raises(StageOutOfMemory, match="stage 'texture'") as err:
        pipeline.run()
    assert err.value.stage == "texture" and isinstance(err.value.__cause__, RuntimeError)
    error = _classify(err.value, None)
    assert error.kind == "out_of_memory" and "texture" in error.message
    hook.remove()
    with pytest.raises(RuntimeError, match="MPS backend"):
        pipeline.run()


def test_metal_limit_fraction_from_the_budget():
    assert mps_limit.mps_fraction(16 * 2 ** 30, 32 * 2 ** 30) == 0.5
    assert mps_limit.mps_fraction(70 * 2 ** 30, 32 * 2 ** 30) is None  # beyond the API's 2.0
    with pytest.raises(ValueError, match="budget_bytes"):
        mps_limit.mps_fraction(0, 32 * 2 ** 30)
    if not torch.backends.mps.is_available():
        assert mps_limit.set_limit(8 * 2 ** 30) is None  # nothing set where there is no MPS


def test_a_port_without_the_attention_module_keeps_its_own_with_a_warning(run, monkeypatch):
    monkeypatch.setattr(lean_model, "ATTENTION_MODULE", "pixal3d.modules.no_such_attention")
    feedforward = _port("modules.sparse.transformer.blocks").SparseFeedForwardNet
    port_forward = vars(feedforward)["forward"]
    events = []
    with lean_model.install(run.pipeline, events.append) as lean:
        assert lean.tools == []
        assert vars(feedforward)["forward"] is not port_forward  # the feed-forward by ranges
    assert vars(feedforward)["forward"] is port_forward
    (warning,) = [e for e in events if e["event"] == "warning"]
    assert "no_such_attention" in warning["message"] and warning["source"] == lean_model.SOURCE


def test_query_slice_from_the_budget():
    assert lean_model.query_slice(2 ** 30, heads=12, keys=21_500) == 512  # 0.98 GiB of scores
    assert lean_model.query_slice(2 ** 40, heads=12, keys=21_500) == 2048  # never above the port
    assert lean_model.query_slice(12 * 21_500 * 8 * 10, heads=12, keys=21_500) == 10

