"""The flow models' configurations, as data: the real release's constructor arguments and the
stand-in's small ones, and the builder of a checkpoint's weights (tests and benchmarks only).

Real (``REAL``): Pixal3D's generation configs (``yuyangYan-17/Pixal3D-exp`` at cdbb2bbf,
``configs/gen/*_proj_finetune*.json``, ``models.denoiser.args``): every flow model is a
1536-wide DiT of 30 blocks, 12 heads (128 channels each), MLP ratio 5.3334 (8,192 hidden), RoPE,
one shared AdaLN modulation, QK RMS norm in self- and cross-attention, ``image_attn_mode
"proj"``, ``cond_channels`` 1024 (DINOv3 ViT-L's CLS + 4 register tokens);
``sparse_structure_flow_model`` = ``ss_flow_img_dit_1_3B_32_bf16_proj_finetune_ft64``
(``SparseStructureFlowModel``, a 16³ grid of 8 channels, projected features 1024 wide: DINOv3
alone); the shape flows = ``slat_flow_img2shape_dit_1_3B_256_bf16_proj_finetune_ft512`` /
``..._512_bf16_proj_finetune_ft1024`` (``ElasticSLatFlowModel``, 32 → 32 channels at grids 32 /
64, projected features 2048 wide: DINOv3 + its NAF upsampling); the texture flows =
``slat_flow_imgshape2tex_dit_1_3B_512_bf16_proj_finetune`` / ``..._ft1024`` (64 = noise 32 +
shape latent 32 in, 32 out). ``dtype`` ``bfloat16``: the models cast their blocks to the
checkpoint config's bf16 (Pixal3D-mac INVESTIGATION_FACTS.md Bug B: "``self.dtype`` resolves to
bf16 (from checkpoint suffix)"); the training configs leave the argument at its default.
:func:`parameter_count` gives 1,339,411,976 parameters for the structure flow, 1,386,671,648
for each shape flow and 1,386,720,800 for each texture flow (the "1_3B" of the configs' names);
with the blocks in bf16 and the rest in fp32 their state dicts hold 2.72 GB and 2.81 GB
(2.53 / 2.62 GiB: SPEC §1's 2.6 for the texture flow).

Small (:func:`small_args`): the same classes and switches at a width the tests run in seconds —
one block, ``float32``; the shape and texture flows 32 channels, two heads of 16 where tokens are
few (the 512 shape pass: ~1.3 k tokens at the tests' sizes), one head of 32 for the 1024 passes
(~10 k tokens: the port's ``naive`` attention costs ~0.6 s per head and call there on this CPU);
the structure flow 16 channels in one head: its dense 16³ grid is 4,096 tokens at every step of
every run, so its attention is the stand-in run's dearest flow step (one head of 16 takes half
the CPU of two of 16 over 32 channels: 0.027 against 0.054 s a call, single-threaded).
``latent``/``hidden`` are the stand-in's latent and DINOv3 widths.

Weights (:func:`build_flow`): the real initialisation (``initialization="scaled"``), then the
two layers it zeroes made non-zero at chosen scales — the shared modulation's last Linear
(N(0, 0.02²)) and ``out_layer`` (std ``OUT_STD / √C``: a velocity of about ``OUT_STD`` = 1 per
channel, the scale of a trained rectified flow's velocity ε − x₀) — so that the time step and
the image reach the output (a zero ``out_layer`` would make every sampler pass return its
noise) while the sampled latents stay within a few times the noise's scale (measured at the
tests' sizes: 1.2 k / 9.4 k tokens at the 512 / 1024 shape passes against 1.3 k / 10.5 k with
the earlier guessed models). The forward is the real one; only the weights are chosen.

How ``make_weights.py`` uses it: ``write_flow(ckpts, name, target_bytes, latent, hidden,
seed)`` writes ``ckpts/<name>.json`` (``{"name": class, "args": ...}``) and
``.safetensors`` (the whole ``state_dict``, the RoPE phase buffer included) and returns the
bytes written; ``target_bytes`` None: the small width; a number: :func:`sized_args` (the small
model with its MLP widened up to the real 8,192 hidden channels, past that blocks of 128
channels added, until the checkpoint holds ``target_bytes``; below the small model's own size,
the small model).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import torch

NAMES = ("sparse_structure_flow_model", "shape_slat_flow_model_512", "shape_slat_flow_model_1024",
         "tex_slat_flow_model_512", "tex_slat_flow_model_1024")

_DIT = dict(model_channels=1536, cond_channels=1024, num_blocks=30, num_heads=12,
            mlp_ratio=5.3334, pe_mode="rope", share_mod=True, initialization="scaled",
            qk_rms_norm=True, qk_rms_norm_cross=True, image_attn_mode="proj", dtype="bfloat16")

#: name -> (class name, constructor arguments) of the real release (see the module docstring).
REAL = {
    "sparse_structure_flow_model": ("SparseStructureFlowModel", dict(
        _DIT, resolution=16, in_channels=8, out_channels=8)),
    "shape_slat_flow_model_512": ("ElasticSLatFlowModel", dict(
        _DIT, resolution=32, in_channels=32, out_channels=32, proj_in_channels=2048)),
    "shape_slat_flow_model_1024": ("ElasticSLatFlowModel", dict(
        _DIT, resolution=64, in_channels=32, out_channels=32, proj_in_channels=2048)),
    "tex_slat_flow_model_512": ("ElasticSLatFlowModel", dict(
        _DIT, resolution=32, in_channels=64, out_channels=32, proj_in_channels=2048)),
    "tex_slat_flow_model_1024": ("ElasticSLatFlowModel", dict(
        _DIT, resolution=64, in_channels=64, out_channels=32, proj_in_channels=2048)),
}

#: velocity scale of the written weights' ``out_layer`` (per output channel, unit-norm tokens):
#: a trained rectified flow predicts ε − x₀, of about unit deviation per channel or more
OUT_STD = 1.0
#: std of the written weights' shared-modulation Linear
MODULATION_STD = 0.02
#: widest MLP (hidden channels) :func:`sized_args` gives one block: the real models' 8,192
#: (``mlp_ratio`` 5.3334 × 1536)
MAX_HIDDEN = 8192
#: channels (in one head: the real models' head width) of a flow sized past one small block
SIZED_CHANNELS = 128


def small_args(name: str, latent: int = 8, hidden: int = 16) -> dict:
    """The small constructor arguments of ``name`` (the real class and switches, see the module
    docstring); ``latent``: the stand-in's latent channels, ``hidden``: its DINOv3 width.
    Raises KeyError for a name not in :data:`NAMES`."""
    cls, real = REAL[name]
    if cls == "SparseStructureFlowModel":
        channels, heads = 16, 1
    else:
        channels = 32
        heads = 1 if name.endswith("_1024") or name == "tex_slat_flow_model_512" else 2
    args = dict(real, model_channels=channels, cond_channels=hidden, num_blocks=1,
                num_heads=heads, dtype="float32")
    if cls == "SparseStructureFlowModel":
        args.update(in_channels=latent, out_channels=latent)
    else:
        args.update(in_channels=latent * (2 if name.startswith("tex_") else 1),
                    out_channels=latent, proj_in_channels=2 * hidden)
    return args


def model_class(name: str) -> str:
    """The class name the checkpoint of ``name`` records."""
    return REAL[name][0]


def _models():
    import pixal3d.models as models
    return models


def state_bytes(cls_name: str, args: dict) -> int:
    """Bytes of the ``state_dict`` of ``cls_name(**args)`` (built on ``meta``: nothing is
    allocated, so real widths cost nothing)."""
    with torch.device("meta"):
        model = getattr(_models(), cls_name)(**args)
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def parameter_count(cls_name: str, args: dict) -> int:
    """Parameters of ``cls_name(**args)`` (built on ``meta``)."""
    with torch.device("meta"):
        model = getattr(_models(), cls_name)(**args)
    return sum(p.numel() for p in model.parameters())


def sized_args(name: str, target_bytes: int, latent: int = 8, hidden: int = 16,
               max_hidden: int = MAX_HIDDEN) -> dict:
    """Constructor arguments whose checkpoint holds ``target_bytes`` (to one MLP unit of every
    block: ``(2C + 1) × 4 × blocks`` bytes), grown from :func:`small_args`:

    - while one block's MLP of at most ``max_hidden`` channels reaches the target: the small
      model with its MLP (``mlp_ratio``) widened (the tests' sizes: unchanged by the rest);
    - above: :data:`SIZED_CHANNELS` channels in one head (the real head width), the MLP up to
      ``max_hidden`` and blocks (``num_blocks``) added, the fewest that reach the target.

    Why: a forward costs ~2 × parameters × tokens FLOP however the bytes are laid out; the
    layout decides (a) the hidden rows one MLP call holds, ``tokens × H × 4`` bytes (one MLP
    of 160 k hidden at 1/8 scale asked for 42 GB at the structure stage's 4,096 tokens), (b)
    the self-attention's cost, ``4 · N² · C`` per block (the sum of the blocks' channels is
    ~parameters / 2H, so H at the real 8,192 keeps attention against MLP at the real models'
    ratio ``N / H``), and (c) how well the CPU's matrix products run: 16 or 32 input channels
    leave them bound by memory (a 1/64-scale texture flow at 10 k tokens: 66 s a forward at 32
    channels, 23 s at 128, this machine under load). A target below the smallest model gives
    that model. Raises ValueError for a non-positive target or ``max_hidden`` below 128."""
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    if max_hidden < SIZED_CHANNELS:
        raise ValueError(f"max_hidden must be at least {SIZED_CHANNELS}, got {max_hidden}")
    cls, args = model_class(name), small_args(name, latent, hidden)
    if _size(cls, args, 1, max_hidden) < target_bytes:
        args = dict(args, model_channels=SIZED_CHANNELS, num_heads=1)
    channels = args["model_channels"]
    unit = (2 * channels + 1) * 4  # bytes of one hidden channel of one block's MLP
    one, two = (_size(cls, args, n, max_hidden) for n in (1, 2))
    blocks = max(1, math.ceil((target_bytes - (2 * one - two)) / (two - one)))
    base = _size(cls, args, blocks, channels)
    units = max(channels, channels + round((target_bytes - base) / (unit * blocks)))
    return dict(args, num_blocks=blocks, mlp_ratio=_ratio(min(units, max_hidden), channels))


def _ratio(units: int, channels: int) -> float:
    """``mlp_ratio`` for ``units`` hidden channels: ``int(C * ratio)`` must give exactly
    ``units``, +0.5 keeps it off the integer edge."""
    return (units + 0.5) / channels


def _size(cls: str, args: dict, blocks: int, units: int) -> int:
    """State bytes of ``args`` with ``blocks`` blocks of ``units`` hidden MLP channels."""
    return state_bytes(cls, dict(args, num_blocks=blocks,
                                 mlp_ratio=_ratio(units, args["model_channels"])))


def standin_weights(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Make the layers the real initialisation zeroes non-zero, at the scales of the module
    docstring (in place; draws from ``generator``)."""
    channels = model.model_channels
    with torch.no_grad():
        out = model.out_layer.weight
        out.copy_(torch.randn(out.shape, generator=generator) * (OUT_STD / math.sqrt(channels)))
        layers = ([model.adaLN_modulation[-1]] if model.share_mod
                  else [block.adaLN_modulation[-1] for block in model.blocks])
        for layer in layers:
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator)
                               .to(layer.weight.dtype) * MODULATION_STD)


def build_flow(name: str, args: Optional[dict] = None, seed: int = 0) -> torch.nn.Module:
    """The model ``name`` with ``args`` (default :func:`small_args`) and the stand-in's weights,
    on the CPU, in eval mode. The caller's random generator state is left untouched."""
    args = small_args(name) if args is None else args
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(_models(), model_class(name))(**args)
    standin_weights(model, torch.Generator().manual_seed(seed + 1))
    return model.eval()


def write_flow(ckpts, name: str, target_bytes: Optional[int] = None, latent: int = 8,
               hidden: int = 16, seed: int = 0) -> int:
    """Write ``ckpts/<name>.json`` and ``ckpts/<name>.safetensors`` for the flow ``name``
    (``target_bytes`` None: :func:`small_args`; else :func:`sized_args`); returns the bytes of
    the state dict written."""
    from safetensors.torch import save_file

    args = (small_args(name, latent, hidden) if target_bytes is None
            else sized_args(name, target_bytes, latent, hidden))
    state = build_flow(name, args, seed).state_dict()
    ckpts = Path(ckpts)
    with open(ckpts / f"{name}.json", "w") as f:
        json.dump({"name": model_class(name), "args": args}, f)
    save_file({k: v.contiguous() for k, v in state.items()}, str(ckpts / f"{name}.safetensors"))
    return sum(t.numel() * t.element_size() for t in state.values())
