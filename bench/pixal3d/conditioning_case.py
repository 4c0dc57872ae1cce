"""One conditioning pass at real shapes, measured in its own process (run by
``bench.pixal3d.conditioning_memory`` through ``bench.own_peak``, which writes the process's
``VmHWM`` when it ends).

``python -m bench.pixal3d.conditioning_case --pass tex_1024 --size 1024 --path lean
--weights DIR --out FEATS.f32 --info INFO.json [--naf-dim N --channels C --image-size PX]``

What runs: the stand-in port's ``get_proj_cond_shape`` (its ``DinoV3ProjFeatureExtractor``,
``ProjGrid`` over the whole grid, NAF through ``natten.na2d`` bound to the port's
``_torch_na2d``) — ``--path port`` — or the same call with ``stageload.pixal3d.lean.conditioning``
installed
— ``--path lean`` —, or with it installed while the sampled pass declines — ``--path banded``:
the port's ``PIXAL3D_PROJ_GRID_DEVICE=cpu`` set for the pass, one of the sampled pass's
preconditions (nothing moves NAF's output between devices) forced off while the banded one
holds, so lean computes NAF's whole output in bands and projects the active voxels only — on
the same inputs: the pass's image (``image_size``), DINOv3-L's output
tokens (1 + 4 registers + the 16-pixel patches, 1024 channels; seeded random values standing
for the backbone, whose own memory is not part of this measurement), NAF at its release sizes
(dim 256, 4 attention and 4 RoPE heads, 9x9, 2 encoder layers; seeded random weights: memory
and time do not depend on the values) with output ``--size``, and ``--voxels`` active voxels
spread as a character's shell on the pass's grid. Before the call the kernel peak is reset to
the current size (``stageload.meter.reset_high_water_mark``) and that size recorded: the peak
over it is the pass's working memory over its inputs. Features go to ``--out`` (raw float32,
``[N, C]``) for the agreement check; ``--info`` gets sizes, baseline and seconds.
``--naf-dim``, ``--channels`` and ``--image-size`` shrink NAF's width, DINOv3's channels and the
pass's image for a test at reduced size (defaults: the release sizes, the pass's image).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

#: The pass's extractor config (``IMAGE_COND_CONFIGS`` key) and grid resolution.
PASSES = {"tex_1024": ("tex_1024", 64), "shape_512": ("shape_512", 32),
          "shape_1024": ("shape_1024", 64)}
NAF_RELEASE = {"dim": 256, "heads_attn": 4, "heads_rope": 4, "kernel_size": 9, "img_layers": 2}
DINO_CHANNELS = 1024
REGISTERS = 4


def character_shell(resolution: int, count: int, seed: int = 0) -> np.ndarray:
    """``[count, 3]`` voxel coordinates on the surface of a character-like body (ellipsoids for
    head, torso, arms and legs) in a ``resolution``^3 grid: the surface voxels (inside, with a
    face neighbour outside), thickened layer by layer until there are enough, then ``count`` of
    them chosen at random (seeded). Raises ValueError when the grid cannot hold ``count``."""
    axis = ((np.arange(resolution) + 0.5) / resolution - 0.5) * 0.75  # body fills the grid
    x, y, z = np.meshgrid(axis, axis, axis, indexing="ij")
    parts = [((0, 0.36, 0), (0.12, 0.12, 0.12)), ((0, 0.04, 0), (0.24, 0.26, 0.15)),
             ((-0.34, 0.12, 0), (0.15, 0.07, 0.07)), ((0.34, 0.12, 0), (0.15, 0.07, 0.07)),
             ((-0.1, -0.32, 0), (0.09, 0.17, 0.1)), ((0.1, -0.32, 0), (0.09, 0.17, 0.1))]
    inside = np.zeros(x.shape, bool)
    for (cx, cy, cz), (rx, ry, rz) in parts:
        inside |= ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 + ((z - cz) / rz) ** 2 <= 1
    shell = np.zeros_like(inside)
    core = inside.copy()
    while shell.sum() < count and core.any():
        eroded = core.copy()
        for axis_ in range(3):
            for step in (1, -1):
                eroded &= np.roll(core, step, axis=axis_)
        shell |= core & ~eroded
        core = eroded
    found = np.argwhere(shell)
    if len(found) < count:
        raise ValueError(f"a {resolution}^3 grid holds only {len(found)} body voxels")
    pick = np.random.default_rng(seed).choice(len(found), count, replace=False)
    return found[np.sort(pick)]


def _inputs(port, pass_name, size, voxels, seed, naf_dim=None, channels=None, image_size=None):
    import torch
    from PIL import Image

    from standin import weights_module

    key, resolution = PASSES[pass_name]
    config = {**port.gm.IMAGE_COND_CONFIGS[key], "naf_target_size": size}
    if image_size:
        config["image_size"] = image_size
    extractor = port.gm.build_image_cond_model(config, torch.device("cpu"))
    g = torch.Generator().manual_seed(seed)
    patches = extractor.patch_number
    width = channels or DINO_CHANNELS
    extractor.embed_dim = width
    tokens = torch.randn(1, 1 + REGISTERS + patches * patches, width, generator=g)
    extractor.extract_features = lambda image: tokens  # the backbone's output, given
    torch.manual_seed(seed)
    naf = {**NAF_RELEASE, "dim": naf_dim} if naf_dim else NAF_RELEASE
    extractor.naf_model = weights_module().build_naf(naf)
    rng = np.random.default_rng(seed)
    side = config["image_size"]
    ramp = np.linspace(0, 255, side, dtype=np.float32)
    rgb = np.stack([ramp[None, :].repeat(side, 0), ramp[:, None].repeat(side, 1),
                    rng.uniform(0, 255, (side, side)).astype(np.float32)], axis=-1)
    image = Image.fromarray(rgb.astype(np.uint8))
    xyz = torch.from_numpy(character_shell(resolution, voxels, seed))
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.long), xyz], dim=1).int()
    pipeline = port.pipeline_cls(models={}, low_vram=False)
    return extractor, image, coords, pipeline, resolution


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pass", dest="pass_name", choices=sorted(PASSES), required=True)
    parser.add_argument("--size", type=int, required=True, help="NAF output size (pixels)")
    parser.add_argument("--path", choices=("port", "lean", "banded", "encoder"), required=True,
                        help="banded: lean while the sampled pass declines (the port's "
                             "PIXAL3D_PROJ_GRID_DEVICE set); encoder: NAF's image encoder "
                             "alone (both paths run it)")
    parser.add_argument("--naf-dim", type=int, default=None, help="NAF's width (default 256)")
    parser.add_argument("--channels", type=int, default=None,
                        help="DINOv3's channels (default 1024)")
    parser.add_argument("--image-size", type=int, default=None,
                        help="the pass's image side (default the pass's own)")
    parser.add_argument("--voxels", type=int, required=True)
    parser.add_argument("--weights", required=True, help="stand-in weights folder")
    parser.add_argument("--out", required=True)
    parser.add_argument("--info", required=True)
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    with open(os.path.join(ns.weights, "env.json")) as f:
        os.environ.update(json.load(f))
    import gc

    import torch

    from stageload.meter import footprint, reset_high_water_mark
    from stageload.pixal3d.lean import conditioning as lean
    from stageload.pixal3d.port.open import open_port
    from standin import PORT_DIR

    port = open_port(PORT_DIR)
    extractor, image, coords, pipeline, resolution = _inputs(
        port, ns.pass_name, ns.size, ns.voxels, ns.seed, ns.naf_dim, ns.channels,
        ns.image_size)
    events = []
    if ns.path in ("lean", "banded"):
        lean.install(pipeline, events.append)
    if ns.path == "banded":  # the port's switch: it moves NAF's output, so lean makes it whole
        os.environ["PIXAL3D_PROJ_GRID_DEVICE"] = "cpu"
    gc.collect()
    reset = reset_high_water_mark(os.getpid())
    baseline = footprint(os.getpid(), tree=False)
    start = time.perf_counter()
    with torch.no_grad():
        if ns.path == "encoder":  # NAF's image encoder alone, on the image NAF is given
            pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255)
            queries = extractor.naf_model.image_encoder(pixels.permute(2, 0, 1)[None],
                                                        output_size=(ns.size, ns.size))
            feats = queries.new_empty(0, queries.shape[1])
        else:
            out = pipeline.get_proj_cond_shape(extractor, [image], coords, camera_angle_x=0.7,
                                               distance=2.0, mesh_scale=1.0,
                                               grid_resolution_override=resolution)
            feats = out["cond"]["proj"].feats
    seconds = time.perf_counter() - start
    feats.numpy().tofile(ns.out)
    with open(ns.info, "w") as f:
        json.dump({"pass": ns.pass_name, "size": ns.size, "path": ns.path,
                   "voxels": int(coords.shape[0]), "grid": resolution,
                   "features": list(feats.shape), "baseline_bytes": baseline,
                   "peak_reset": reset, "seconds": round(seconds, 2),
                   "warnings": [e["message"] for e in events if e["event"] == "warning"],
                   "fallbacks": [e.get("fallback") for e in events if e["event"] == "warning"],
                   "naf_map_bytes": 4 * int(extractor.embed_dim) * ns.size * ns.size,
                   "working_memory": [e for e in events if e["event"] == "working_memory"]},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
