"""Write a stand-in "weights folder" for the stand-in port: every checkpoint the real
Pixal3D-mac reads, at a chosen fraction of the real sizes.

Usage (tests, and the loading benchmark)::

    from standin import make_weights             # the repository root on sys.path
    info = make_weights("/tmp/px", scale=1e-3)   # the five flows' 13.9 GB -> 13.9 MB
    env = {**os.environ, **info.env}              # HF_HOME and TORCH_HOME for the port
    # the port then resolves MODEL_PATH "TencentARC/Pixal3D" (and DINOv3, BiRefNet, MoGe-2,
    # NAF) from these caches, exactly as the real one does offline.

or from a shell: ``python standin/port/make_weights.py DIR --scale 1e-3``
(prints the shell lines that use them; ``--json`` for programs; see ``README.md``).

Layout written under ``root`` (``scale`` multiplies every size but the decoders'; weights are
float32 but the decoders' fp16 torsos):

Hugging Face repositories are laid out as the real cache is: ``models--ORG--NAME/refs/main``
naming a revision, files in ``snapshots/<revision>/`` (below, "the snapshot").

- ``hf/hub/models--TencentARC--Pixal3D``'s snapshot: ``pipeline.json`` and
  ``ckpts/<name>.json|.safetensors`` for the eight pipeline models (``{"name": class, "args":
  kwargs}`` + weights). The five flow models are the real DiTs at a small width
  (``flow_configs.sized_args``: at the tests' scales one block of 16 or 32 channels with its
  MLP widened, past one MLP of 8,192 hidden channels blocks of 128 added) at the scaled size, no
  ballast; the structure flow's RoPE phase buffer (complex64) is part of its checkpoint.
- ``hf/hub/models--camenduru--dinov3-vitl16-pretrain-lvd1689m/`` (DINOv3 backbone),
  ``models--ZhengPeng7--BiRefNet/`` (background remover): ``config.json`` +
  ``model.safetensors`` in each snapshot (the ``transformers`` layout);
  ``models--Ruicheng--moge-2-vitl/`` (camera estimator): ``model.pt``, MoGe's own format
  (``torch.save`` of ``{"model_config", "model"}``).
- ``torch/hub/checkpoints/naf_standin.json|.safetensors`` (NAF upsampler, read via torch.hub):
  ``NAF_CONFIG`` and the weights of ``NAF(**NAF_CONFIG)``, not scaled.

Sizes (``REAL_BYTES``): the five flows and the three decoders are computed from their released
configs (``flow_configs.REAL``, ``REAL_DECODERS``: the ``state_dict`` bytes of the class built at
those widths and depths, bf16 flow blocks and fp16 decoder torsos, the rest fp32; the tests
rebuild them on the meta device and compare). They agree with SPEC §1: the texture flow 2.81 GB
= 2.62 GiB ("2.6 GB"), the shape decoder 0.95 GB ("0.9 GB"), and the eight loads of a staged
1024_cascade run (seven models, the shape decoder twice) 14.14 GB = 13.17 GiB ("13.2 GB" read
in 24 s): SPEC's Mac figures are binary gigabytes. DINOv3 ViT-L fp32 is SPEC §1's 1.2 GB; the
sizes of BiRefNet, MoGe-2 and NAF are assumptions of this stand-in (marked below), not
measurements.

The decoders are the real architecture (``pixal3d/models``): their size comes from their widths
and depths, not from ``scale``. ``decoders="test"`` (the default) writes ``TEST_DECODERS``
(16 channels a level: a run decodes in about a second), ``decoders="real"`` the released widths
(``REAL_DECODERS``: 0.15 + 0.95 + 0.95 GB; for benches). Their weights are chosen, not trained
(``decoder_weights``): whatever the stand-in flows make, the sparse structure is the box
[15, 17)³ of the 32 grid, the shape decoder's finest voxels its one-voxel boundary layer at the
pipeline's resolution with a closed flexible-dual-grid surface through their centres, and the
texture decoder colours them by the side of the box they face — a small, bounded, checkable
result from the real forward with nothing added to it.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

GB = 10 ** 9
#: Real on-load size of each checkpoint in bytes (see the module docstring for the sources).
REAL_BYTES = {
    "sparse_structure_flow_model": 2_715_920_416,   # flow_configs.REAL (1,339,411,976 params)
    "sparse_structure_decoder": 147_585_412,        # REAL_DECODERS (73,671,201 parameters)
    "shape_slat_flow_model_512": 2_808_490_112,     # flow_configs.REAL (1,386,671,648 params)
    "shape_slat_flow_model_1024": 2_808_490_112,    # flow_configs.REAL
    "shape_slat_decoder": 948_598_492,              # REAL_DECODERS; SPEC §1: 0.9 GB
    "tex_slat_flow_model_512": 2_808_686_720,       # flow_configs.REAL (unused by 1024_cascade)
    "tex_slat_flow_model_1024": 2_808_686_720,      # flow_configs.REAL (1,386,720,800 params)
    "tex_slat_decoder": 948_567_448,                # REAL_DECODERS (474,216,006 parameters)
    "dinov3": int(1.2 * GB),                        # SPEC §1 (ViT-L fp32)
    "birefnet": int(0.9 * GB),                      # assumed
    "moge": int(1.3 * GB),                          # assumed
    "naf": int(0.01 * GB),                          # assumed
}

HIDDEN = 16  # DINOv3 stand-in embedding width: proj features are 16 (no NAF) or 32 (with NAF)
LATENT = 8
#: The stand-in NAF's constructor arguments (the real release: dim 256, 4 attention heads, 4
#: RoPE heads, 9x9 kernel, 2 encoder layers). Tests keep the real heads and kernel, a tiny width
#: and one encoder layer (the encoders run at up to 4x the output size: the dearest part here);
#: its size is what these weights hold (no ballast: the real NAF is small too).
NAF_CONFIG = {"dim": 16, "heads_attn": 4, "heads_rope": 4, "kernel_size": 9, "img_layers": 1}

def _unet(widths, blocks, latent: int, checkpoint: bool) -> dict:
    """The sparse U-Net decoders' shared arguments (five levels, ConvNeXt blocks, channel-to-
    space up blocks and an fp16 torso, as the released configs; blocks run through
    ``torch.utils.checkpoint`` when ``checkpoint``, as released — same values, but its first
    call imports ``torch._dynamo``, about a second a process)."""
    return dict(model_channels=list(widths), latent_channels=latent, num_blocks=list(blocks),
                block_type=["SparseConvNeXtBlock3d"] * 5,
                up_block_type=["SparseResBlockC2S3d"] * 4,
                block_args=[{"use_checkpoint": checkpoint} for _ in range(5)], use_fp16=True)


def _decoders(ss_latent: int, ss_channels, ss_blocks, ss_middle, widths, blocks,
              latent: int, checkpoint: bool = True) -> dict:
    return {
        "sparse_structure_decoder": ("SparseStructureDecoder", dict(
            out_channels=1, latent_channels=ss_latent, num_res_blocks=ss_blocks,
            channels=ss_channels,
            num_res_blocks_middle=ss_middle, use_fp16=True)),
        "shape_slat_decoder": ("FlexiDualGridVaeDecoder", dict(
            resolution=512, **_unet(widths, blocks, latent, checkpoint))),
        "tex_slat_decoder": ("SparseUnetVaeDecoder", dict(
            out_channels=6, pred_subdiv=False, **_unet(widths, blocks, latent, checkpoint))),
    }


#: The decoders as released: TRELLIS ``configs/vae/ss_vae_conv3d_16l8_fp16.json`` (decoder;
#: Pixal3D reads TRELLIS-image-large's ``ss_dec_conv3d_16l8_fp16``) and TRELLIS.2
#: ``configs/scvae/{shape,tex}_vae_next_dc_f16c32_fp16_ft_512.json`` (decoder): a 16³×8 latent
#: to a 64³ occupancy; 32-channel sparse latents through 1024-512-256-128-64 channels and
#: 4-16-8-4-0 ConvNeXt blocks, 16× finer.
REAL_DECODERS = _decoders(8, [512, 128, 32], 2, 2, [1024, 512, 256, 128, 64], [4, 16, 8, 4, 0],
                          32)
#: The decoders at test widths: two sparse-structure levels (16³ → 32³, which the pipeline keeps
#: without pooling) with its four erosion blocks in the middle, 16 channels a sparse level (the
#: fewest the chosen weights' layout fits), one ConvNeXt block on each of the two coarsest, no
#: checkpointing.
TEST_DECODERS = _decoders(LATENT, [4, 2], 0, 4, [16] * 5, [1, 1, 0, 0, 0], LATENT,
                          checkpoint=False)
DECODER_WEIGHTS = {"sparse_structure_decoder": "sparse_structure",
                   "shape_slat_decoder": "shape", "tex_slat_decoder": "texture"}
PIPELINE_MODELS = ("sparse_structure_flow_model", "sparse_structure_decoder",
                   "shape_slat_flow_model_512", "shape_slat_flow_model_1024",
                   "shape_slat_decoder", "tex_slat_flow_model_512", "tex_slat_flow_model_1024",
                   "tex_slat_decoder")


@dataclass
class WeightsInfo:
    """What :func:`make_weights` wrote. ``env``: variables the port needs (HF_HOME, TORCH_HOME);
    ``model_path``: the value for the port's ``--model-path`` (its default, a Hugging Face id);
    ``model_dir``: the same folder as a local path; ``bytes``: name -> bytes on load."""
    root: Path
    model_path: str
    model_dir: Path
    env: dict
    bytes: dict = field(default_factory=dict)


def _snapshot(hub: Path, repo_id: str) -> Path:
    """Make ``models--ORG--NAME/refs/main`` and its snapshot folder in ``hub``; returns the
    latter."""
    import standin_hf
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(standin_hf.REVISION)
    folder = repo / "snapshots" / standin_hf.REVISION
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _state_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def _build_hub(cls, config: dict, ballast_numel: int):
    import standin_hf

    return cls(standin_hf.Config(**config, ballast_numel=ballast_numel))


def _write_flow(ckpts: Path, name: str, scale: float, seed: int) -> int:
    """A flow model's checkpoint (``flow_configs.sized_args``: the real DiT at a small width,
    grown to ``REAL_BYTES[name] * scale`` bytes); its bytes."""
    import flow_configs
    return flow_configs.write_flow(ckpts, name, int(REAL_BYTES[name] * scale), latent=LATENT,
                                   hidden=HIDDEN, seed=seed)


def _sized(build, target: int):
    """Build once with a 1-value ballast, then again with the ballast that reaches ``target``."""
    small = build(1)
    fixed = _state_bytes(small.state_dict()) - 4
    return build(max(1, (target - fixed) // 4))


def build_naf(config: dict):
    """A randomly initialised stand-in NAF built from ``config`` (``NAF(**config)``), on the CPU
    and the default generator; the bench builds it at real sizes (``dim=256``).

    Its modules are imported as torch.hub does (the hub folder first on ``sys.path``, so
    ``from src.model.naf import NAF`` resolves there) and then dropped from ``sys.modules``:
    NAF's attention binds ``natten.na2d`` when first imported, and the port's
    ``load_runtime_deps`` must be able to rebind it before the hub load that follows."""
    import importlib.util
    folder = str(HERE / "naf_hub")
    before = set(sys.modules)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location("_standin_naf_hubconf",
                                                      HERE / "naf_hub" / "hubconf.py")
        hubconf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hubconf)
        return hubconf.NAF(**config).eval().requires_grad_(False)
    finally:
        sys.path.remove(folder)
        for name in set(sys.modules) - before:
            if name == "src" or name.startswith("src."):
                del sys.modules[name]


def decoder_configs(decoders: str = "test") -> dict:
    """The decoders' ``{name: (class, constructor args)}`` at ``decoders`` widths: ``"test"``
    (``TEST_DECODERS``) or ``"real"`` (``REAL_DECODERS`` with the sparse latents as wide as the
    stand-in flows make them, ``LATENT``, where the released ones take 32: their
    ``from_latent`` is the only layer that differs). Raises ValueError for another value."""
    if decoders == "test":
        return TEST_DECODERS
    if decoders != "real":
        raise ValueError(f"decoders must be 'test' or 'real', got {decoders!r}")
    out = dict(REAL_DECODERS)
    for name in ("shape_slat_decoder", "tex_slat_decoder"):
        cls_name, args = out[name]
        out[name] = (cls_name, {**args, "latent_channels": LATENT})
    return out


def _write_decoder(folder: Path, name: str, cls_name: str, args: dict) -> int:
    """Build decoder ``name``, write its chosen weights (``decoder_weights``) and save
    ``{name}.json`` + ``{name}.safetensors`` in ``folder``; returns its bytes."""
    import decoder_weights
    import pixal3d.models as models

    model = getattr(models, cls_name)(**args)
    getattr(decoder_weights, DECODER_WEIGHTS[name])(model)
    state = model.state_dict()
    with open(folder / f"{name}.json", "w") as f:
        json.dump({"name": cls_name, "args": args}, f)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / f"{name}.safetensors"))
    return _state_bytes(state)


def make_weights(root, scale: float = 1e-4, seed: int = 0,
                 decoders: str = "test") -> WeightsInfo:
    """Write every stand-in checkpoint under ``root`` at ``scale`` x the real sizes, the
    decoders at ``decoders`` widths (see :func:`decoder_configs`; their size does not follow
    ``scale``).

    root: folder (created; existing files of the same names are replaced). scale: fraction of
    ``REAL_BYTES`` for every other model (1e-4 -> about 1.4 MB for the five flows;
    1e-2 -> about 140 MB). The random generator state of the caller is left untouched
    (``torch.random.fork_rng``). Raises ValueError for a scale outside (0, 1] or another
    ``decoders``.
    """
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    chosen = decoder_configs(decoders)
    root = Path(root)
    hub = root / "hf" / "hub"
    model_dir = _snapshot(hub, "TencentARC/Pixal3D")
    (model_dir / "ckpts").mkdir(parents=True, exist_ok=True)
    sizes = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        import flow_configs
        for name in flow_configs.NAMES:
            sizes[name] = _write_flow(model_dir / "ckpts", name, scale, seed)
        for name, (cls_name, args) in chosen.items():
            sizes[name] = _write_decoder(model_dir / "ckpts", name, cls_name, args)
        pipeline = {"name": "Pixal3DImageTo3DPipeline", "args": {
            "models": {name: f"ckpts/{name}" for name in PIPELINE_MODELS},
            "sparse_structure_sampler": {"name": "FlowEulerGuidanceIntervalSampler",
                                         "args": {"sigma_min": 1e-5},
                                         "params": {"steps": 3, "guidance_strength": 3.0,
                                                    "guidance_interval": [0.4, 1.0],
                                                    "rescale_t": 1.0}},
            "shape_slat_sampler": {"name": "FlowEulerGuidanceIntervalSampler",
                                   "args": {"sigma_min": 1e-5},
                                   "params": {"steps": 3, "guidance_strength": 3.0,
                                              "guidance_interval": [0.4, 1.0], "rescale_t": 3.0}},
            "tex_slat_sampler": {"name": "FlowEulerGuidanceIntervalSampler",
                                 "args": {"sigma_min": 1e-5},
                                 "params": {"steps": 3, "guidance_strength": 1.0,
                                            "guidance_interval": [0.0, 1.0], "rescale_t": 3.0}},
            "shape_slat_normalization": {"mean": [0.1 * i for i in range(LATENT)],
                                         "std": [1.0 + 0.1 * i for i in range(LATENT)]},
            "tex_slat_normalization": {"mean": [0.05 * i for i in range(LATENT)],
                                       "std": [1.0] * LATENT},
            "rembg_model": {"name": "BiRefNet", "args": {"model_name": "ZhengPeng7/BiRefNet"}},
            "low_vram": True,
            "default_pipeline_type": "1024_cascade",
        }}
        with open(model_dir / "pipeline.json", "w") as f:
            json.dump(pipeline, f, indent=1)

        import standin_hf
        from moge.model.v2 import MoGeModel
        hub_models = {
            "camenduru/dinov3-vitl16-pretrain-lvd1689m": ("dinov3", standin_hf.DINOv3ViTModel, dict(
                patch_size=16, hidden_size=HIDDEN, num_register_tokens=4, num_layers=2)),
            "ZhengPeng7/BiRefNet": ("birefnet", standin_hf.AutoModelForImageSegmentation,
                                    dict(hidden_size=4)),
        }
        for repo_id, (key, cls, config) in hub_models.items():
            folder = _snapshot(hub, repo_id)
            model = _sized(partial(_build_hub, cls, config),
                           int(REAL_BYTES[key] * scale))
            state = model.state_dict()
            with open(folder / "config.json", "w") as f:
                json.dump({**config, "ballast_numel": state["ballast"].numel()}, f)
            save_file({k: v.contiguous() for k, v in state.items()},
                      str(folder / "model.safetensors"))
            sizes[key] = _state_bytes(state)
        # MoGe-2 keeps its own format: one torch.save'd model.pt of {model_config, model}
        config = dict(hidden_size=8)
        moge = _sized(lambda n: MoGeModel(**config, ballast_numel=n),
                      int(REAL_BYTES["moge"] * scale))
        state = moge.state_dict()
        torch.save({"model_config": {**config, "ballast_numel": state["ballast"].numel()},
                    "model": state}, _snapshot(hub, "Ruicheng/moge-2-vitl") / "model.pt")
        sizes["moge"] = _state_bytes(state)

        checkpoints = root / "torch" / "hub" / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        naf = build_naf(NAF_CONFIG)
        state = naf.state_dict()
        with open(checkpoints / "naf_standin.json", "w") as f:
            json.dump(NAF_CONFIG, f)
        save_file({k: v.contiguous() for k, v in state.items()},
                  str(checkpoints / "naf_standin.safetensors"))
        sizes["naf"] = _state_bytes(state)
    env = {"HF_HOME": str(root / "hf"), "TORCH_HOME": str(root / "torch")}
    return WeightsInfo(root=root, model_path="TencentARC/Pixal3D", model_dir=model_dir, env=env,
                       bytes=sizes)


def shell_recipe(info: WeightsInfo) -> str:
    """What to type in a POSIX shell to run the stand-in port on ``info``'s weights: the
    variables to export (paths as they are, quoted for the shell, never escaped as JSON), the
    deep self-check and a runner command using them."""
    import shlex
    port = shlex.quote(str(Path(__file__).resolve().parent))
    total = sum(info.bytes.values())
    return "\n".join([
        f"# stand-in Pixal3D weights in {info.root} ({total / 1e6:.1f} MB); in a POSIX shell:",
        *(f"export {name}={shlex.quote(str(value))}" for name, value in info.env.items()),
        "# each lean part against the port's own path on these weights, then a run:",
        f"python -m runner check --backend pixal3d --deep --pixal3d-dir {port}",
        f"python -m runner IMAGE.png --backend pixal3d --pixal3d-dir {port}",
    ]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the stand-in Pixal3D weights folder "
                                     "and print the shell lines that use it.")
    parser.add_argument("root")
    parser.add_argument("--scale", type=float, default=1e-4)
    parser.add_argument("--decoders", choices=["test", "real"], default="test",
                        help="the decoders' widths: test (default) or the released ones")
    parser.add_argument("--json", action="store_true",
                        help="print env, model_path, model_dir and bytes as JSON instead "
                             "(paths as they are, not escaped)")
    ns = parser.parse_args(argv)
    info = make_weights(ns.root, ns.scale, decoders=ns.decoders)
    if ns.json:
        print(json.dumps({"env": info.env, "model_path": info.model_path,
                          "model_dir": str(info.model_dir), "bytes": info.bytes}, indent=1,
                         ensure_ascii=False))
    else:
        sys.stdout.write(shell_recipe(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
