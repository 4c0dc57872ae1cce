"""Stand-in of ``pixal3d.models.structured_latent_flow`` (TRELLIS.2 with Pixal3D's projection
conditioning, read in ``yuyangYan-17/Pixal3D-exp`` at cdbb2bbf): ``SLatFlowModel`` and
``ElasticSLatFlowModel`` (the class the released shape and texture flow checkpoints name) —
the same constructor arguments, ``state_dict`` keys and shapes and forward as the real classes,
at whatever widths the config gives (``standin/port/flow_configs.py``).

``SLatFlowModel(resolution, in_channels, model_channels, cond_channels, out_channels,
num_blocks, num_heads=None, num_head_channels=64, mlp_ratio=4, pe_mode="ape"|"rope",
rope_freq=(1.0, 10000.0), dtype="float32", use_checkpoint=False, share_mod=False,
initialization="vanilla"|"scaled", qk_rms_norm=False, qk_rms_norm_cross=False,
image_attn_mode="cross"|"proj", proj_in_channels=None, vae_in_channels=None, **kwargs)``.
Weights: ``t_embedder``, ``adaLN_modulation`` (``share_mod``), ``input_layer`` and
``out_layer`` (``SparseLinear``), ``blocks`` (``ModulatedSparseTransformerCrossBlock`` ×
num_blocks, each self-attention with its own ``rope`` — a frequency table ``freqs`` kept as a
plain tensor attribute, in no checkpoint); ``pos_embedder`` (no weights) for ape. ``resolution``
is only read by the pipeline (the latent grid); the tokens carry their coordinates.

``forward(x, t [B], cond, concat_cond=None)``: x a sparse tensor of feats ``[N, in_channels -
concat channels]`` at coords ``[N, 4]`` (batch, x, y, z); ``concat_cond`` (the texture flows:
the normalised shape latent on the same tokens) is concatenated to x's feats first. Input layer,
cast to ``dtype``; time embedding (shared modulation when ``share_mod``) cast to ``dtype``; ape
adds the coordinates' embedding; ``cond`` for ``"proj"``: ``{'global': [B, M, cond_channels],
'proj': sparse [N, proj_in] on x's tokens}`` (or the pair), both cast to ``dtype``; the blocks;
back to the input's dtype, ``layer_norm`` (no affine, eps 1e-5), ``out_layer`` → x's tokens with
``[N, out_channels]`` feats.
"""
from functools import partial
from typing import *

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..modules.sparse.linear import SparseLinear
from ..modules.sparse.transformer import ModulatedSparseTransformerCrossBlock
from ..modules.transformer import AbsolutePositionEmbedder
from ..modules.utils import convert_module_to, manual_cast, str_to_dtype
from .sparse_elastic_mixin import SparseTransformerElasticMixin
from .sparse_structure_flow import TimestepEmbedder, cast_cond, initialize_flow_weights

__all__ = ['SLatFlowModel', 'ElasticSLatFlowModel']


class SLatFlowModel(nn.Module):
    def __init__(self, resolution: int, in_channels: int, model_channels: int,
                 cond_channels: int, out_channels: int, num_blocks: int,
                 num_heads: Optional[int] = None, num_head_channels: Optional[int] = 64,
                 mlp_ratio: float = 4, pe_mode: Literal["ape", "rope"] = "ape",
                 rope_freq: Tuple[float, float] = (1.0, 10000.0), dtype: str = 'float32',
                 use_checkpoint: bool = False, share_mod: bool = False,
                 initialization: str = 'vanilla', qk_rms_norm: bool = False,
                 qk_rms_norm_cross: bool = False,
                 image_attn_mode: Literal["cross", "proj"] = "cross",
                 proj_in_channels: Optional[int] = None,
                 vae_in_channels: Optional[int] = None, **kwargs):
        super().__init__()
        self.resolution = resolution
        self.in_channels = in_channels
        self.model_channels = model_channels
        self.cond_channels = cond_channels
        self.out_channels = out_channels
        self.num_blocks = num_blocks
        self.num_heads = num_heads or model_channels // num_head_channels
        self.mlp_ratio = mlp_ratio
        self.pe_mode = pe_mode
        self.use_checkpoint = use_checkpoint
        self.share_mod = share_mod
        self.initialization = initialization
        self.qk_rms_norm = qk_rms_norm
        self.qk_rms_norm_cross = qk_rms_norm_cross
        self.image_attn_mode = image_attn_mode
        self.proj_in_channels = proj_in_channels
        self.vae_in_channels = vae_in_channels
        self.dtype = str_to_dtype(dtype)

        self.t_embedder = TimestepEmbedder(model_channels)
        if share_mod:
            self.adaLN_modulation = nn.Sequential(
                nn.SiLU(), nn.Linear(model_channels, 6 * model_channels, bias=True))
        if pe_mode == "ape":
            self.pos_embedder = AbsolutePositionEmbedder(model_channels)
        self.input_layer = SparseLinear(in_channels, model_channels)
        self.blocks = nn.ModuleList([
            ModulatedSparseTransformerCrossBlock(
                model_channels, cond_channels, num_heads=self.num_heads,
                mlp_ratio=self.mlp_ratio, attn_mode='full', use_checkpoint=use_checkpoint,
                use_rope=(pe_mode == "rope"), rope_freq=rope_freq, share_mod=share_mod,
                qk_rms_norm=qk_rms_norm, qk_rms_norm_cross=qk_rms_norm_cross,
                image_attn_mode=image_attn_mode, proj_in_channels=proj_in_channels,
                vae_in_channels=vae_in_channels)
            for _ in range(num_blocks)])
        self.out_layer = SparseLinear(model_channels, out_channels)
        self.initialize_weights()
        self.convert_to(self.dtype)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def convert_to(self, dtype: torch.dtype) -> None:
        """Cast the blocks' Linear layers to ``dtype``; activations follow (``self.dtype``)."""
        self.dtype = dtype
        self.blocks.apply(partial(convert_module_to, dtype=dtype))

    def initialize_weights(self) -> None:
        initialize_flow_weights(self)

    def forward(self, x, t: torch.Tensor, cond, concat_cond=None, **kwargs):
        if concat_cond is not None:
            x = x.replace(torch.cat([x.feats, concat_cond.feats], dim=-1))
        h = manual_cast(self.input_layer(x), self.dtype)
        t_emb = self.t_embedder(t)
        if self.share_mod:
            t_emb = self.adaLN_modulation(t_emb)
        t_emb = manual_cast(t_emb, self.dtype)
        if self.pe_mode == "ape":
            pe = manual_cast(self.pos_embedder(h.coords[:, 1:]), self.dtype)
            h = h.replace(h.feats + pe)
        cond = cast_cond(self, cond)
        for block in self.blocks:
            h = block(h, t_emb, cond)
        h = manual_cast(h, x.dtype)
        h = h.replace(F.layer_norm(h.feats, h.feats.shape[-1:]))
        return self.out_layer(h)


class ElasticSLatFlowModel(SparseTransformerElasticMixin, SLatFlowModel):
    """``SLatFlowModel`` with the elastic-memory mixin (training only: with a registered memory
    controller, in training mode with gradients, the first blocks run under gradient
    checkpointing; otherwise the forward is ``SLatFlowModel``'s)."""
