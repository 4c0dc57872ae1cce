"""Stand-in of ``pixal3d.models.sparse_structure_vae``'s decoder (TRELLIS's
``trellis/models/sparse_structure_vae.py``, which Pixal3D keeps unchanged): the real
constructor arguments, ``state_dict`` layout and forward, in plain PyTorch.

``SparseStructureDecoder(out_channels, latent_channels, num_res_blocks, channels,
num_res_blocks_middle=2, norm_type='layer', use_fp16=False)``: ``input_layer`` (3³ conv,
latent → channels[0]) → ``middle_block`` (``num_res_blocks_middle`` ``ResBlock3d``) → ``blocks``
(per level ``num_res_blocks`` ``ResBlock3d``, then an ``UpsampleBlock3d`` — a 3³ conv to 8× the
next width and ``pixel_shuffle_3d`` — between levels) → ``out_layer`` (norm, SiLU, 3³ conv →
out_channels). A latent [B, latent, R, R, R] gives [B, out, R·2^(L−1), …] (16 → 64 for the
released three levels). ``ResBlock3d``: norm1 → SiLU → conv1 → norm2 → SiLU → conv2
(zero-initialised) → + skip (identity, or a 1³ conv when the width changes). Norms are
``ChannelLayerNorm32`` (``norm_type='layer'``, eps 1e-5, affine) or ``GroupNorm32(32, ·)``.
With ``use_fp16`` the parameters of the convolutions in ``blocks`` and ``middle_block`` are
float16 and the torso runs in float16 (``h.type(self.dtype)``), on the CPU too — what the real
code does there; norms compute in fp32. The encoder is not mirrored (the pipeline has none).
"""
from typing import *

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..modules.norm import ChannelLayerNorm32, GroupNorm32
from ..modules.spatial import pixel_shuffle_3d
from ..modules.utils import convert_module_to_f16, convert_module_to_f32, zero_module


def norm_layer(norm_type: str, *args, **kwargs) -> nn.Module:
    """The decoder's norm: ``group`` → ``GroupNorm32(32, …)``, ``layer`` →
    ``ChannelLayerNorm32``; anything else raises ValueError."""
    if norm_type == "group":
        return GroupNorm32(32, *args, **kwargs)
    if norm_type == "layer":
        return ChannelLayerNorm32(*args, **kwargs)
    raise ValueError(f"Invalid norm type {norm_type}")


class ResBlock3d(nn.Module):
    def __init__(self, channels: int, out_channels: Optional[int] = None,
                 norm_type: Literal["group", "layer"] = "layer"):
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.norm1 = norm_layer(norm_type, channels)
        self.norm2 = norm_layer(norm_type, self.out_channels)
        self.conv1 = nn.Conv3d(channels, self.out_channels, 3, padding=1)
        self.conv2 = zero_module(nn.Conv3d(self.out_channels, self.out_channels, 3, padding=1))
        self.skip_connection = nn.Conv3d(channels, self.out_channels, 1) \
            if channels != self.out_channels else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        h = F.silu(h)
        h = self.conv1(h)
        h = self.norm2(h)
        h = F.silu(h)
        h = self.conv2(h)
        return h + self.skip_connection(x)


class UpsampleBlock3d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int,
                 mode: Literal["conv", "nearest"] = "conv"):
        assert mode in ["conv", "nearest"], f"Invalid mode {mode}"
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        if mode == "conv":
            self.conv = nn.Conv3d(in_channels, out_channels * 8, 3, padding=1)
        elif mode == "nearest":
            assert in_channels == out_channels, \
                "Nearest mode requires in_channels to be equal to out_channels"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "conv"):
            return pixel_shuffle_3d(self.conv(x), 2)
        return F.interpolate(x, scale_factor=2, mode="nearest")


class SparseStructureDecoder(nn.Module):
    def __init__(self, out_channels: int, latent_channels: int, num_res_blocks: int,
                 channels: List[int], num_res_blocks_middle: int = 2,
                 norm_type: Literal["group", "layer"] = "layer", use_fp16: bool = False):
        super().__init__()
        self.out_channels = out_channels
        self.latent_channels = latent_channels
        self.num_res_blocks = num_res_blocks
        self.channels = channels
        self.num_res_blocks_middle = num_res_blocks_middle
        self.norm_type = norm_type
        self.use_fp16 = use_fp16
        self.dtype = torch.float16 if use_fp16 else torch.float32
        self.input_layer = nn.Conv3d(latent_channels, channels[0], 3, padding=1)
        self.middle_block = nn.Sequential(*[ResBlock3d(channels[0], channels[0])
                                            for _ in range(num_res_blocks_middle)])
        self.blocks = nn.ModuleList([])
        for i, ch in enumerate(channels):
            self.blocks.extend([ResBlock3d(ch, ch) for _ in range(num_res_blocks)])
            if i < len(channels) - 1:
                self.blocks.append(UpsampleBlock3d(ch, channels[i + 1]))
        self.out_layer = nn.Sequential(norm_layer(norm_type, channels[-1]), nn.SiLU(),
                                       nn.Conv3d(channels[-1], out_channels, 3, padding=1))
        if use_fp16:
            self.convert_to_fp16()

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def convert_to_fp16(self) -> None:
        """The torso (``blocks``, ``middle_block``) to float16."""
        self.use_fp16 = True
        self.dtype = torch.float16
        self.blocks.apply(convert_module_to_f16)
        self.middle_block.apply(convert_module_to_f16)

    def convert_to_fp32(self) -> None:
        self.use_fp16 = False
        self.dtype = torch.float32
        self.blocks.apply(convert_module_to_f32)
        self.middle_block.apply(convert_module_to_f32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, latent, R, R, R] → logits [B, out, R·2^(L−1), …] in x's dtype."""
        h = self.input_layer(x)
        h = h.type(self.dtype)
        h = self.middle_block(h)
        for block in self.blocks:
            h = block(h)
        h = h.type(x.dtype)
        return self.out_layer(h)
