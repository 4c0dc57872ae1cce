"""The stand-in decoders' chosen weights (``standin/port/decoder_weights.py``) through the real
forward and the pipeline's own calls: the sparse structure is the box ``BOX`` whatever the
latent; the shape decoder's ``upsample`` covers it so the pipeline's quantisation finds the
64-grid box again; ``decode_latent`` gives the box's one-voxel boundary layer at the requested
resolution, a closed surface through its centres, voxel colours by the side of the box, and the
``fdg_*`` tensors on the mesh; the module-level mesh extraction is what the decoder calls; bad
widths are refused. Test widths (``TEST_DECODERS``): seconds."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from standin import weights_module


@pytest.fixture(scope="module", autouse=True)
def port_on_path():
    """The stand-in port's folder on ``sys.path`` for its modules, as loading ``make_weights``
    puts it there (and leaves it: the session's weights fixture imports through it too)."""
    weights_module()


@pytest.fixture(scope="module")
def decoders():
    """The three test-width decoders with their chosen weights, as make_weights writes them."""
    import decoder_weights
    import pixal3d.models as models
    mw = weights_module()
    built = {}
    torch.manual_seed(0)
    for name, (cls_name, args) in mw.TEST_DECODERS.items():
        model = getattr(models, cls_name)(**args).eval()
        getattr(decoder_weights, mw.DECODER_WEIGHTS[name])(model)
        built[name] = model
    return built


def _tokens(lo: int, hi: int, channels: int = 8, seed: int = 0):
    from pixal3d.modules.sparse import SparseTensor
    r = torch.arange(lo, hi)
    xyz = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3).int()
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz], dim=1)
    feats = torch.randn(len(xyz), channels, generator=torch.Generator().manual_seed(seed))
    return SparseTensor(feats=feats, coords=coords)


@pytest.mark.parametrize("scale", [0.0, 1.0, 50.0])
def test_the_sparse_structure_is_the_box_whatever_the_latent(decoders, scale):
    import decoder_weights
    z = scale * torch.randn(1, 8, 16, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = decoders["sparse_structure_decoder"](z)
    assert logits.shape == (1, 1, 32, 32, 32)
    lo, hi = decoder_weights.BOX
    want = torch.zeros(32, 32, 32, dtype=torch.bool)
    want[lo:hi, lo:hi, lo:hi] = True
    assert torch.equal(logits[0, 0] > 0, want)
    assert logits.abs().min() > 0.1  # a margin, not a tie


def test_upsample_and_the_pipelines_quantisation_find_the_64_grid_box(decoders):
    import decoder_weights
    lo, hi = decoder_weights.BOX
    lr = _tokens(lo, hi)
    with torch.no_grad():
        hr = decoders["shape_slat_decoder"].upsample(lr, upsample_times=4)
    assert hr.shape[1] == 4 and int(hr[:, 1:].min()) == 16 * lo and int(hr[:, 1:].max()) == \
        16 * hi - 1
    # the pipeline's run(): 1024 → grid 64, coords from the 512 frame, rounded
    quant = torch.cat([hr[:, :1], ((hr[:, 1:] + 0.5) / 512 * 63).round().int()], 1).unique(dim=0)
    r = torch.arange(2 * lo, 2 * hi)
    want = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3)
    assert torch.equal(quant[:, 1:], want.int())


@pytest.fixture(scope="module")
def decoded(decoders):
    """``decode_latent`` of the stand-in pipeline on the 64-grid box at 1024."""
    from pixal3d.pipelines import Pixal3DImageTo3DPipeline
    models = {"shape_slat_decoder": decoders["shape_slat_decoder"],
              "tex_slat_decoder": decoders["tex_slat_decoder"]}
    pipeline = Pixal3DImageTo3DPipeline(models=models, low_vram=True)
    import decoder_weights
    lo, hi = decoder_weights.BOX
    shape, tex = _tokens(2 * lo, 2 * hi, seed=2), _tokens(2 * lo, 2 * hi, seed=3)
    (mesh,) = pipeline.decode_latent(shape, tex, 1024)
    return mesh, 32 * lo, 32 * hi


def test_decode_latent_gives_the_boxs_boundary_layer_and_a_closed_surface(decoded):
    mesh, lo, hi = decoded
    coords = mesh.coords.long()
    shell = ((coords == lo) | (coords == hi - 1)).any(dim=1)
    inside = ((coords >= lo) & (coords < hi)).all(dim=1)
    assert inside.all()
    side = hi - lo
    assert int(shell.sum()) == side ** 3 - (side - 2) ** 3  # the whole layer, once
    assert len(coords) - int(shell.sum()) < int(shell.sum()) // 2  # single interior descendants
    faces = mesh.faces.numpy()
    edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    _, count = np.unique(edges, axis=0, return_counts=True)
    assert (count == 2).all()  # closed and manifold
    used = mesh.vertices[mesh.faces.reshape(-1).long()]
    centre = (lo + hi) / 2 / 1024 - 0.5
    half = (side - 1) / 2 / 1024  # through the layer's voxel centres
    assert torch.allclose(used.abs().amax(dim=0) - abs(centre), torch.full((3,), half), atol=1e-6)
    assert mesh.voxel_size == 1 / 1024 and torch.equal(mesh.origin, torch.full((3,), -0.5))
    assert torch.equal(mesh.fdg_coords.long(), coords)
    assert mesh.fdg_intersected.dtype == torch.bool and mesh.fdg_split_weight.shape[1] == 1


def test_decoded_voxels_are_coloured_by_the_side_of_the_box(decoded):
    import decoder_weights
    mesh, lo, hi = decoded
    attrs, coords = mesh.attrs, mesh.coords.long()
    assert attrs.min() >= 0 and attrs.max() <= 1
    for face, colour in enumerate(decoder_weights.FACE_COLOURS):
        axis, side = divmod(face, 2)
        plane = coords[:, axis] == (hi - 1 if side else lo)
        others = [a for a in range(3) if a != axis]
        middle = plane & ((coords[:, others] > lo) & (coords[:, others] < hi - 1)).all(dim=1)
        want = torch.tensor(colour) * 0.5 + 0.5
        assert torch.allclose(attrs[middle, :3], want.expand(int(middle.sum()), 3), atol=5e-3)
    assert torch.allclose(attrs[:, 5], torch.ones(len(attrs)))


def test_the_decoder_meshes_through_its_modules_function(decoders, monkeypatch):
    """A hook on ``fdg_vae.flexible_dual_grid_to_mesh`` sees the extraction (where the product's
    lean mode marks ``mesh``), and ``set_resolution`` sets its grid."""
    import decoder_weights
    from pixal3d.models.sc_vaes import fdg_vae
    calls = []
    original = fdg_vae.flexible_dual_grid_to_mesh
    monkeypatch.setattr(fdg_vae, "flexible_dual_grid_to_mesh",
                        lambda *a, **k: calls.append(k["grid_size"]) or original(*a, **k))
    decoder = decoders["shape_slat_decoder"]
    decoder.set_resolution(512)  # the 32 grid's box: voxels on the 512 grid
    with torch.no_grad():
        (mesh,) = decoder(_tokens(*decoder_weights.BOX))
    assert calls == [512] and len(mesh.faces) > 0
    lo, hi = decoder_weights.BOX
    assert float(mesh.vertices.max()) == pytest.approx((16 * hi - 0.5) / 512 - 0.5)


def test_widths_the_layout_does_not_fit_are_refused():
    import decoder_weights
    import pixal3d.models as models
    mw = weights_module()
    _, args = mw.TEST_DECODERS["shape_slat_decoder"]
    narrow = models.FlexiDualGridVaeDecoder(**{**args, "model_channels": [8] * 5})
    with pytest.raises(ValueError, match="at least 16"):
        decoder_weights.shape(narrow)
    with pytest.raises(ValueError, match="decoders must be"):
        mw.decoder_configs("huge")


def test_the_weights_hold_at_other_widths_and_depths():
    """The released layout's shape — three sparse-structure levels (64³ out, pooled to 32 by the
    pipeline) with ResBlocks on every level, sparse widths halving from level to level, ConvNeXt
    blocks everywhere — with small widths (fp32 to stay quick): the same box and layer."""
    import decoder_weights
    import pixal3d.models as models
    from pixal3d.pipelines import Pixal3DImageTo3DPipeline  # noqa: F401  (the port imports)
    torch.manual_seed(0)
    structure = models.SparseStructureDecoder(out_channels=1, latent_channels=8,
                                              num_res_blocks=2, channels=[8, 4, 2],
                                              num_res_blocks_middle=2).eval()
    decoder_weights.sparse_structure(structure)
    with torch.no_grad():
        logits = structure(torch.randn(1, 8, 16, 16, 16))
    pooled = torch.nn.functional.max_pool3d((logits > 0).float(), 2, 2, 0)[0, 0] > 0.5
    lo, hi = decoder_weights.BOX
    assert torch.equal(torch.argwhere(pooled).unique(), torch.arange(lo, hi))
    assert int(pooled.sum()) == (hi - lo) ** 3
    widths = [64, 32, 16, 16, 16]
    shape = models.FlexiDualGridVaeDecoder(
        resolution=512, model_channels=widths, latent_channels=8, num_blocks=[2, 1, 1, 1, 0],
        block_type=["SparseConvNeXtBlock3d"] * 5, up_block_type=["SparseResBlockC2S3d"] * 4,
        block_args=[{}] * 5).eval()
    decoder_weights.shape(shape)
    with torch.no_grad():
        (mesh,), subs = shape(_tokens(lo, hi), return_subs=True)
    side = 16 * (hi - lo)
    coords = mesh.fdg_coords.long()
    shell = ((coords == 16 * lo) | (coords == 16 * hi - 1)).any(dim=1)
    assert int(shell.sum()) == side ** 3 - (side - 2) ** 3
    faces = mesh.faces.numpy()
    edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    assert (np.unique(edges, axis=0, return_counts=True)[1] == 2).all()
