"""Stand-in view-aligned DINOv3 feature extractor (``DinoV3ProjFeatureExtractor``) and ``ProjGrid``.

As in the real module: the constructor loads the backbone with
``DINOv3ViTModel.from_pretrained(model_name)`` into ``.model``; ``_load_naf()`` loads the NAF
upsampler with ``torch.hub.load(...)`` into ``.naf_model`` (here from the local hub folder
``NAF_REPO`` with ``source="local"``; the real one names the GitHub repository
``valeoai/NAF``); ``grid_resolution`` and ``proj_grid`` are plain attributes that
``get_proj_cond_shape`` swaps for the duration of a call.
"""
import os
from typing import *

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from standin_hf import DINOv3ViTModel

NAF_REPO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))), "naf_hub")

_MEAN = torch.tensor([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1)


class ProjGrid(nn.Module):
    """A grid_resolution^3 lattice in [-1, 1]^3, projected by a pinhole camera looking down -y
    from ``distance`` with horizontal field of view ``camera_angle_x`` (radians), sampled from a
    feature map with bilinear ``grid_sample``. Output [B, R^3, C]."""

    def __init__(self, grid_resolution: int = 16, image_resolution: int = 518):
        super().__init__()
        self.grid_resolution = grid_resolution
        self.image_resolution = image_resolution
        axis = torch.linspace(-1, 1, grid_resolution)
        x, y, z = torch.meshgrid(axis, axis, axis, indexing='ij')
        self.register_buffer('grid_points', torch.stack((x, y, z), dim=-1).reshape(-1, 3))

    def forward(self, features_map, camera_angle_x, distance, mesh_scale, transform_matrix=None,
                BHWC=True):
        if BHWC:
            features_map = features_map.permute(0, 3, 1, 2)
        b = features_map.shape[0]
        pts = self.grid_points[None].expand(b, -1, -1) / mesh_scale.reshape(-1, 1, 1) / 2
        depth = distance.reshape(-1, 1) + pts[..., 1]
        focal = 1.0 / torch.tan(camera_angle_x.reshape(-1, 1) / 2)
        u = focal * pts[..., 0] / depth
        v = -focal * pts[..., 2] / depth
        grid = torch.stack([u, v], dim=-1)[:, :, None]  # [B, K, 1, 2] in [-1, 1]
        out = F.grid_sample(features_map, grid.to(features_map.dtype), mode='bilinear',
                            align_corners=False, padding_mode='border')
        return out[..., 0].permute(0, 2, 1)


class DinoV3ProjFeatureExtractor(nn.Module):
    def __init__(self, model_name: str, image_size: int = 512, grid_resolution: int = 16,
                 use_naf_upsample: bool = False, naf_target_size=None):
        super().__init__()
        self.model_name = model_name
        self.image_size = image_size
        self.grid_resolution = grid_resolution
        self.use_naf_upsample = use_naf_upsample
        if naf_target_size is None:
            self.naf_target_size = (128, 128)
        elif isinstance(naf_target_size, int):
            self.naf_target_size = (naf_target_size, naf_target_size)
        else:
            self.naf_target_size = tuple(naf_target_size)
        self.model = DINOv3ViTModel.from_pretrained(model_name)
        self.model.eval()
        self.model.requires_grad_(False)
        self.patch_size = self.model.config.patch_size
        self.patch_number = image_size // self.patch_size
        self.embed_dim = self.model.config.hidden_size
        self.proj_grid = ProjGrid(grid_resolution=grid_resolution, image_resolution=image_size)
        self.naf_model = None
        self.proj_channels = self.embed_dim * 2 if use_naf_upsample else self.embed_dim

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _load_naf(self):
        if self.naf_model is None:
            import torch.hub
            device = next(self.model.parameters()).device
            self.naf_model = torch.hub.load(NAF_REPO, "naf", pretrained=True, device=device,
                                            trust_repo=True, source="local")
            self.naf_model.eval()
            self.naf_model.requires_grad_(False)

    def to(self, device):
        super().to(device)
        self.model.to(device)
        self.proj_grid.to(device)
        if self.naf_model is not None:
            self.naf_model.to(device)
        return self

    def cpu(self):
        super().cpu()
        self.model.cpu()
        self.proj_grid.cpu()
        if self.naf_model is not None:
            self.naf_model.cpu()
        return self

    def extract_features(self, image: torch.Tensor) -> torch.Tensor:
        image = image.to(self.model.embeddings.patch_embeddings.weight.dtype)
        hidden_states = self.model.embeddings(image, bool_masked_pos=None)
        position_embeddings = self.model.rope_embeddings(image)
        layers = self.model.model.layer if hasattr(self.model,
                                                   'model') and hasattr(self.model.model, 'layer') \
            else self.model.layer
        for layer_module in layers:
            hidden_states = layer_module(hidden_states, position_embeddings=position_embeddings)
        return F.layer_norm(hidden_states, hidden_states.shape[-1:])

    def forward(self, image, camera_angle_x=None, distance=None, mesh_scale=None,
                transform_matrix=None):
        if isinstance(image, list):
            image = [i.resize((self.image_size, self.image_size), Image.LANCZOS) for i in image]
            image = [torch.from_numpy(np.array(i.convert('RGB')).astype(np.float32) / 255)
                     .permute(2, 0, 1) for i in image]
            image = torch.stack(image).to(self.device)
        else:
            image = image.to(self.device)
        b = image.shape[0]
        image_for_naf = image.clone() if self.use_naf_upsample else None
        image = (image - _MEAN.to(image.device)) / _STD.to(image.device)
        with torch.no_grad():
            z = self.extract_features(image)
            num_reg = getattr(self.model.config, 'num_register_tokens', 4)
            z_global = z[:, :1 + num_reg]
            patches = z[:, 1 + num_reg:].reshape(b, self.patch_number, self.patch_number, -1)
            if camera_angle_x is None or distance is None or mesh_scale is None:
                raise ValueError("camera_angle_x, distance, and mesh_scale must be provided")
            z_proj = self.proj_grid(patches, camera_angle_x, distance, mesh_scale, transform_matrix)
            if self.use_naf_upsample:
                self._load_naf()
                hr = self.naf_model(image_for_naf, patches.permute(0, 3, 1, 2),
                                    self.naf_target_size)
                z_proj_hr = self.proj_grid(hr, camera_angle_x, distance, mesh_scale,
                                           transform_matrix, BHWC=False)
                z_proj = torch.cat([z_proj, z_proj_hr], dim=-1)
        return z_global, z_proj
