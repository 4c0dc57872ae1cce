"""Stand-in of ``pixal3d.models.sparse_structure_flow`` (TRELLIS.2 ``trellis2/models/
sparse_structure_flow.py`` with Pixal3D's projection conditioning, read in
``yuyangYan-17/Pixal3D-exp`` at cdbb2bbf): ``TimestepEmbedder`` and the dense
``SparseStructureFlowModel`` — the same constructor arguments, ``state_dict`` keys and shapes and
forward as the real classes, at whatever widths the config gives (the real release:
``standin/port/flow_configs.py``).

``TimestepEmbedder(hidden_size, frequency_embedding_size=256)``: ``mlp`` = ``Linear(256, C)``,
SiLU, ``Linear(C, C)`` of the sinusoidal code ``[cos(t·f), sin(t·f)]``, ``f_i = exp(-ln(10000)
· i / 128)``; ``t`` is the flow time × 1000, ``[B]``.

``SparseStructureFlowModel(resolution, in_channels, model_channels, cond_channels,
out_channels, num_blocks, num_heads=None, num_head_channels=64, mlp_ratio=4, pe_mode="ape"|
"rope", rope_freq=(1.0, 10000.0), dtype="float32", use_checkpoint=False, share_mod=False,
initialization="vanilla"|"scaled", qk_rms_norm=False, qk_rms_norm_cross=False,
image_attn_mode="cross"|"proj", proj_in_channels=None, vae_in_channels=None, **kwargs)``.
Weights: ``t_embedder``; ``adaLN_modulation`` (SiLU, ``Linear(C, 6C)``) when ``share_mod``;
``input_layer`` ``Linear(in, C)``; ``blocks`` (``ModulatedTransformerCrossBlock`` × num_blocks);
``out_layer`` ``Linear(C, out)``. Buffers computed in ``__init__`` from ``torch.arange(...,
device=self.device)`` and saved (persistent): ``pos_emb`` ``[R³, C]`` (ape) or ``rope_phases``
``[R³, C/heads/2]`` complex64 (rope) over the grid's cells in ``(x, y, z)`` order. The blocks'
Linear layers are cast to ``dtype`` (``convert_to``); the rest stays fp32.

``forward(x [B, in, R, R, R], t [B], cond)`` → ``[B, out, R, R, R]`` in x's dtype: tokens =
the grid's cells; input layer (+ ``pos_emb`` for ape); the time embedding (through the shared
``adaLN_modulation`` when ``share_mod``) and the tokens cast to ``dtype``; ``cond``: for
``"proj"`` a ``{'global': [B, M, cond_channels], 'proj': [B, R³, proj_in]}`` dict or that pair,
both cast to ``dtype``, for ``"cross"`` a ``[B, M, cond_channels]`` tensor; the blocks (with
``rope_phases``); back to x's dtype, ``layer_norm`` (no affine, eps 1e-5), ``out_layer``.
"""
import math
from functools import partial
from typing import *

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..modules.attention import RotaryPositionEmbedder
from ..modules.transformer import AbsolutePositionEmbedder, ModulatedTransformerCrossBlock
from ..modules.utils import convert_module_to, manual_cast, str_to_dtype

__all__ = ['TimestepEmbedder', 'SparseStructureFlowModel', 'initialize_flow_weights',
           'cast_cond']


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size: int, frequency_embedding_size: int = 256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(frequency_embedding_size, hidden_size, bias=True),
                                 nn.SiLU(), nn.Linear(hidden_size, hidden_size, bias=True))
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
        """``[N, dim]`` sinusoidal code of ``t`` ``[N]`` (cosines first, then sines)."""
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half,
                                                               dtype=torch.float32) / half)
        args = t[:, None].float() * freqs.to(device=t.device)[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size))


def initialize_flow_weights(model: nn.Module) -> None:
    """The real models' ``initialize_weights``: ``vanilla`` (Xavier) or ``scaled`` (normal with
    std √(2 / 5C), the attention and MLP outputs 1 / √(5 · blocks · C), the input layer 1 / √in);
    both zero the modulation's last layer and ``out_layer`` and draw the time embedder's weights
    from N(0, 0.02). Biases of every Linear are 0. Any other ``initialization`` leaves the
    constructors' own initialisation (as the real ``if``/``elif`` does)."""
    if model.initialization not in ('vanilla', 'scaled'):
        return

    def linear(module, std=None):
        if isinstance(module, nn.Linear):
            if std is None:
                torch.nn.init.xavier_uniform_(module.weight)
            else:
                torch.nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.constant_(module.bias, 0)

    scaled = model.initialization == 'scaled'
    model.apply(partial(linear, std=math.sqrt(2.0 / (5.0 * model.model_channels))
                        if scaled else None))
    if scaled:
        out_std = 1.0 / math.sqrt(5 * model.num_blocks * model.model_channels)
        for block in model.blocks:
            cross = (block.cross_attn.cross_attn_block if model.image_attn_mode != "cross"
                     else block.cross_attn)
            for layer in (block.self_attn.to_out, cross.to_out, block.mlp.mlp[2]):
                layer.apply(partial(linear, std=out_std))
        nn.init.normal_(model.input_layer.weight, std=1.0 / math.sqrt(model.in_channels))
        nn.init.zeros_(model.input_layer.bias)
    nn.init.normal_(model.t_embedder.mlp[0].weight, std=0.02)
    nn.init.normal_(model.t_embedder.mlp[2].weight, std=0.02)
    modulations = ([model.adaLN_modulation[-1]] if model.share_mod
                   else [block.adaLN_modulation[-1] for block in model.blocks])
    for layer in modulations + [model.out_layer]:
        nn.init.constant_(layer.weight, 0)
        nn.init.constant_(layer.bias, 0)


def cast_cond(model: nn.Module, cond):
    """``cond`` as the blocks take it, cast to ``model.dtype``: ``(global, proj)`` for
    ``"proj"``, the tensor for ``"cross"``. A list of global tokens (the real models'
    variable-length form) is not in the stand-in: TypeError."""
    if model.image_attn_mode == 'proj':
        if isinstance(cond, dict):
            global_cond, proj_cond = cond['global'], cond['proj']
        else:
            global_cond, proj_cond = cond
        if isinstance(global_cond, list):
            raise TypeError("the stand-in flow models take the global image tokens as one "
                            "[B, M, C] tensor, not a list")
        return manual_cast(global_cond, model.dtype), manual_cast(proj_cond, model.dtype)
    if model.image_attn_mode != 'cross':
        raise ValueError(f"Unknown image attention mode: {model.image_attn_mode}")
    return manual_cast(cond, model.dtype)


class SparseStructureFlowModel(nn.Module):
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
        self._register_position_tables(resolution, rope_freq)
        self.input_layer = nn.Linear(in_channels, model_channels)
        self.blocks = nn.ModuleList([
            ModulatedTransformerCrossBlock(
                model_channels, cond_channels, num_heads=self.num_heads,
                mlp_ratio=self.mlp_ratio, attn_mode='full', use_checkpoint=use_checkpoint,
                use_rope=(pe_mode == "rope"), rope_freq=rope_freq, share_mod=share_mod,
                qk_rms_norm=qk_rms_norm, qk_rms_norm_cross=qk_rms_norm_cross,
                image_attn_mode=image_attn_mode, proj_in_channels=proj_in_channels,
                vae_in_channels=vae_in_channels)
            for _ in range(num_blocks)])
        self.out_layer = nn.Linear(model_channels, out_channels)
        self.initialize_weights()
        self.convert_to(self.dtype)

    def _register_position_tables(self, resolution: int, rope_freq) -> None:
        """``pos_emb`` (ape) or ``rope_phases`` (rope): persistent buffers of the grid's cells,
        computed on the device of the parameters (``meta`` when built with parameters on
        meta: the checkpoint then supplies them)."""
        axis = torch.arange(resolution, device=self.device)
        coords = torch.stack(torch.meshgrid(axis, axis, axis, indexing='ij'), dim=-1)
        coords = coords.reshape(-1, 3)
        if self.pe_mode == "ape":
            self.register_buffer("pos_emb", AbsolutePositionEmbedder(self.model_channels, 3)(
                coords))
        elif self.pe_mode == "rope":
            embedder = RotaryPositionEmbedder(self.model_channels // self.num_heads, 3,
                                              rope_freq)
            self.register_buffer("rope_phases", embedder(coords))
        if self.pe_mode != "rope":
            self.rope_phases = None

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def convert_to(self, dtype: torch.dtype) -> None:
        """Cast the blocks' Linear layers to ``dtype``; activations follow (``self.dtype``)."""
        self.dtype = dtype
        self.blocks.apply(partial(convert_module_to, dtype=dtype))

    def initialize_weights(self) -> None:
        initialize_flow_weights(self)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond) -> torch.Tensor:
        expected = [x.shape[0], self.in_channels, *[self.resolution] * 3]
        assert list(x.shape) == expected, \
            f"Input shape mismatch, got {list(x.shape)}, expected {expected}"
        h = x.reshape(*x.shape[:2], -1).permute(0, 2, 1).contiguous()
        h = self.input_layer(h)
        if self.pe_mode == "ape":
            h = h + self.pos_emb[None]
        t_emb = self.t_embedder(t)
        if self.share_mod:
            t_emb = self.adaLN_modulation(t_emb)
        t_emb = manual_cast(t_emb, self.dtype)
        h = manual_cast(h, self.dtype)
        cond = cast_cond(self, cond)
        for block in self.blocks:
            h = block(h, t_emb, cond, self.rope_phases)
        h = manual_cast(h, x.dtype)
        h = self.out_layer(F.layer_norm(h, h.shape[-1:]))
        return h.permute(0, 2, 1).reshape(h.shape[0], h.shape[2], *[self.resolution] * 3) \
            .contiguous()
