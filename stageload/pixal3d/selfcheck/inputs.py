"""The deep self-check's inputs, made here and seeded (nothing is read or downloaded): a
picture, a shell of active voxels, attention tokens shaped as a flow model's, a small latent.
The same inputs go to the port's path and to the lean one."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import torch

SEED = 1234


def picture(side: int = 512):
    """An RGB picture (PIL) with structure at every scale — gradients, rings, a checkerboard —
    so NAF's encoder and attention see varied content."""
    from PIL import Image
    y, x = torch.meshgrid(torch.linspace(-1, 1, side), torch.linspace(-1, 1, side),
                          indexing="ij")
    rings = torch.cos(12 * math.pi * (x ** 2 + y ** 2).sqrt())
    checks = ((x * 8).floor() + (y * 8).floor()).remainder(2) * 2 - 1
    rgb = torch.stack([(x + 1) / 2, (rings + 1) / 2, (checks * y + 1) / 2], dim=-1)
    return Image.fromarray((rgb.clamp(0, 1) * 255).byte().numpy())


def shell(resolution: int, count: int) -> torch.Tensor:
    """``[N, 4]`` int32 voxel coordinates (batch 0) on the surface of an ellipsoid in a
    ``resolution``³ grid, ``N <= count`` of them taken evenly (a character's shell stands in:
    the active voxels lie on a surface)."""
    axis = (torch.arange(resolution) + 0.5) / resolution - 0.5
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")
    inside = (x / 0.32) ** 2 + (y / 0.42) ** 2 + (z / 0.24) ** 2 <= 1
    core = inside.clone()
    for dim in range(3):
        for step in (1, -1):
            core &= torch.roll(inside, step, dims=dim)
    found = torch.nonzero(inside & ~core)
    if len(found) > count:
        found = found[torch.linspace(0, len(found) - 1, count).long()]
    return torch.cat([torch.zeros(len(found), 1, dtype=torch.long), found], dim=1).int()


def block(side: int, resolution: int) -> torch.Tensor:
    """``[side³, 4]`` int32 coordinates (batch 0) of a cube in the middle of a ``resolution``³
    grid."""
    lo = (resolution - side) // 2
    axis = torch.arange(lo, lo + side)
    xyz = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1).reshape(-1, 3)
    return torch.cat([torch.zeros(len(xyz), 1, dtype=torch.long), xyz], dim=1).int()


def normal(*shape: int, seed: int = SEED) -> torch.Tensor:
    """Seeded standard-normal float32 values (made on the CPU: the same on every device)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def model_args(root, model: str, pipeline_type: str = "1024_cascade") -> Optional[dict]:
    """The ``args`` of a plan model's checkpoint config (``{ckpt}.json``, no weights read), or
    None when it cannot be read."""
    from stageload.pixal3d.build.weights import plan_files
    try:
        files = plan_files(root, pipeline_type)
    except (OSError, ValueError):
        return None
    for entry in files:
        if entry.model == model and entry.name.endswith(".json") and not entry.problem:
            try:
                args = json.loads(Path(entry.path).read_text(encoding="utf-8")).get("args")
            except (OSError, ValueError, AttributeError):
                return None
            return args if isinstance(args, dict) else None
    return None


def attention_shape(args: Optional[dict]) -> tuple[int, int, str]:
    """``(heads, channels per head, where from)`` of a flow model's attention from its config
    ``args`` (``num_heads``, or ``model_channels`` / ``num_head_channels`` as TRELLIS
    defaults it, 64), else the real texture flow model's 12 × 128 (docs/pixal3d.md)."""
    if not args:
        return 12, 128, "the real flow models' 12 heads x 128: its config was not read"
    if not isinstance(args.get("model_channels"), int):
        return 12, 128, "the real flow models' 12 heads x 128: its config names no width"
    width = args["model_channels"]
    heads = args.get("num_heads")
    if not isinstance(heads, int) or heads < 1:
        heads = max(1, width // int(args.get("num_head_channels") or 64))
    return heads, max(1, width // heads), "the flow model's config"
