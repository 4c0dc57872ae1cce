"""The stand-in decoders' weights (not a module of the real port): chosen, not trained, so that
the decoders' real forward gives a sane result from whatever latents the stand-in flows make.

Why chosen weights: the stand-in has no trained checkpoint and its flows' latents carry no
shape, yet a stand-in run must give a small, bounded set of voxels, a closed mesh and colours the
export tests can read — from the real layers, with nothing added to their forward. Every weight
below is a plain number written into the real parameters; the forward is the real one.

Two facts of the real layers do the work:

- A LayerNorm of a vector whose non-zero entries are pairs ``(v, −v)`` of one magnitude has
  mean 0 and a variance fixed by the count of pairs, so it is an exact linear map of the
  values; ``silu(y) − silu(−y) = y`` gives the value back exactly after the SiLU. The sparse
  decoders keep every feature as such ±0.5 pairs, so their blocks compute exact linear maps of
  binary flags.
- A LayerNorm of ``[x0, 0, …]`` is ``±[√(C−1), −1/√(C−1), …]`` by the sign of ``x0`` alone, so
  a convolution of its SiLU counts the neighbours with ``x0 > 0``; a threshold on that count
  is an erosion. The sparse-structure decoder erodes its whole grid to a centred box.

**Sparse-structure decoder** (``sparse_structure``): ``input_layer`` writes ``x0 = 1`` at every
voxel (the latent's weights are 0); ``ResBlock3d``s chosen by :func:`erosion_plan` erode the set
``x0 > 0`` by 1 or 2 voxels (conv1 counts the 3³ or 1-voxel neighbourhood, norm2 takes its sign,
conv2 sums those signs: the branch adds ``4·(Σ − T)``, 0 where every tap is inside and ≤ −4
elsewhere; the grid's zero padding counts as outside); ``UpsampleBlock3d`` copies ``x0`` to the
eight children; ``out_layer`` erodes by one more voxel and gives ``±V/2`` logits. Result: the box
``[15, 17)³`` of the 32 grid the pipeline keeps (``BOX``), for any latent; the other blocks keep
their initialisation (``conv2`` zero: identity).

**Sparse U-Net decoders** (``shape`` and ``texture``): the feature stream holds eight pairs, pair
``p`` at channels ``(p·C/8, p·C/8 + 1)`` (one in each eighth, so each child of a
channel-to-space step inherits exactly one pair through the skip): pairs 0–5 are the voxel's
face flags (``e = f − ½``, ``f = 1`` when its neighbour across face ``2·axis + side`` — side 1
the + side — lies outside the solid), pairs 6–7 constants. ``from_latent`` writes constants (the
latent's weights are 0). Each ``SparseResBlockC2S3d`` computes in ``conv1`` every child's six
flags — at the first level from which of the voxel's six face neighbours exist (the latent
tokens are solid), later from the voxel's own flags, kept for the faces the child touches — and
the skip value it will inherit; ``conv2`` turns them into the child's eight pairs, minus that
skip. The shape decoder's ``to_subdiv`` keeps every child at the first level (so the upsampled
coordinates cover the solid), then the children touching an outside face, and child 0 of a voxel
with no outside face (so every voxel keeps a descendant and the pipeline's quantisation of the
upsampled coordinates finds the whole solid again). The finest voxels are the solid's one-voxel
boundary layer (plus those single interior descendants, which have no flags). Its
``output_layer`` gives each voxel its centre as dual vertex, ``intersected`` on an axis where one
of its two faces on that axis is outside, and equal split weights (``SPLIT_LOGIT``):
flexible-dual-grid extraction then gives the closed surface through the layer's voxel centres.
The texture decoder follows the shape decoder's subdivisions and colours each voxel by its
outside faces (``FACE_COLOURS``; one colour per side of the box, blends at edges and corners).
``SparseConvNeXtBlock3d``s get a zero last MLP layer (identity; ``initialize_weights`` had made
it Xavier-uniform, like every Linear).
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

#: The sparse structure the stand-in's weights decode to: the box [15, 17)³ of the 32 grid
#: (centred, inside the range where the pipeline's quantisation of upsampled coordinates,
#: ``((c + 0.5) / 512 · 63).round()``, maps each 64-grid cell back onto itself).
BOX = (15, 17)
ERODE_GAIN = 4.0  # the erosion branch's scale: an eroded voxel's x0 drops by ≥ 4
#: Base colour offsets (RGB, in the decoder's −1..1 output) of an outside face, by face index
#: 2·axis + side; added to ``BASE_COLOUR`` (a corner voxel adds three: every sum stays in −1..1).
BASE_COLOUR = (0.0, 0.0, 0.0)
FACE_COLOURS = ((-0.3, 0.25, 0.0), (0.3, 0.2, -0.25), (0.0, -0.3, 0.25),
                (0.25, 0.0, -0.3), (-0.2, -0.2, 0.3), (0.25, 0.3, 0.2))
METALLIC, ROUGHNESS, ALPHA = -0.9, 0.4, 1.0  # decoder outputs; the pipeline maps o → o/2 + 1/2
#: The shape decoder's split-weight output (before softplus) at every voxel: equal weights make
#: every quad split the same way; not 0, so the weight moves with the layer's output as a
#: trained decoder's does (the deep self-check perturbs it).
SPLIT_LOGIT = 1.0


def _sign_count(channels: int) -> tuple[float, float]:
    """(α, V) for counting voxels with ``x0 > 0`` through ``silu(LayerNorm([x0, 0, …]))``: a tap
    weighted 1 on channel 0 and α on channel 1 reads V where ``x0 > 0`` and 0 where ``x0 ≤ 0``
    (LayerNorm of ``±[1, 0, …]`` is ``±[√(C−1), −1/√(C−1), …]``; of zeros, zeros)."""
    if channels < 2:
        raise ValueError(f"the erosion needs at least 2 channels, got {channels}")
    u0, u1 = math.sqrt(channels - 1), -1.0 / math.sqrt(channels - 1)
    alpha = -F.silu(torch.tensor(-u0, dtype=torch.float64)) \
        / F.silu(torch.tensor(-u1, dtype=torch.float64))
    value = F.silu(torch.tensor(u0, dtype=torch.float64)) \
        + alpha * F.silu(torch.tensor(u1, dtype=torch.float64))
    return float(alpha), float(value)


def _taps(radius) -> list[tuple[int, int, int]]:
    """Kernel indices (0..2 per axis) within ``radius`` (0 or 1 per axis) of the centre."""
    return [t for t in itertools.product(range(3), repeat=3)
            if all(abs(t[a] - 1) <= radius[a] for a in range(3))]


def _set(param: torch.Tensor, value: torch.Tensor | float = 0.0) -> None:
    with torch.no_grad():
        param.copy_(torch.as_tensor(value, dtype=torch.float64).expand_as(param)
                    .to(param.dtype))


def _count_conv(conv, channels: int, taps, scale: float, shift: float, pair: bool) -> None:
    """``conv`` (dense ``nn.Conv3d`` [out, in, 3, 3, 3]) ← output 0 =
    ``scale·(count of taps with x0 > 0) + shift`` (see :func:`_sign_count`), output 1 its
    negation when ``pair``, every other output 0."""
    alpha, value = _sign_count(channels)
    weight = torch.zeros(conv.weight.shape, dtype=torch.float64)
    bias = torch.zeros(conv.weight.shape[0], dtype=torch.float64)
    for t in taps:
        weight[0, 0][t] = scale / value
        weight[0, 1][t] = scale * alpha / value
    bias[0] = shift
    if pair:
        weight[1], bias[1] = -weight[0], -bias[0]
    _set(conv.weight, weight)
    _set(conv.bias, bias)


def _erode(block, radius) -> None:
    """``block`` (``ResBlock3d``) ← erode ``x0 > 0`` by ``radius`` (per axis, 0..2)."""
    channels = block.channels
    inner = tuple(min(r, 1) for r in radius)
    outer = tuple(max(r - 1, 0) for r in radius)
    taps1, taps2 = _taps(inner), _taps(outer)
    for norm in (block.norm1, block.norm2):
        _set(norm.weight, 1.0)
        _set(norm.bias, 0.0)
    # conv1: a = count − (T1 − ½), as the pair (a, −a): norm2 turns it into ±√(C/2)
    _count_conv(block.conv1, channels, taps1, 1.0, -(len(taps1) - 0.5), pair=True)
    # conv2: 4·(Σ sign(a) − T2) into x0 (0 where every tap is inside, ≤ −4 elsewhere), each
    # sign read as (silu(p) − silu(−p)) / √(C/2)
    s = math.sqrt(channels / 2)
    weight = torch.zeros(block.conv2.weight.shape, dtype=torch.float64)
    for t in taps2:
        weight[0, 0][t] = ERODE_GAIN / s
        weight[0, 1][t] = -ERODE_GAIN / s
    bias = torch.zeros(block.conv2.weight.shape[0], dtype=torch.float64)
    bias[0] = -ERODE_GAIN * len(taps2)
    _set(block.conv2.weight, weight)
    _set(block.conv2.bias, bias)


def erosion_plan(decoder, box=BOX, grid: int = 32) -> tuple[list, list]:
    """The erosion radius of every ``ResBlock3d`` of a ``SparseStructureDecoder`` (coarsest first,
    at most 2, as few blocks as that allows) and of its ``out_layer`` (1) that turn its whole
    output grid into ``box`` (on the ``grid`` the pipeline keeps: the output max-pooled to it).
    Returns ([(block, radius), …], [out_layer radius]). Raises ValueError when the blocks cannot
    reach the box exactly."""
    out = 16 * 2 ** (len(decoder.channels) - 1)  # the released latent grid is 16
    if out % grid:
        raise ValueError(f"output grid {out} is not a multiple of {grid}")
    lo, hi = box[0] * out // grid, box[1] * out // grid
    if lo != out - hi:
        raise ValueError(f"box {box} is not centred on the {grid} grid")
    remaining = lo - 1  # the out_layer erodes one voxel
    blocks, scale = [], out // 16
    levels = [list(decoder.middle_block)]
    per_level = [[] for _ in decoder.channels]
    level = 0
    for block in decoder.blocks:
        if type(block).__name__ == "UpsampleBlock3d":
            level += 1
        else:
            per_level[level].append(block)
    levels[0] = levels[0] + per_level[0]
    levels += per_level[1:]
    for blocks_here in levels:
        for block in blocks_here:
            radius = min(2, remaining // scale)
            remaining -= radius * scale
            blocks.append((block, radius))
        scale //= 2
    if remaining:
        raise ValueError(f"the decoder's blocks cannot erode {lo} voxels exactly")
    return blocks, [1]


def sparse_structure(decoder, box=BOX) -> None:
    """Write the box-by-erosion weights into ``decoder`` (a ``SparseStructureDecoder``; see the
    module docstring). Raises ValueError for fewer than 2 channels anywhere."""
    _set(decoder.input_layer.weight, 0.0)
    bias = torch.zeros(decoder.input_layer.bias.shape, dtype=torch.float64)
    bias[0] = 1.0
    _set(decoder.input_layer.bias, bias)
    plan, (out_radius,) = erosion_plan(decoder, box)
    for block, radius in plan:
        if radius:
            _erode(block, (radius,) * 3)
    for block in decoder.blocks:
        if type(block).__name__ == "UpsampleBlock3d":
            weight = torch.zeros(block.conv.weight.shape, dtype=torch.float64)
            for child in range(8):  # output channel 8·0 + child: x0 of that child
                weight[child, 0, 1, 1, 1] = 1.0
            _set(block.conv.weight, weight)
            _set(block.conv.bias, 0.0)
    norm, _silu, conv = decoder.out_layer
    _set(norm.weight, 1.0)
    _set(norm.bias, 0.0)
    taps = _taps((out_radius,) * 3)
    _count_conv(conv, decoder.channels[-1], taps, 1.0, -(len(taps) - 0.5), pair=False)


def _pair_channels(channels: int) -> int:
    """q = channels / 8: pair ``p`` of a sparse decoder's stream sits at (p·q, p·q + 1)."""
    if channels % 8 or channels < 16:
        raise ValueError(f"the sparse decoders' weights need a multiple of 8 channels, at least "
                         f"16; got {channels}")
    return channels // 8


def _pair_scale(pairs: int, channels: int, eps: float) -> float:
    """σ of a LayerNorm over ``channels`` entries of which ``pairs`` pairs are ±½: the stream
    value v reads back as σ·(silu(y) − silu(−y)) after it (y = v / σ)."""
    return math.sqrt(pairs * 2 * 0.25 / channels + eps)


def _child_bits(child: int) -> tuple[int, int, int]:
    """(x, y, z) offset of child ``child`` in its parent (x the lowest bit, as
    ``SparseChannel2Spatial``)."""
    return child & 1, child >> 1 & 1, child >> 2 & 1


def _fill(param: torch.Tensor, entries: dict, bias=None, bias_param=None) -> None:
    """Zero ``param`` in place and set ``entries`` (index tuple → value); ``bias`` (a small
    tensor) into ``bias_param`` when given. In place: the released widths' weights are large."""
    with torch.no_grad():
        param.zero_()
        for index, value in entries.items():
            param[index] = value
    if bias_param is not None:
        _set(bias_param, bias)


def _c2s_conv1(block, first: bool) -> tuple[dict, torch.Tensor]:
    """conv1's entries and bias for ``block`` (see the module docstring): child s's block of
    channels holds (e′ᵢ, −e′ᵢ) at (2i, 2i+1) for its six face flags, and (v, −v) at (12, 13),
    v the value its skip brings. Weight index: (out, kd, kh, kw, in), offsets (x, y, z)."""
    cin, cout = block.channels, block.out_channels
    q = _pair_channels(cin)
    sigma = _pair_scale(8, cin, block.norm1.eps)
    entries = {}
    bias = torch.zeros(8 * cout, dtype=torch.float64)

    def put(row, tap, channel, value):  # the pair's second row gets the negation
        entries[(row, *tap, channel)] = value
        entries[(row + 1, *tap, channel)] = -value

    for child in range(8):
        bits = _child_bits(child)
        base = child * cout
        for face in range(6):
            axis, side = divmod(face, 2)
            mask = float(side == bits[axis])
            row = base + 2 * face
            if first:  # f′ = mask·(1 − presence(face neighbour)); presence = 2σ·(z₀ − z₁)
                tap = [1, 1, 1]
                tap[axis] += 1 if side else -1
                put(row, tap, 0, -2 * sigma * mask)
                put(row, tap, 1, 2 * sigma * mask)
                bias[row] = mask - 0.5
            else:  # f′ = mask·f, f = v + ½, v = σ·(z[face·q] − z[face·q + 1])
                put(row, (1, 1, 1), face * q, sigma * mask)
                put(row, (1, 1, 1), face * q + 1, -sigma * mask)
                bias[row] = 0.5 * mask - 0.5
            bias[row + 1] = -bias[row]
        row = base + 12  # the skip's value: pair `child` of the parent (constant ½ when fixed)
        if first or child >= 6:
            bias[row], bias[row + 1] = 0.5, -0.5
        else:
            put(row, (1, 1, 1), child * q, sigma)
            put(row, (1, 1, 1), child * q + 1, -sigma)
    return entries, bias


def _c2s_conv2(block) -> tuple[dict, torch.Tensor]:
    """conv2's entries and bias: the child's eight pairs (flags 0–5 from its block, 6–7 the
    constants ±½) minus what the skip adds (its value in channels [0, r), negated in [r, 2r))."""
    cin, cout = block.channels, block.out_channels
    q_in, q_out = _pair_channels(cin), _pair_channels(cout)
    r = cout // q_in
    sigma = _pair_scale(7, cout, block.norm2.eps)
    read = torch.zeros(cout, 7, dtype=torch.float64)  # out channel ← Σ read[m, j]·w_j
    bias = torch.zeros(cout, dtype=torch.float64)
    for pair in range(8):
        first, second = pair * q_out, pair * q_out + 1
        if pair < 6:
            read[first, pair] += 1.0
            read[second, pair] -= 1.0
        else:
            bias[first] += 0.5
            bias[second] -= 0.5
    read[:r, 6] -= 1.0
    read[r:2 * r, 6] += 1.0
    entries = {}
    for m, j in torch.nonzero(read).tolist():  # w_j = σ·(z[2j] − z[2j+1])
        entries[(m, 1, 1, 1, 2 * j)] = sigma * float(read[m, j])
        entries[(m, 1, 1, 1, 2 * j + 1)] = -sigma * float(read[m, j])
    return entries, bias


def _to_subdiv(block, first: bool) -> tuple[dict, torch.Tensor]:
    """The subdivision logits: every child at the first level; later the children touching an
    outside face, and child 0 of a voxel with none (f = stream[face·q] + ½)."""
    q = _pair_channels(block.channels)
    entries = {}
    bias = torch.full((8,), 1.0, dtype=torch.float64)
    if first:
        return entries, bias
    for child in range(1, 8):  # Σ over the touched faces of f − ½  ( > 0 iff one is outside)
        bits = _child_bits(child)
        for axis in range(3):
            entries[(child, (2 * axis + bits[axis]) * q)] = 1.0
    for face in range(6):  # 6·Σ f(− faces) + 1 − Σ f − ½
        entries[(0, face * q)] = 5.0 if face % 2 == 0 else -1.0
    bias[0] = 6.5
    return entries, bias


def _up_blocks(decoder):
    """The ``SparseResBlockC2S3d`` of each level, in order."""
    return [res[-1] for res in decoder.blocks[:-1]]


def _sparse_stream(decoder) -> None:
    """from_latent's constant pairs and every up block's conv1/conv2 (and to_subdiv)."""
    q = _pair_channels(decoder.from_latent.out_features)
    bias = torch.zeros(decoder.from_latent.out_features, dtype=torch.float64)
    bias[0::q], bias[1::q] = 0.5, -0.5
    _fill(decoder.from_latent.weight, {}, bias, decoder.from_latent.bias)
    for module in decoder.modules():  # initialize_weights made them Xavier: identity instead
        if type(module).__name__ == "SparseConvNeXtBlock3d":
            _fill(module.mlp[2].weight, {}, 0.0, module.mlp[2].bias)
    for level, block in enumerate(_up_blocks(decoder)):
        if type(block).__name__ != "SparseResBlockC2S3d":
            raise ValueError(f"level {level}'s up block is {type(block).__name__}; the weights "
                             "are for SparseResBlockC2S3d")
        _set(block.norm1.weight, 1.0)
        _set(block.norm1.bias, 0.0)
        for layer, (entries, bias) in ((block.conv1, _c2s_conv1(block, level == 0)),
                                       (block.conv2, _c2s_conv2(block))):
            _fill(layer.weight, entries, bias, layer.bias)
        if getattr(block, "pred_subdiv", False):
            entries, bias = _to_subdiv(block, level == 0)
            _fill(block.to_subdiv.weight, entries, bias, block.to_subdiv.bias)


def _final_flags(decoder) -> tuple[int, float]:
    """(q, σ) of the last level: face flag f = σ·layer_norm(h)[face·q] + ½."""
    channels = decoder.output_layer.in_features
    return _pair_channels(channels), _pair_scale(8, channels, 1e-5)


def shape(decoder) -> None:
    """Write the boundary-layer weights into ``decoder`` (a ``FlexiDualGridVaeDecoder``; see
    the module docstring). Raises ValueError for widths the layout does not fit."""
    _sparse_stream(decoder)
    q, sigma = _final_flags(decoder)
    entries = {}
    bias = torch.zeros(decoder.output_layer.out_features, dtype=torch.float64)
    for axis in range(3):  # intersected on an axis: f(−) + f(+) − ½
        entries[(3 + axis, 2 * axis * q)] = sigma
        entries[(3 + axis, (2 * axis + 1) * q)] = sigma
        bias[3 + axis] = 0.5
    bias[6] = SPLIT_LOGIT  # every voxel's split weight softplus(1): equal, so the same split
    _fill(decoder.output_layer.weight, entries, bias, decoder.output_layer.bias)


def texture(decoder) -> None:
    """Write the face-colour weights into ``decoder`` (a ``SparseUnetVaeDecoder`` with 6 outputs
    and guided subdivision; see the module docstring)."""
    _sparse_stream(decoder)
    q, sigma = _final_flags(decoder)
    entries = {}
    bias = torch.tensor([*BASE_COLOUR, METALLIC, ROUGHNESS, ALPHA], dtype=torch.float64)
    for face, colour in enumerate(FACE_COLOURS):
        for c in range(3):
            entries[(c, face * q)] = sigma * colour[c]
            bias[c] += 0.5 * colour[c]
    _fill(decoder.output_layer.weight, entries, bias, decoder.output_layer.bias)
