"""The stand-in port's flow models (``standin/port/pixal3d/models``) against the real
architecture: ``state_dict`` keys and shapes derived here from the real configs' structure
(Pixal3D-exp cdbb2bbf ``configs/gen/*_proj_finetune*.json``, TRELLIS.2's block layout), the
real-width parameter count, RoPE and APE against explicit formulas, every attention back end
against ``F.scaled_dot_product_attention``, the dtype conversion, the elastic mixin, the written
weights, and one sampler step through each model. Small widths only: seconds in all."""
from __future__ import annotations

import importlib
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from standin import PORT_DIR, weights_module


@pytest.fixture(scope="module")
def port():
    """The stand-in port's modules (its folder on ``sys.path``, as the port's own imports
    need)."""
    if str(PORT_DIR) not in sys.path:
        sys.path.insert(0, str(PORT_DIR))
    names = ("flow_configs", "pixal3d.models", "pixal3d.modules.sparse",
             "pixal3d.modules.sparse.config", "pixal3d.modules.sparse.attention.full_attn",
             "pixal3d.modules.sparse.attention.modules", "pixal3d.modules.attention",
             "pixal3d.modules.attention.config", "pixal3d.modules.transformer",
             "pixal3d.pipelines.samplers", "flash_attn")
    return {name.split(".")[-1] if name != "pixal3d.modules.attention.config" else "dense_config":
            importlib.import_module(name) for name in names}


@pytest.fixture()
def backends(port):
    """Restores both attention back ends after a test that sets them."""
    sparse, dense = port["config"], port["dense_config"]
    before = sparse.ATTN, dense.BACKEND
    yield sparse, dense
    sparse.set_attn_backend(before[0])
    dense.set_backend(before[1])


def _reduced(name: str, port) -> tuple[str, dict]:
    """The real config of ``name`` at reduced widths: 4 heads of 24 channels, 2 blocks, the
    real switches and ratios; conditioning 24 wide, projected features 40 (None: as real)."""
    cls, real = port["flow_configs"].REAL[name]
    args = dict(real, model_channels=96, num_heads=4, num_blocks=2, cond_channels=24,
                dtype="float32")
    if real.get("proj_in_channels"):
        args["proj_in_channels"] = 40
    return cls, args


def _expected_layout(cls: str, a: dict) -> dict:
    """Key -> shape of the real model for args ``a`` (share_mod, rope, QK RMS norm, proj),
    written from the real sources' structure (not from the stand-in)."""
    C, heads, H = a["model_channels"], a["num_heads"], int(a["model_channels"] * a["mlp_ratio"])
    hd, ctx = C // heads, a["cond_channels"]
    proj_in = a.get("proj_in_channels") or ctx
    out = {}
    if cls == "SparseStructureFlowModel":
        out["rope_phases"] = (a["resolution"] ** 3, hd // 2)
    out.update({"t_embedder.mlp.0.weight": (C, 256), "t_embedder.mlp.0.bias": (C,),
                "t_embedder.mlp.2.weight": (C, C), "t_embedder.mlp.2.bias": (C,),
                "adaLN_modulation.1.weight": (6 * C, C), "adaLN_modulation.1.bias": (6 * C,),
                "input_layer.weight": (C, a["in_channels"]), "input_layer.bias": (C,)})
    for i in range(a["num_blocks"]):
        b, x = f"blocks.{i}.", f"blocks.{i}.cross_attn.cross_attn_block."
        out.update({
            b + "modulation": (6 * C,), b + "norm2.weight": (C,), b + "norm2.bias": (C,),
            b + "self_attn.to_qkv.weight": (3 * C, C), b + "self_attn.to_qkv.bias": (3 * C,),
            b + "self_attn.q_rms_norm.gamma": (heads, hd),
            b + "self_attn.k_rms_norm.gamma": (heads, hd),
            b + "self_attn.to_out.weight": (C, C), b + "self_attn.to_out.bias": (C,),
            x + "to_q.weight": (C, C), x + "to_q.bias": (C,),
            x + "to_kv.weight": (2 * C, ctx), x + "to_kv.bias": (2 * C,),
            x + "q_rms_norm.gamma": (heads, hd), x + "k_rms_norm.gamma": (heads, hd),
            x + "to_out.weight": (C, C), x + "to_out.bias": (C,),
            b + "cross_attn.proj_linear.weight": (C, proj_in),
            b + "cross_attn.proj_linear.bias": (C,),
            b + "mlp.mlp.0.weight": (H, C), b + "mlp.mlp.0.bias": (H,),
            b + "mlp.mlp.2.weight": (C, H), b + "mlp.mlp.2.bias": (C,)})
    out.update({"out_layer.weight": (a["out_channels"], C),
                "out_layer.bias": (a["out_channels"],)})
    return out


@pytest.mark.parametrize("name", ["sparse_structure_flow_model", "shape_slat_flow_model_1024",
                                  "tex_slat_flow_model_1024"])
def test_state_dict_keys_and_shapes_follow_the_real_structure(port, name):
    cls, args = _reduced(name, port)
    with torch.device("meta"):
        model = getattr(port["models"], cls)(**args)
    state = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert state == _expected_layout(cls, args)
    assert type(model).__name__ == cls
    # nothing beyond the real layout: no ballast, the RoPE tables are not parameters
    assert not any("ballast" in k or "freqs" in k for k in state)


def _real_count(a: dict) -> int:
    """Parameters of the real model from its config (closed form of the layout above)."""
    C, H, ctx = a["model_channels"], int(a["model_channels"] * a["mlp_ratio"]), a["cond_channels"]
    proj_in = a.get("proj_in_channels") or ctx
    block = (6 * C + 2 * C + (3 * C * C + 3 * C) + 2 * C + (C * C + C)       # self-attention
             + (C * C + C) + (2 * C * ctx + 2 * C) + 2 * C + (C * C + C)    # cross-attention
             + (C * proj_in + C) + (2 * C * H + H + C))                      # proj, MLP
    return ((256 * C + C + C * C + C) + (6 * C * C + 6 * C) + (a["in_channels"] * C + C)
            + (C * a["out_channels"] + a["out_channels"]) + a["num_blocks"] * block)


def test_real_width_parameter_count_is_the_configs_1_3_billion(port):
    """Built on the meta device from the released configs: the parameters counted from the
    layout here, and the bytes (bf16 blocks, the rest fp32, the RoPE phases complex64) that
    ``make_weights.REAL_BYTES`` records for each flow."""
    fc, real_bytes = port["flow_configs"], weights_module().REAL_BYTES
    counts = {}
    for name in fc.NAMES:
        cls, args = fc.REAL[name]
        with torch.device("meta"):
            model = getattr(port["models"], cls)(**args)
        counts[name] = sum(p.numel() for p in model.parameters())
        assert counts[name] == _real_count(args), name
        state = model.state_dict()
        assert sum(t.numel() * t.element_size() for t in state.values()) == real_bytes[name], name
    assert counts["sparse_structure_flow_model"] == 1_339_411_976
    assert counts["shape_slat_flow_model_1024"] == 1_386_671_648
    assert counts["tex_slat_flow_model_1024"] == 1_386_720_800
    args = fc.REAL["tex_slat_flow_model_1024"][1]
    assert (args["model_channels"], args["num_blocks"], args["num_heads"]) == (1536, 30, 12)


def _rotate_reference(x, angles):
    """Channel pairs (a, b) of x [..., C] turned by angles [..., C/2]: explicit cos/sin."""
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * torch.cos(angles) - b * torch.sin(angles)
    out[..., 1::2] = a * torch.sin(angles) + b * torch.cos(angles)
    return out


def test_rope_and_ape_match_their_formulas(port):
    sp = port["sparse"]
    rope_mod = importlib.import_module("pixal3d.modules.sparse.attention.rope")
    coords = torch.tensor([[0, 1, 2, 3], [0, 5, 0, 7]], dtype=torch.int32)
    head_dim = 14  # freq_dim 2 per axis: 6 turned pairs, 1 pair padded (angle 0)
    embedder = rope_mod.SparseRotaryPositionEmbedder(head_dim)
    assert torch.allclose(embedder.freqs, torch.tensor([1.0, 0.01]))
    x = torch.randn(2, 3, head_dim)
    angles = torch.zeros(2, head_dim // 2)
    for axis in range(3):
        for i, f in enumerate((1.0, 0.01)):
            angles[:, 2 * axis + i] = coords[:, 1 + axis].float() * f
    turned = embedder(sp.SparseTensor(x, coords))
    assert torch.allclose(turned.feats, _rotate_reference(x, angles[:, None]), atol=1e-6)
    dense = port["attention"].RotaryPositionEmbedder(head_dim)
    phases = dense(coords[:, 1:])
    assert torch.allclose(dense.apply_rotary_embedding(x[None], phases)[0], turned.feats)
    ape = port["transformer"].AbsolutePositionEmbedder(8)  # freq_dim 1, 2 channels padded
    p = coords[:, 1:].float()
    expected = torch.stack([p[:, 0].sin(), p[:, 0].cos(), p[:, 1].sin(), p[:, 1].cos(),
                            p[:, 2].sin(), p[:, 2].cos(), 0 * p[:, 0], 0 * p[:, 0]], dim=1)
    assert torch.allclose(ape(coords[:, 1:]), expected, atol=1e-6)


def _tokens(sp, lengths, heads, channels, gen):
    coords = torch.cat([torch.cat([torch.full((n, 1), b), torch.arange(n)[:, None].repeat(1, 3)],
                                  1) for b, n in enumerate(lengths)]).int()
    return lambda *shape: sp.SparseTensor(torch.randn(coords.shape[0], *shape, generator=gen),
                                          coords), coords


@pytest.mark.parametrize("backend", ["naive", "sdpa", "flash_attn"])
def test_sparse_attention_back_ends_equal_sdpa(port, backends, monkeypatch, backend):
    """Every call form, two sequences of different lengths, against per-sequence SDPA."""
    sp, attn = port["sparse"], port["full_attn"].sparse_scaled_dot_product_attention
    monkeypatch.setattr(port["flash_attn"], "QUERY_BLOCK", 16)  # several tiles each way
    monkeypatch.setattr(port["flash_attn"], "KEY_BLOCK", 8)
    backends[0].set_attn_backend(backend)
    gen = torch.Generator().manual_seed(0)
    make, coords = _tokens(sp, [37, 20], 2, 8, gen)
    q, k, v = make(2, 8), make(2, 8), make(2, 8)
    ctx = torch.randn(2, 5, 2, 2, 8, generator=gen)  # dense kv: [N, L, 2, H, C]

    def ref(qf, kf, vf):
        return F.scaled_dot_product_attention(qf.transpose(0, 1), kf.transpose(0, 1),
                                              vf.transpose(0, 1)).transpose(0, 1)

    split = [slice(0, 37), slice(37, 57)]
    want = torch.cat([ref(q.feats[s], k.feats[s], v.feats[s]) for s in split])
    qkv = sp.SparseTensor(torch.stack([q.feats, k.feats, v.feats], 1), coords)
    assert torch.allclose(attn(qkv).feats, want, atol=1e-5)
    assert torch.allclose(attn(q, k, v).feats, want, atol=1e-5)
    want_kv = torch.cat([ref(q.feats[s], ctx[b, :, 0], ctx[b, :, 1])
                         for b, s in enumerate(split)])
    assert torch.allclose(attn(q, ctx).feats, want_kv, atol=1e-5)
    assert torch.allclose(attn(q, ctx[:, :, 0], ctx[:, :, 1]).feats, want_kv, atol=1e-5)


@pytest.mark.parametrize("backend", ["naive", "sdpa", "flash_attn"])
def test_dense_attention_back_ends_equal_sdpa(port, backends, backend):
    attn = port["attention"].scaled_dot_product_attention
    backends[1].set_backend(backend)
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(2, 19, 3, 2, 8, generator=gen)
    q, k, v = qkv.unbind(dim=2)
    want = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    assert torch.allclose(attn(qkv), want, atol=1e-5)
    assert torch.allclose(attn(q, torch.stack([k, v], 2)), want, atol=1e-5)
    assert torch.allclose(attn(q, k, v), want, atol=1e-5)


def test_cuda_only_back_ends_refuse_instead_of_substituting(port, backends):
    sp = port["sparse"]
    backends[0].set_attn_backend("xformers")
    qkv = sp.SparseTensor(torch.randn(4, 3, 1, 8), torch.zeros(4, 4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="xformers"):
        port["full_attn"].sparse_scaled_dot_product_attention(qkv)
    backends[1].set_backend("flash_attn_3")
    with pytest.raises(RuntimeError, match="flash_attn_3"):
        port["attention"].scaled_dot_product_attention(torch.randn(1, 4, 3, 1, 8))


def test_flash_attn_never_holds_the_whole_score_matrix(port, monkeypatch):
    fa = port["flash_attn"]
    monkeypatch.setattr(fa, "QUERY_BLOCK", 16)
    monkeypatch.setattr(fa, "KEY_BLOCK", 8)
    largest, exp = [0], torch.exp

    def watched(x):
        largest[0] = max(largest[0], x.numel())
        return exp(x)

    monkeypatch.setattr(torch, "exp", watched)
    q, k, v = (torch.randn(1, 64, 2, 8) for _ in range(3))
    out = fa.flash_attn_func(q, k, v)
    monkeypatch.undo()
    assert largest[0] == 2 * 16 * 8  # one tile: heads x query block x key block, never 64 x 64
    want = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    assert torch.allclose(out, want, atol=1e-5)
    with pytest.raises(NotImplementedError):
        fa.flash_attn_func(q, k, v, causal=True)


def _cond(sp, coords, hidden, proj, dense_tokens=None, zero=False):
    gen = torch.Generator().manual_seed(4)
    scale = 0.0 if zero else 1.0
    glob = torch.randn(1, 5, hidden, generator=gen) * scale
    if dense_tokens is not None:
        return {"global": glob, "proj": torch.randn(1, dense_tokens, proj, generator=gen) * scale}
    feats = torch.randn(coords.shape[0], proj, generator=gen) * scale
    return {"global": glob, "proj": sp.SparseTensor(feats, coords)}


@pytest.mark.parametrize("name", ["sparse_structure_flow_model", "shape_slat_flow_model_512",
                                  "tex_slat_flow_model_1024"])
def test_one_guided_flow_step_through_each_model(port, name):
    """One step of the pipeline's sampler (guidance inside its interval) through the written
    weights: the velocity is finite and about OUT_STD per channel, and both the image and the
    time step reach it."""
    fc, sp = port["flow_configs"], port["sparse"]
    model = fc.build_flow(name)
    sampler = port["samplers"].FlowEulerGuidanceIntervalSampler(sigma_min=1e-5)
    gen = torch.Generator().manual_seed(3)
    if name == "sparse_structure_flow_model":
        noise = torch.randn(1, model.in_channels, *[model.resolution] * 3, generator=gen)
        cond = _cond(sp, None, model.cond_channels, model.cond_channels, noise[0, 0].numel())
        neg = _cond(sp, None, model.cond_channels, model.cond_channels, noise[0, 0].numel(), True)
        kwargs, feats = {}, lambda x: x
    else:
        coords = torch.cat([torch.zeros(300, 1), torch.randint(0, 64, (300, 3), generator=gen)],
                           1).int().unique(dim=0)
        noise = sp.SparseTensor(torch.randn(coords.shape[0], model.out_channels, generator=gen),
                                coords)
        cond = _cond(sp, coords, model.cond_channels, model.proj_in_channels)
        neg = _cond(sp, coords, model.cond_channels, model.proj_in_channels, zero=True)
        concat = model.in_channels - model.out_channels
        kwargs = {"concat_cond": sp.SparseTensor(torch.randn(coords.shape[0], concat), coords)
                  } if concat else {}
        feats = lambda x: x.feats  # noqa: E731
    out = sampler.sample(model, noise, cond, neg, steps=1, guidance_strength=3.0,
                         guidance_interval=(0.0, 1.0), **kwargs)
    step = feats(noise) - feats(out.samples)  # t 1 -> 0: the guided velocity
    assert torch.isfinite(step).all() and 0.05 < step.std() < 5 * fc.OUT_STD
    assert len(out.pred_x_t) == 1 and len(out.pred_x_0) == 1
    t = torch.tensor([1000.0])
    v_pos, v_neg = model(noise, t, cond, **kwargs), model(noise, t, neg, **kwargs)
    assert not torch.allclose(feats(v_pos), feats(v_neg))
    assert not torch.allclose(feats(v_pos), feats(model(noise, t * 0.5, cond, **kwargs)))


def test_bf16_blocks_and_fp32_rest_as_the_real_convert_to(port):
    fc, sp = port["flow_configs"], port["sparse"]
    model = fc.build_flow("shape_slat_flow_model_512")
    coords = torch.cat([torch.zeros(50, 1), torch.randint(0, 32, (50, 3))], 1).int().unique(dim=0)
    x = sp.SparseTensor(torch.randn(coords.shape[0], 8), coords)
    cond = _cond(sp, coords, 16, 32)
    t = torch.tensor([600.0])
    full = model(x, t, cond).feats
    model.convert_to(torch.bfloat16)
    assert model.blocks[0].self_attn.to_qkv.weight.dtype == torch.bfloat16
    assert model.blocks[0].cross_attn.proj_linear.weight.dtype == torch.bfloat16
    for fp32 in (model.input_layer.weight, model.out_layer.weight, model.blocks[0].modulation,
                 model.blocks[0].norm2.weight, model.blocks[0].self_attn.q_rms_norm.gamma,
                 model.adaLN_modulation[1].weight):
        assert fp32.dtype == torch.float32
    half = model(x, t, cond).feats
    assert half.dtype == torch.float32
    assert (half - full).norm() / full.norm() < 0.05  # bf16 rounding, not another model


def test_elastic_mixin_checkpoints_the_first_blocks_only_inside_with_mem_ratio(port):
    cls, args = _reduced("shape_slat_flow_model_1024", port)
    model = getattr(port["models"], cls)(**dict(args, num_blocks=4))
    with model.with_mem_ratio(0.5) as exact:
        assert [b.use_checkpoint for b in model.blocks] == [True, True, True, False]
        assert exact == 0.5
    assert not any(b.use_checkpoint for b in model.blocks)
    with model.with_mem_ratio(1.0) as exact:
        assert exact == 1.0 and not any(b.use_checkpoint for b in model.blocks)


def test_sized_args_widen_one_small_mlp_up_to_the_real_hidden_width(port):
    fc = port["flow_configs"]
    for name in ("shape_slat_flow_model_1024", "sparse_structure_flow_model"):
        small = fc.small_args(name)
        target = 3 * fc.state_bytes(fc.model_class(name), small)
        args = fc.sized_args(name, target)
        got = fc.state_bytes(fc.model_class(name), args)
        assert abs(got - target) <= (2 * small["model_channels"] + 1) * 4 * small["num_blocks"]
        assert {k: v for k, v in args.items() if k != "mlp_ratio"} == \
            {k: v for k, v in small.items() if k != "mlp_ratio"}
        assert int(args["model_channels"] * args["mlp_ratio"]) <= fc.MAX_HIDDEN
    with pytest.raises(ValueError):
        fc.sized_args("shape_slat_flow_model_1024", 0)


def test_sized_args_past_one_block_add_blocks_not_hidden_rows(port, scale=1 / 64):
    """The default bench's size: the MLP never wider than the real 8,192 (at 1/8 one widened
    MLP had 160 k hidden channels, 42 GB of rows at the structure stage's 4,096 tokens); blocks
    of the real head width carry the rest, the fewest that reach the target."""
    fc, real = port["flow_configs"], weights_module().REAL_BYTES
    for name in ("sparse_structure_flow_model", "tex_slat_flow_model_1024"):
        target = int(real[name] * scale)
        args = fc.sized_args(name, target)
        channels, blocks = args["model_channels"], args["num_blocks"]
        hidden = int(channels * args["mlp_ratio"])
        assert (channels, args["num_heads"]) == (fc.SIZED_CHANNELS, 1)
        assert hidden <= fc.MAX_HIDDEN and blocks > 1
        got = fc.state_bytes(fc.model_class(name), args)
        assert abs(got - target) <= (2 * channels + 1) * 4 * blocks
        fewer = dict(args, num_blocks=blocks - 1, mlp_ratio=(fc.MAX_HIDDEN + 0.5) / channels)
        assert fc.state_bytes(fc.model_class(name), fewer) < target
        assert {k: v for k, v in args.items()
                if k not in ("mlp_ratio", "num_blocks", "model_channels", "num_heads")} == \
            {k: v for k, v in fc.small_args(name).items()
             if k not in ("mlp_ratio", "num_blocks", "model_channels", "num_heads")}


def test_the_self_attention_calls_the_module_global_the_product_hooks(port, monkeypatch):
    """The product's lean attention replaces ``sparse_scaled_dot_product_attention`` in
    ``pixal3d.modules.sparse.attention.modules``: every block's self-attention goes through
    that name in the packed ``(qkv)`` form, the cross-attention (QK RMS norm) as ``(q, k, v)``
    with dense k and v."""
    fc, sp, modules = port["flow_configs"], port["sparse"], port["modules"]
    model = fc.build_flow("tex_slat_flow_model_1024")
    calls = []
    original = modules.sparse_scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append([tuple(a.feats.shape) if hasattr(a, "feats") else ("dense",) + tuple(a.shape)
                      for a in args])
        return original(*args, **kwargs)

    monkeypatch.setattr(modules, "sparse_scaled_dot_product_attention", spy)
    coords = torch.cat([torch.zeros(40, 1), torch.randint(0, 64, (40, 3))], 1).int().unique(dim=0)
    n = coords.shape[0]
    x, concat = (sp.SparseTensor(torch.randn(n, 8), coords) for _ in range(2))
    model(x, torch.tensor([500.0]), _cond(sp, coords, 16, 32), concat_cond=concat)
    heads, hd = model.num_heads, model.model_channels // model.num_heads
    assert calls == [[(n, 3, heads, hd)],
                     [(n, heads, hd), ("dense", 1, 5, heads, hd), ("dense", 1, 5, heads, hd)]]
    assert math.isclose(model.blocks[0].self_attn.rope.freqs[0].item(), 1.0)
