"""Stand-in of ``pixal3d.models.sc_vaes.sparse_unet_vae`` (TRELLIS.2's sparse U-Net VAE, which
Pixal3D keeps unchanged): the decoder side — ``SparseConvNeXtBlock3d``, ``SparseResBlockC2S3d``
and ``SparseUnetVaeDecoder`` — with the real constructor arguments, ``state_dict`` layout and
forward, in plain PyTorch (the sparse convolution is ``modules.sparse.SparseConv3d``, back end
``config.CONV``). The encoder side and the ``nearest`` resampling blocks are not mirrored: the
released decoders use neither.

``SparseConvNeXtBlock3d(C)``: ``conv`` (3³ submanifold) → ``norm`` (``LayerNorm32``, affine,
eps 1e-6) → ``mlp`` (Linear C→4C, SiLU, Linear 4C→C, zeroed by the block and then made
Xavier-uniform again by the decoder's ``initialize_weights``) → + input.
``SparseResBlockC2S3d(C, C')``: the subdivision ``to_subdiv(x)`` (``SparseLinear(C, 8)``, when
predicted; else the guide), then ``norm1`` (``LayerNorm32``, affine) → SiLU → ``conv1`` (3³,
C → 8C') → channel-to-space ×2 keeping the children whose subdivision logit is > 0 → ``norm2``
(``LayerNorm32``, no affine) → SiLU → ``conv2`` (3³, C'→C', zero-initialised) → + the skip:
the input moved to space the same way (each child takes C/8 of its parent's channels) and
``repeat_interleave``'d to C'. ``use_checkpoint`` runs a block through
``torch.utils.checkpoint`` (what the released configs ask for; no effect on the values).

``SparseUnetVaeDecoder``: ``from_latent`` (``SparseLinear``) → per level ``num_blocks[i]``
blocks of ``block_type[i]`` then, between levels, one ``up_block_type[i]`` → fp32 →
``F.layer_norm`` (no affine, eps 1e-5) → ``output_layer``. ``use_fp16``: the parameters of the
convolutions and linear layers in ``blocks`` are float16 and the torso runs in float16 — on the
CPU too, as the real code does there (norms compute in fp32). ``pred_subdiv``: the up blocks
predict their subdivision (``forward(return_subs=True)`` also returns the logits, one
``SparseTensor`` [N_level, 8] per up block) or follow ``guide_subs``. ``upsample(x, k)`` runs the
first ``k`` levels and returns the coordinates there ([M, 4] int, 2^k × the input's grid).
"""
from typing import *

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from ...modules import sparse as sp
from ...modules.norm import LayerNorm32
from ...modules.utils import convert_module_to_f16, convert_module_to_f32, zero_module


class SparseResBlockC2S3d(nn.Module):
    def __init__(self, channels: int, out_channels: Optional[int] = None,
                 use_checkpoint: bool = False, pred_subdiv: bool = True):
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.use_checkpoint = use_checkpoint
        self.pred_subdiv = pred_subdiv
        self.norm1 = LayerNorm32(channels, elementwise_affine=True, eps=1e-6)
        self.norm2 = LayerNorm32(self.out_channels, elementwise_affine=False, eps=1e-6)
        self.conv1 = sp.SparseConv3d(channels, self.out_channels * 8, 3)
        self.conv2 = zero_module(sp.SparseConv3d(self.out_channels, self.out_channels, 3))
        self.skip_connection = lambda x: x.replace(
            x.feats.repeat_interleave(out_channels // (channels // 8), dim=1))
        if pred_subdiv:
            self.to_subdiv = sp.SparseLinear(channels, 8)
        self.updown = sp.SparseChannel2Spatial(2)

    def _forward(self, x, subdiv=None):
        if self.pred_subdiv:
            subdiv = self.to_subdiv(x)
        h = x.replace(self.norm1(x.feats))
        h = h.replace(F.silu(h.feats))
        h = self.conv1(h)
        subdiv_binarized = subdiv.replace(subdiv.feats > 0) if subdiv is not None else None
        h = self.updown(h, subdiv_binarized)
        x = self.updown(x, subdiv_binarized)
        h = h.replace(self.norm2(h.feats))
        h = h.replace(F.silu(h.feats))
        h = self.conv2(h)
        h = h + self.skip_connection(x)
        if self.pred_subdiv:
            return h, subdiv
        return h

    def forward(self, x, subdiv=None):
        if self.use_checkpoint:
            return torch.utils.checkpoint.checkpoint(self._forward, x, subdiv,
                                                     use_reentrant=False)
        return self._forward(x, subdiv)


class SparseConvNeXtBlock3d(nn.Module):
    def __init__(self, channels: int, mlp_ratio: float = 4.0, use_checkpoint: bool = False):
        super().__init__()
        self.channels = channels
        self.use_checkpoint = use_checkpoint
        self.norm = LayerNorm32(channels, elementwise_affine=True, eps=1e-6)
        self.conv = sp.SparseConv3d(channels, channels, 3)
        self.mlp = nn.Sequential(
            nn.Linear(channels, int(channels * mlp_ratio)),
            nn.SiLU(),
            zero_module(nn.Linear(int(channels * mlp_ratio), channels)),
        )

    def _forward(self, x):
        h = self.conv(x)
        h = h.replace(self.norm(h.feats))
        h = h.replace(self.mlp(h.feats))
        return h + x

    def forward(self, x):
        if self.use_checkpoint:
            return torch.utils.checkpoint.checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class SparseUnetVaeDecoder(nn.Module):
    def __init__(self, out_channels: int, model_channels: List[int], latent_channels: int,
                 num_blocks: List[int], block_type: List[str], up_block_type: List[str],
                 block_args: List[Dict[str, Any]], use_fp16: bool = False,
                 pred_subdiv: bool = True):
        super().__init__()
        self.out_channels = out_channels
        self.model_channels = model_channels
        self.num_blocks = num_blocks
        self.use_fp16 = use_fp16
        self.pred_subdiv = pred_subdiv
        self.dtype = torch.float16 if use_fp16 else torch.float32
        self.low_vram = False
        self.output_layer = sp.SparseLinear(model_channels[-1], out_channels)
        self.from_latent = sp.SparseLinear(latent_channels, model_channels[0])
        self.blocks = nn.ModuleList([])
        for i in range(len(num_blocks)):
            self.blocks.append(nn.ModuleList([]))
            for _ in range(num_blocks[i]):
                self.blocks[-1].append(globals()[block_type[i]](model_channels[i],
                                                                **block_args[i]))
            if i < len(num_blocks) - 1:
                self.blocks[-1].append(globals()[up_block_type[i]](
                    model_channels[i], model_channels[i + 1], pred_subdiv=pred_subdiv,
                    **block_args[i]))
        self.initialize_weights()
        if use_fp16:
            self.convert_to_fp16()

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def convert_to_fp16(self) -> None:
        """The torso (``blocks``) to float16."""
        self.blocks.apply(convert_module_to_f16)

    def convert_to_fp32(self) -> None:
        self.blocks.apply(convert_module_to_f32)

    def initialize_weights(self) -> None:
        """Xavier-uniform weights and zero biases for every ``nn.Linear`` (``SparseLinear``
        included, and the ConvNeXt MLPs' last layers their constructor had zeroed: the real
        decoder re-initialises those too)."""
        def _basic_init(module):
            if isinstance(module, nn.Linear):
                torch.nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)
        self.apply(_basic_init)

    def forward(self, x, guide_subs=None, return_subs: bool = False):
        """x: latent ``SparseTensor`` [N, latent]. Returns the output ``SparseTensor``
        [M, out_channels] at 2^(levels−1) × x's grid (and the subdivision logits with
        ``return_subs``)."""
        assert guide_subs is None or not self.pred_subdiv, \
            "Only decoders with pred_subdiv=False can be used with guide_subs"
        assert not return_subs or self.pred_subdiv, \
            "Only decoders with pred_subdiv=True can be used with return_subs"
        h = self.from_latent(x)
        h = h.type(self.dtype)
        subs_gt = []
        subs = []
        for i, res in enumerate(self.blocks):
            for j, block in enumerate(res):
                if i < len(self.blocks) - 1 and j == len(res) - 1:
                    if self.pred_subdiv:
                        if self.training:
                            subs_gt.append(h.get_spatial_cache('subdivision'))
                        h, sub = block(h)
                        subs.append(sub)
                    else:
                        h = block(h, subdiv=guide_subs[i] if guide_subs is not None else None)
                else:
                    h = block(h)
        h = h.type(x.dtype)
        h = h.replace(F.layer_norm(h.feats, h.feats.shape[-1:]))
        h = self.output_layer(h)
        if self.training and self.pred_subdiv:
            return h, subs_gt, subs
        if return_subs:
            return h, subs
        return h

    def upsample(self, x, upsample_times: int) -> torch.Tensor:
        """The coordinates after the first ``upsample_times`` levels (predicted subdivision)."""
        assert self.pred_subdiv, \
            "Only decoders with pred_subdiv=True can be used with upsampling"
        h = self.from_latent(x)
        h = h.type(self.dtype)
        for i, res in enumerate(self.blocks):
            if i == upsample_times:
                return h.coords
            for j, block in enumerate(res):
                if i < len(self.blocks) - 1 and j == len(res) - 1:
                    h, _sub = block(h)
                else:
                    h = block(h)
