"""The stand-in port's decoders (``SparseStructureDecoder``, ``SparseUnetVaeDecoder``,
``FlexiDualGridVaeDecoder``) against the released architecture: their ``state_dict`` keys,
shapes and dtypes derived here from the public layout (TRELLIS ``sparse_structure_vae.py``,
TRELLIS.2 ``sc_vaes/sparse_unet_vae.py``; parameter layout of the port's ``conv_none``) at
reduced widths, the released configs' parameter counts, fp16 torsos and checkpointing that do
not change what comes out, and the chosen weights (``standin/port/decoder_weights.py``) giving a
box, its boundary layer and a closed surface through the pipeline's calls. Small widths: seconds."""
from __future__ import annotations

import pytest
import torch

from standin import weights_module


@pytest.fixture(scope="module", autouse=True)
def port_on_path():
    """The stand-in port's folder on ``sys.path`` for its modules, as loading ``make_weights``
    puts it there (and leaves it: the session's weights fixture imports through it too)."""
    weights_module()


def _models():
    import pixal3d.models as models
    return models


def _unet_args(widths, blocks, latent=8, **extra):
    return dict(model_channels=widths, latent_channels=latent, num_blocks=blocks,
                block_type=["SparseConvNeXtBlock3d"] * 5,
                up_block_type=["SparseResBlockC2S3d"] * 4,
                block_args=[{"use_checkpoint": False}] * 5, **extra)


def _expected_unet(out, widths, blocks, latent, pred_subdiv):
    """Key → (shape, dtype) of a sparse U-Net decoder with an fp16 torso, from the layout:
    from_latent/output_layer Linear (fp32); per level ConvNeXt blocks (norm affine fp32, conv
    [C, 3, 3, 3, C] + bias, mlp 4×); one channel-to-space block between levels (norm1 affine,
    norm2 without parameters, conv1 [8C', 3, 3, 3, C], conv2 [C', 3, 3, 3, C'], to_subdiv
    [8, C] when predicted)."""
    h, f = torch.float16, torch.float32
    keys = {"output_layer.weight": ((out, widths[-1]), f), "output_layer.bias": ((out,), f),
            "from_latent.weight": ((widths[0], latent), f), "from_latent.bias": ((widths[0],), f)}
    for i, (c, n) in enumerate(zip(widths, blocks, strict=True)):
        for j in range(n):
            p = f"blocks.{i}.{j}."
            keys.update({p + "norm.weight": ((c,), f), p + "norm.bias": ((c,), f),
                         p + "conv.weight": ((c, 3, 3, 3, c), h), p + "conv.bias": ((c,), h),
                         p + "mlp.0.weight": ((4 * c, c), h), p + "mlp.0.bias": ((4 * c,), h),
                         p + "mlp.2.weight": ((c, 4 * c), h), p + "mlp.2.bias": ((c,), h)})
        if i < len(widths) - 1:
            p, o = f"blocks.{i}.{n}.", widths[i + 1]
            keys.update({p + "norm1.weight": ((c,), f), p + "norm1.bias": ((c,), f),
                         p + "conv1.weight": ((8 * o, 3, 3, 3, c), h),
                         p + "conv1.bias": ((8 * o,), h),
                         p + "conv2.weight": ((o, 3, 3, 3, o), h), p + "conv2.bias": ((o,), h)})
            if pred_subdiv:
                keys.update({p + "to_subdiv.weight": ((8, c), h), p + "to_subdiv.bias": ((8,), h)})
    return keys


def _expected_structure(latent, channels, res_blocks, middle, out=1):
    """Key → (shape, dtype) of a sparse-structure decoder with an fp16 torso (TRELLIS v1)."""
    h, f = torch.float16, torch.float32
    keys = {"input_layer.weight": ((channels[0], latent, 3, 3, 3), f),
            "input_layer.bias": ((channels[0],), f),
            "out_layer.0.weight": ((channels[-1],), f), "out_layer.0.bias": ((channels[-1],), f),
            "out_layer.2.weight": ((out, channels[-1], 3, 3, 3), f),
            "out_layer.2.bias": ((out,), f)}

    def res(prefix, c):
        keys.update({prefix + "norm1.weight": ((c,), f), prefix + "norm1.bias": ((c,), f),
                     prefix + "norm2.weight": ((c,), f), prefix + "norm2.bias": ((c,), f),
                     prefix + "conv1.weight": ((c, c, 3, 3, 3), h),
                     prefix + "conv1.bias": ((c,), h),
                     prefix + "conv2.weight": ((c, c, 3, 3, 3), h),
                     prefix + "conv2.bias": ((c,), h)})
    for k in range(middle):
        res(f"middle_block.{k}.", channels[0])
    index = 0
    for i, c in enumerate(channels):
        for _ in range(res_blocks):
            res(f"blocks.{index}.", c)
            index += 1
        if i < len(channels) - 1:
            keys[f"blocks.{index}.conv.weight"] = ((8 * channels[i + 1], c, 3, 3, 3), h)
            keys[f"blocks.{index}.conv.bias"] = ((8 * channels[i + 1],), h)
            index += 1
    return keys


def _layout(model):
    return {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}


def test_sparse_decoders_state_dicts_follow_the_released_layout():
    m = _models()
    widths, blocks = [64, 32, 16, 16, 16], [2, 1, 1, 1, 0]
    shape = m.FlexiDualGridVaeDecoder(resolution=512, use_fp16=True,
                                      **_unet_args(widths, blocks, latent=12))
    tex = m.SparseUnetVaeDecoder(out_channels=6, use_fp16=True, pred_subdiv=False,
                                 **_unet_args(widths, blocks, latent=12))
    assert _layout(shape) == _expected_unet(7, widths, blocks, 12, pred_subdiv=True)
    assert _layout(tex) == _expected_unet(6, widths, blocks, 12, pred_subdiv=False)
    assert list(shape.state_dict())[:2] == ["output_layer.weight", "output_layer.bias"]


def test_sparse_structure_decoder_state_dict_follows_the_released_layout():
    decoder = _models().SparseStructureDecoder(out_channels=1, latent_channels=8,
                                               num_res_blocks=2, channels=[16, 8, 4],
                                               num_res_blocks_middle=2, use_fp16=True)
    assert _layout(decoder) == _expected_structure(8, [16, 8, 4], 2, 2)


def _unet_parameters(out, widths, blocks, latent, pred_subdiv):
    """Parameters of a sparse U-Net decoder, counted from its layout (see _expected_unet)."""
    total = latent * widths[0] + widths[0] + widths[-1] * out + out
    for i, (c, n) in enumerate(zip(widths, blocks, strict=True)):
        total += n * (2 * c + 27 * c * c + c + 4 * c * c + 4 * c + 4 * c * c + c)
        if i < len(widths) - 1:
            o = widths[i + 1]
            total += 2 * c + 27 * c * 8 * o + 8 * o + 27 * o * o + o
            total += (8 * c + 8) if pred_subdiv else 0
    return total


def test_the_released_configs_have_the_released_sizes():
    """Built on the meta device from ``REAL_DECODERS`` (TRELLIS ss_vae_conv3d_16l8_fp16, TRELLIS.2
    {shape,tex}_vae_next_dc_f16c32_fp16_ft_512): 73.7 M parameters (0.15 GB) for the
    sparse-structure decoder, 474 M (0.95 GB in fp16; SPEC §1 says 0.9 GB) for each sparse one,
    as ``REAL_BYTES`` records and as counted from the layout here."""
    mw, m = weights_module(), _models()
    count = {"sparse_structure_decoder": 73_671_201,
             "shape_slat_decoder": _unet_parameters(7, [1024, 512, 256, 128, 64],
                                                    [4, 16, 8, 4, 0], 32, True),
             "tex_slat_decoder": _unet_parameters(6, [1024, 512, 256, 128, 64],
                                                  [4, 16, 8, 4, 0], 32, False)}
    assert count["shape_slat_decoder"] == 474_231_463
    for name, (cls_name, args) in mw.REAL_DECODERS.items():
        with torch.device("meta"):
            model = getattr(m, cls_name)(**args)
        state = model.state_dict()
        assert sum(v.numel() for v in state.values()) == count[name], name
        assert sum(v.numel() * v.element_size() for v in state.values()) \
            == mw.REAL_BYTES[name], name
    assert 0.9e9 < mw.REAL_BYTES["shape_slat_decoder"] < 0.96e9


def test_the_up_blocks_keep_what_the_subdivision_says():
    """Predicted (to_subdiv > 0, returned as subs) and guided (the same subs, to the texture
    decoder) give the same voxels, level by level."""
    from pixal3d.modules.sparse import SparseTensor
    m = _models()
    torch.manual_seed(5)
    args = _unet_args([16] * 5, [0] * 5)
    shape = m.FlexiDualGridVaeDecoder(resolution=64, **args).eval()
    tex = m.SparseUnetVaeDecoder(out_channels=6, pred_subdiv=False, **args).eval()
    with torch.no_grad():  # random to_subdiv: about a third of the children of every voxel
        for block in (res[-1] for res in shape.blocks[:-1]):
            block.to_subdiv.weight.normal_(0, 0.05)
            block.to_subdiv.bias.fill_(-0.02)
    coords = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.int32)
    x = SparseTensor(feats=torch.randn(2, 8), coords=coords)
    with torch.no_grad():
        meshes, subs = shape(x, return_subs=True)
        voxels = tex(x, guide_subs=subs)
        top = shape.upsample(x, upsample_times=1)
    assert [s.feats.shape for s in subs] == [(2, 8), *[(s.feats.shape[0], 8) for s in subs[1:]]]
    for level in range(3):  # each level's voxels are the kept children of the previous one
        assert subs[level + 1].feats.shape[0] == int((subs[level].feats > 0).sum())
    assert int((subs[3].feats > 0).sum()) == voxels.feats.shape[0] > 0
    assert torch.equal(voxels.coords[:, 1:], meshes[0].fdg_coords)
    assert top.shape[0] == int((subs[0].feats > 0).sum())
    with pytest.raises(AssertionError, match="guide_subs"):
        shape(x, guide_subs=subs)


def test_an_fp16_torso_and_checkpointing_keep_the_result(monkeypatch):
    """use_fp16 makes the torso's parameters float16 and its stream float16 (norms in fp32);
    the result stays within fp16 rounding of the fp32 decoder. ``use_checkpoint`` sends every
    block through ``torch.utils.checkpoint.checkpoint`` (recorded here and run directly: the real
    one's first call imports ``torch._dynamo``, seconds) and changes nothing."""
    import torch.utils.checkpoint
    from pixal3d.modules.sparse import SparseTensor
    m, mw = _models(), weights_module()
    import decoder_weights
    checkpointed = []

    def checkpoint(function, *args, use_reentrant=None):
        checkpointed.append(use_reentrant)
        return function(*args)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", checkpoint)
    _, args = mw.TEST_DECODERS["tex_slat_decoder"]
    outs = []
    for fp16, checkpoint in ((False, False), (True, False), (True, True)):
        kwargs = {**args, "use_fp16": fp16,
                  "block_args": [{"use_checkpoint": checkpoint}] * 5}
        model = m.SparseUnetVaeDecoder(**kwargs).eval()
        decoder_weights.texture(model)
        seen = []
        model.blocks[0][0].register_forward_hook(
            lambda _m, _i, o, seen=seen: seen.append(o.feats.dtype))
        coords = torch.tensor([[0, 2, 2, 2]], dtype=torch.int32)
        subs = [SparseTensor(feats=keep.expand(len(c), 8), coords=c) for c in _levels(coords)]
        with torch.no_grad():
            outs.append(model(SparseTensor(feats=torch.randn(1, 8), coords=coords),
                              guide_subs=subs).feats)
        assert seen == [torch.float16 if fp16 else torch.float32]
        assert model.blocks[0][0].conv.weight.dtype == (torch.float16 if fp16 else torch.float32)
        assert model.blocks[0][0].norm.weight.dtype == torch.float32
    assert outs[0].dtype == outs[1].dtype == torch.float32
    assert torch.allclose(outs[0], outs[1], atol=2e-2) and torch.equal(outs[1], outs[2])
    assert checkpointed == [False] * 6  # two ConvNeXt and four up blocks, non-reentrant


#: The children every voxel keeps in the guide subs above (half of them, one per corner pair).
KEEP = (0, 3, 5, 6)
keep = torch.tensor([[s in KEEP for s in range(8)]])


def _levels(coords):
    """The voxels of each of the four up levels when every voxel keeps the children ``KEEP``."""
    out = []
    for _ in range(4):
        out.append(coords)
        children = [[0, 2 * x + (s & 1), 2 * y + (s >> 1 & 1), 2 * z + (s >> 2 & 1)]
                    for _, x, y, z in coords.tolist() for s in KEEP]
        coords = torch.tensor(children, dtype=torch.int32)
    return out
