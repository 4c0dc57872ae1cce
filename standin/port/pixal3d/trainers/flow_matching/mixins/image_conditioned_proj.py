"""Stand-in view-aligned DINOv3 feature extractor (``DinoV3ProjFeatureExtractor``) and ``ProjGrid``.

``ProjGrid``, ``project_points_to_image_batch`` and ``sample_features`` mirror the real module's
(port 809cf5f5) at real shapes: every one of the ``grid_resolution``^3 points is projected and
sampled (64^3 = 262,144 points of 2 x 1024 channels for the texture pass) before
``get_proj_cond_shape`` keeps the active voxels.

As in the real module: the constructor loads the backbone with
``DINOv3ViTModel.from_pretrained(model_name)`` into ``.model``; ``_load_naf()`` loads the NAF
upsampler with ``torch.hub.load(...)`` into ``.naf_model`` (here from the local hub folder
``NAF_REPO`` with ``source="local"``; the real one names the GitHub repository
``valeoai/NAF``); ``grid_resolution`` and ``proj_grid`` are plain attributes that
``get_proj_cond_shape`` swaps for the duration of a call.

The real module's two diagnostic device switches, as it reads them (809cf5f5,
``_load_naf`` and ``forward``): ``PIXAL3D_NAF_DEVICE`` loads NAF onto that device and pins it
there (``to``/``cpu`` leave it; ``forward`` moves the guide image and the patch features to
NAF's device and NAF's output back); ``PIXAL3D_PROJ_GRID_DEVICE`` samples NAF's output on that
device through ``_proj_grid_alt``, a deep copy of ``proj_grid`` made on first use and reused
while its first buffer is on that device (NAF's output, the camera tensors moved there, the
result moved back).
"""
import copy
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


def project_points_to_image_batch(points_3d, transform_matrix, camera_angle_x,
                                  resolution: int = 518):
    """Pinhole projection as Blender renders it: ``points_3d`` [N, 3] or [B, N, 3] through the
    camera-to-world ``transform_matrix`` [B, 4, 4] (inverted here), horizontal field of view
    ``camera_angle_x`` [B] (radians) on a 32 mm sensor, to pixel coordinates of a
    ``resolution``-pixel image. Returns (points_2d [B, N, 2] as (x, y) pixels, depth [B, N],
    valid_mask [B, N])."""
    device = points_3d.device
    batch = transform_matrix.shape[0]
    points = points_3d.unsqueeze(0).expand(batch, -1, -1) if points_3d.dim() == 2 else points_3d
    ones = torch.ones(batch, points.shape[1], 1, device=device, dtype=points.dtype)
    homogeneous = torch.cat([points, ones], dim=-1)
    world_to_camera = torch.linalg.inv(transform_matrix.float()).to(transform_matrix.dtype)
    camera = torch.bmm(homogeneous, world_to_camera.transpose(-2, -1))[..., :3]
    x_cam, y_cam, z_cam = camera[..., 0], camera[..., 1], camera[..., 2]
    depth = -z_cam
    focal_pixels = (16.0 / torch.tan(camera_angle_x / 2.0) * resolution / 32.0).unsqueeze(1)
    x_pixel = focal_pixels * x_cam / (-z_cam + 1e-8) + resolution / 2.0
    y_pixel = -(focal_pixels * y_cam / (-z_cam + 1e-8)) + resolution / 2.0
    valid = ((x_pixel >= 0) & (x_pixel < resolution) & (y_pixel >= 0) & (y_pixel < resolution)
             & (depth > 0))
    return torch.stack([x_pixel, y_pixel], dim=-1), depth, valid


def sample_features(fmap, queries_ndc):
    """Bilinear ``grid_sample`` (``align_corners=False``, border padding) of ``fmap`` [B, C, H, W]
    at ``queries_ndc`` [B, K, 2] in [-1, 1]; returns [B, C, K]."""
    b, k = queries_ndc.shape[:2]
    assert fmap.shape[0] == b, "Batch size mismatch"
    grid = queries_ndc.view(b, k, 1, 2)
    return F.grid_sample(fmap, grid, mode='bilinear', align_corners=False,
                         padding_mode='border').squeeze(-1)


class ProjGrid(nn.Module):
    """A grid_resolution^3 lattice in [-1, 1]^3 (``grid_points`` [R^3, 3], rotated into
    Blender's axes), projected by the front-view camera at ``distance`` and sampled from a
    feature map with :func:`sample_features`. Output [B, R^3, C] — every grid point, however few
    of them the caller keeps."""

    def __init__(self, grid_resolution: int = 16, image_resolution: int = 518):
        super().__init__()
        self.grid_resolution = grid_resolution
        self.image_resolution = image_resolution
        axis = torch.linspace(-1, 1, grid_resolution)
        x, y, z = torch.meshgrid(axis, axis, axis, indexing='ij')
        rotation = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
        points = torch.matmul(torch.stack((x, y, z), dim=-1), rotation.T).reshape(-1, 3)
        self.register_buffer('grid_points', points)
        self.register_buffer('front_view_transform_matrix', torch.tensor(
            [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1.0, -2.0], [0.0, 1.0, 0.0, 0.0],
             [0.0, 0.0, 0.0, 1.0]]))

    def forward(self, features_map, camera_angle_x, distance, mesh_scale, transform_matrix=None,
                BHWC=True):
        b = features_map.shape[0]
        points = self.grid_points.expand(b, -1, -1)
        points = points / mesh_scale.unsqueeze(-1).unsqueeze(-1) / 2
        assert transform_matrix is None, "transform_matrix is not None"
        transform_matrix = self.front_view_transform_matrix.expand(b, -1, -1).clone()
        transform_matrix[:, 1, 3] = -distance
        image_points, depth, valid = project_points_to_image_batch(
            points, transform_matrix, camera_angle_x, self.image_resolution)
        image_points_norm = (image_points + 0.5) / self.image_resolution * 2 - 1
        if BHWC:
            features_map = features_map.permute(0, 3, 1, 2)
        return sample_features(features_map, image_points_norm).permute(0, 2, 1)


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
            pinned = os.environ.get("PIXAL3D_NAF_DEVICE", "").strip()
            if pinned:
                device = torch.device(pinned)
                print(f"[NAF] PIXAL3D_NAF_DEVICE={pinned}: forcing NAF onto {device}",
                      flush=True)
            self.naf_model = torch.hub.load(NAF_REPO, "naf", pretrained=True, device=device,
                                            trust_repo=True, source="local")
            self.naf_model.eval()
            self.naf_model.requires_grad_(False)
            self._naf_device_pinned = bool(pinned)

    def _moves_naf(self) -> bool:
        return self.naf_model is not None and not getattr(self, "_naf_device_pinned", False)

    def to(self, device):
        super().to(device)
        self.model.to(device)
        self.proj_grid.to(device)
        if self._moves_naf():
            self.naf_model.to(device)
        return self

    def cpu(self):
        super().cpu()
        self.model.cpu()
        self.proj_grid.cpu()
        if self._moves_naf():
            self.naf_model.cpu()
        return self

    def _upsample(self, image_for_naf, patches):
        """NAF's output ``[B, C, H', W']`` on the patches' device (NAF run on its own)."""
        features = patches.permute(0, 3, 1, 2)
        naf_device, home = next(self.naf_model.parameters()).device, features.device
        if naf_device != home:
            image_for_naf, features = image_for_naf.to(naf_device), features.to(naf_device)
        hr = self.naf_model(image_for_naf, features, self.naf_target_size)
        return hr.to(home) if naf_device != home else hr

    def _sample_hr(self, hr, camera_angle_x, distance, mesh_scale, transform_matrix):
        """``proj_grid`` over NAF's output, on ``PIXAL3D_PROJ_GRID_DEVICE`` when it is set."""
        pinned = os.environ.get("PIXAL3D_PROJ_GRID_DEVICE", "").strip()
        if not pinned:
            return self.proj_grid(hr, camera_angle_x, distance, mesh_scale, transform_matrix,
                                  BHWC=False)
        where = torch.device(pinned)
        alt = getattr(self, "_proj_grid_alt", None)
        if alt is None or next(iter(alt.buffers())).device != where:
            self._proj_grid_alt = copy.deepcopy(self.proj_grid).to(where)
            print(f"[ProjGrid] PIXAL3D_PROJ_GRID_DEVICE={pinned}: HR proj_grid pinned to "
                  f"{where}", flush=True)
        home = hr.device
        moved = [t.to(where) for t in (hr, camera_angle_x, distance, mesh_scale)]
        matrix = transform_matrix.to(where) if transform_matrix is not None else None
        return self._proj_grid_alt(*moved, matrix, BHWC=False).to(home)

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
                hr = self._upsample(image_for_naf, patches)
                z_proj_hr = self._sample_hr(hr, camera_angle_x, distance, mesh_scale,
                                            transform_matrix)
                z_proj = torch.cat([z_proj, z_proj_hr], dim=-1)
        return z_global, z_proj
