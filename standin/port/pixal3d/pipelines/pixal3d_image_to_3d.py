"""Stand-in ``Pixal3DImageTo3DPipeline``: the real method names, arguments and order of calls
(``preprocess_image``, ``get_proj_cond_ss``, ``get_proj_cond_shape``, ``sample_sparse_structure``,
``sample_shape_slat``, the inline upsample and high-resolution pass in ``run()``,
``sample_tex_slat``, ``decode_latent``), ``low_vram`` moves included, with tiny models.
All noise is ``torch.randn`` on the CPU generator, then moved to the device.
"""
from typing import *

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

from ..modules import image_feature_extractor  # noqa: F401
from ..modules.sparse import SparseTensor
from ..representations import Mesh, MeshWithVoxel  # noqa: F401
from . import rembg, samplers
from .base import Pipeline


class Pixal3DImageTo3DPipeline(Pipeline):
    model_names_to_load = [
        'sparse_structure_flow_model',
        'sparse_structure_decoder',
        'shape_slat_flow_model_512',
        'shape_slat_flow_model_1024',
        'shape_slat_decoder',
        'tex_slat_flow_model_512',
        'tex_slat_flow_model_1024',
        'tex_slat_decoder',
    ]

    def __init__(self, models=None, low_vram: bool = True,
                 default_pipeline_type: str = '1024_cascade'):
        if models is None:
            return
        super().__init__(models)
        self.low_vram = low_vram
        self.default_pipeline_type = default_pipeline_type
        self.pbr_attr_layout = {'base_color': slice(0, 3), 'metallic': slice(3, 4),
                                'roughness': slice(4, 5), 'alpha': slice(5, 6)}
        self._device = 'cpu'

    @classmethod
    def from_pretrained(cls, path: str, config_file: str = "pipeline.json"):
        pipeline = super().from_pretrained(path, config_file)
        args = pipeline._pretrained_args
        for stage in ('sparse_structure', 'shape_slat', 'tex_slat'):
            spec = args[f'{stage}_sampler']
            setattr(pipeline, f'{stage}_sampler', getattr(samplers, spec['name'])(**spec['args']))
            setattr(pipeline, f'{stage}_sampler_params', spec['params'])
        pipeline.shape_slat_normalization = args['shape_slat_normalization']
        pipeline.tex_slat_normalization = args['tex_slat_normalization']
        pipeline.image_cond_model_ss = None
        pipeline.image_cond_model_shape_512 = None
        pipeline.image_cond_model_shape_1024 = None
        pipeline.image_cond_model_tex_1024 = None
        pipeline.rembg_model = getattr(rembg,
                                       args['rembg_model']['name'])(**args['rembg_model']['args'])
        pipeline.low_vram = args.get('low_vram', True)
        pipeline.default_pipeline_type = args.get('default_pipeline_type', '1024_cascade')
        pipeline.pbr_attr_layout = {'base_color': slice(0, 3), 'metallic': slice(3, 4),
                                    'roughness': slice(4, 5), 'alpha': slice(5, 6)}
        pipeline._device = 'cpu'
        return pipeline

    def to(self, device):
        self._device = device
        if not self.low_vram:
            super().to(device)
            if self.rembg_model is not None:
                self.rembg_model.to(device)
        return self

    def preprocess_image(self, input: Image.Image, bg_color: tuple = (0, 0, 0)) -> Image.Image:
        """Remove the background unless the image has a real alpha channel, crop to the object
        (alpha > 0.8) with a 10 % margin, composite over ``bg_color``; returns RGB."""
        has_alpha = False
        if input.mode == 'RGBA':
            if not np.all(np.array(input)[:, :, 3] == 255):
                has_alpha = True
        scale = min(1, 1024 / max(input.size))
        if scale < 1:
            input = input.resize((int(input.width * scale), int(input.height * scale)),
                                 Image.Resampling.LANCZOS)
        if has_alpha:
            output = input
        else:
            input = input.convert('RGB')
            if self.low_vram:
                self.rembg_model.to(self.device)
            output = self.rembg_model(input)
            if self.low_vram:
                self.rembg_model.cpu()
        array = np.array(output)
        ys, xs = np.nonzero(array[:, :, 3] > 0.8 * 255)
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max(), ys.max()
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        size = int(max(x1 - x0, y1 - y0) * 1.1)
        output = output.crop((cx - size // 2, cy - size // 2, cx + size // 2, cy + size // 2))
        array = np.array(output).astype(np.float32) / 255
        rgb, a = array[:, :, :3], array[:, :, 3:4]
        bg = np.array(bg_color, dtype=np.float32) / 255.0
        out = rgb * a + bg * (1.0 - a)
        return Image.fromarray((np.clip(out, 0, 1) * 255).astype(np.uint8))

    @torch.no_grad()
    def get_proj_cond_ss(self, image: list, camera_angle_x: float = 0.8575560450553894,
                         distance: float = 2.0, mesh_scale: float = 1.0) -> dict:
        device = self.device
        image_cond_model = self.image_cond_model_ss
        if self.low_vram:
            image_cond_model.to(device)
        z_global, z_proj = image_cond_model(
            image, camera_angle_x=torch.tensor([camera_angle_x], device=device),
            distance=torch.tensor([distance], device=device),
            mesh_scale=torch.tensor([mesh_scale], device=device))
        if self.low_vram:
            image_cond_model.cpu()
        return {'cond': {'global': z_global, 'proj': z_proj},
                'neg_cond': {'global': torch.zeros_like(z_global),
                             'proj': torch.zeros_like(z_proj)}}

    @torch.no_grad()
    def get_proj_cond_shape(self, image_cond_model: nn.Module, image: list, coords: torch.Tensor,
                            camera_angle_x: float = 0.8575560450553894, distance: float = 2.0,
                            mesh_scale: float = 1.0, grid_resolution_override: int = None) -> dict:
        device = self.device
        if self.low_vram:
            image_cond_model.to(device)
        orig = image_cond_model.grid_resolution
        changed = grid_resolution_override is not None and grid_resolution_override != orig
        if changed:  # mutates the extractor for the duration of this call
            image_cond_model.grid_resolution = grid_resolution_override
            image_cond_model.proj_grid = image_cond_model.proj_grid.__class__(
                grid_resolution=grid_resolution_override,
                image_resolution=image_cond_model.proj_grid.image_resolution).to(device)
        z_global, z_proj = image_cond_model(
            image, camera_angle_x=torch.tensor([camera_angle_x], device=device),
            distance=torch.tensor([distance], device=device),
            mesh_scale=torch.tensor([mesh_scale], device=device))
        res = image_cond_model.grid_resolution
        grid = z_proj.reshape(1, res, res, res, -1)
        c = coords.long()
        z_proj_sparse = grid[c[:, 0], c[:, 1], c[:, 2], c[:, 3]]
        if changed:
            image_cond_model.grid_resolution = orig
            image_cond_model.proj_grid = image_cond_model.proj_grid.__class__(
                grid_resolution=orig,
                image_resolution=image_cond_model.proj_grid.image_resolution).to(device)
        if self.low_vram:
            image_cond_model.cpu()
        return {'cond': {'global': z_global,
                         'proj': SparseTensor(feats=z_proj_sparse, coords=coords)},
                'neg_cond': {'global': torch.zeros_like(z_global),
                             'proj': SparseTensor(feats=torch.zeros_like(z_proj_sparse),
                                                  coords=coords)}}

    def sample_sparse_structure(self, cond: dict, resolution: int, num_samples: int = 1,
                                sampler_params: dict = {}):
        flow_model = self.models['sparse_structure_flow_model']
        reso = flow_model.resolution
        noise = torch.randn(num_samples, flow_model.in_channels, reso, reso, reso).to(self.device)
        sampler_params = {**self.sparse_structure_sampler_params, **sampler_params}
        if self.low_vram:
            flow_model.to(self.device)
        z_s = self.sparse_structure_sampler.sample(flow_model, noise, **cond, **sampler_params,
                                                   verbose=True,
                                                   tqdm_desc="Sampling sparse structure (proj)")
        z_s = z_s.samples
        if self.low_vram:
            flow_model.cpu()
        decoder = self.models['sparse_structure_decoder']
        if self.low_vram:
            decoder.to(self.device)
        decoded = decoder(z_s) > 0
        if self.low_vram:
            decoder.cpu()
        if resolution != decoded.shape[2]:
            ratio = decoded.shape[2] // resolution
            decoded = torch.nn.functional.max_pool3d(decoded.float(), ratio, ratio, 0) > 0.5
        return torch.argwhere(decoded)[:, [0, 2, 3, 4]].int()

    def _denormalize(self, slat, which):
        norm = getattr(self, f'{which}_slat_normalization')
        std = torch.tensor(norm['std'])[None].to(slat.device)
        mean = torch.tensor(norm['mean'])[None].to(slat.device)
        return slat * std + mean

    def sample_shape_slat(self, cond: dict, flow_model, coords: torch.Tensor,
                          sampler_params: dict = {}):
        feats = torch.randn(coords.shape[0], flow_model.in_channels).to(self.device)
        noise = SparseTensor(feats=feats, coords=coords)
        sampler_params = {**self.shape_slat_sampler_params, **sampler_params}
        if self.low_vram:
            flow_model.to(self.device)
        slat = self.shape_slat_sampler.sample(flow_model, noise, **cond, **sampler_params,
                                              verbose=True,
                                              tqdm_desc="Sampling shape SLat (proj)").samples
        if self.low_vram:
            flow_model.cpu()
        return self._denormalize(slat, 'shape')

    def decode_shape_slat(self, slat, resolution: int):
        self.models['shape_slat_decoder'].set_resolution(resolution)
        if self.low_vram:
            self.models['shape_slat_decoder'].to(self.device)
            self.models['shape_slat_decoder'].low_vram = True
        ret = self.models['shape_slat_decoder'](slat, return_subs=True)
        if self.low_vram:
            self.models['shape_slat_decoder'].cpu()
            self.models['shape_slat_decoder'].low_vram = False
        return ret

    def sample_tex_slat(self, cond: dict, flow_model, shape_slat, sampler_params: dict = {}):
        norm = self.shape_slat_normalization
        std = torch.tensor(norm['std'])[None].to(shape_slat.device)
        mean = torch.tensor(norm['mean'])[None].to(shape_slat.device)
        shape_slat = (shape_slat - mean) / std
        in_channels = flow_model.in_channels
        feats = torch.randn(shape_slat.coords.shape[0], in_channels - shape_slat.feats.shape[1])
        noise = shape_slat.replace(feats=feats.to(self.device))
        sampler_params = {**self.tex_slat_sampler_params, **sampler_params}
        if self.low_vram:
            flow_model.to(self.device)
        slat = self.tex_slat_sampler.sample(flow_model, noise, concat_cond=shape_slat, **cond,
                                            **sampler_params,
                                            verbose=True,
                                            tqdm_desc="Sampling texture SLat (proj)").samples
        if self.low_vram:
            flow_model.cpu()
        return self._denormalize(slat, 'tex')

    def decode_tex_slat(self, slat, subs):
        if self.low_vram:
            self.models['tex_slat_decoder'].to(self.device)
        ret = self.models['tex_slat_decoder'](slat, guide_subs=subs) * 0.5 + 0.5
        if self.low_vram:
            self.models['tex_slat_decoder'].cpu()
        return ret

    @torch.no_grad()
    def decode_latent(self, shape_slat, tex_slat, resolution: int):
        meshes, subs = self.decode_shape_slat(shape_slat, resolution)
        tex_voxels = self.decode_tex_slat(tex_slat, subs)
        out_mesh = []
        for m, v in zip(meshes, tex_voxels, strict=True):
            mesh = MeshWithVoxel(m.vertices, m.faces, origin=[-0.5, -0.5, -0.5],
                                 voxel_size=1 / resolution, coords=v.coords[:, 1:], attrs=v.feats,
                                 voxel_shape=torch.Size([*v.shape, *v.spatial_shape]),
                                 layout=self.pbr_attr_layout)
            for attr in ('fdg_coords', 'fdg_dual_vertices', 'fdg_intersected', 'fdg_split_weight'):
                setattr(mesh, attr, getattr(m, attr, None))
            out_mesh.append(mesh)
        return out_mesh

    @torch.no_grad()
    def run(self, image: Image.Image, camera_params: dict, num_samples: int = 1, seed: int = 42,
            sparse_structure_sampler_params: dict = {}, shape_slat_sampler_params: dict = {},
            tex_slat_sampler_params: dict = {}, preprocess_image: bool = True,
            return_latent: bool = False,
            pipeline_type: Optional[str] = None, max_num_tokens: int = 49152):
        pipeline_type = pipeline_type or self.default_pipeline_type
        if pipeline_type in ('1024_cascade', '1536_cascade'):
            for name in ('shape_slat_flow_model_512', 'shape_slat_flow_model_1024',
                         'tex_slat_flow_model_1024'):
                assert name in self.models, f"No {name} found."
            hr_resolution = 1024 if pipeline_type == '1024_cascade' else 1536
        else:
            raise ValueError(f"Invalid pipeline type for Pixal3D proj mode: {pipeline_type}. "
                             f"Supported: '1024_cascade', '1536_cascade'.")
        for attr in ('image_cond_model_ss', 'image_cond_model_shape_512',
                     'image_cond_model_shape_1024',
                     'image_cond_model_tex_1024'):
            assert getattr(self, attr) is not None, f"{attr} not set."
        camera_angle_x = camera_params['camera_angle_x']
        distance = camera_params['distance']
        mesh_scale = camera_params.get('mesh_scale', 1.0)
        cam = dict(camera_angle_x=camera_angle_x, distance=distance, mesh_scale=mesh_scale)

        if preprocess_image:
            image = self.preprocess_image(image)
        torch.manual_seed(seed)

        # Stage 1: sparse structure
        cond_ss = self.get_proj_cond_ss([image], **cam)
        coords = self.sample_sparse_structure(cond_ss, 32, num_samples,
                                              sparse_structure_sampler_params)
        del cond_ss

        # Stage 2: shape, low resolution (512)
        cond_shape_lr = self.get_proj_cond_shape(self.image_cond_model_shape_512, [image], coords,
                                                 **cam)
        lr_slat = self.sample_shape_slat(cond_shape_lr, self.models['shape_slat_flow_model_512'],
                                         coords, shape_slat_sampler_params)
        del cond_shape_lr

        # Stage 3a (inline): upsample LR -> HR coordinates with the shape decoder
        if self.low_vram:
            self.models['shape_slat_decoder'].to(self.device)
            self.models['shape_slat_decoder'].low_vram = True
        hr_coords = self.models['shape_slat_decoder'].upsample(lr_slat, upsample_times=4)
        if self.low_vram:
            self.models['shape_slat_decoder'].cpu()
            self.models['shape_slat_decoder'].low_vram = False
        lr_resolution = 512
        actual_hr_resolution = hr_resolution
        while True:
            grid_res = actual_hr_resolution // 16
            scaled = (hr_coords[:, 1:] + 0.5) / lr_resolution * (grid_res - 1)
            quant = torch.cat([hr_coords[:, :1], scaled.round().int()], dim=1)
            hr_coords_unique = quant.unique(dim=0)
            if hr_coords_unique.shape[0] < max_num_tokens or actual_hr_resolution == 1024:
                break
            actual_hr_resolution -= 128
        actual_grid_res = actual_hr_resolution // 16
        del lr_slat, hr_coords, quant

        # Stage 3b (inline): shape, high resolution
        cond_shape_hr = self.get_proj_cond_shape(self.image_cond_model_shape_1024, [image],
                                                 hr_coords_unique,
                                                 grid_resolution_override=actual_grid_res, **cam)
        noise_hr = SparseTensor(
            feats=torch.randn(hr_coords_unique.shape[0],
                              self.models['shape_slat_flow_model_1024'].in_channels).to(self.device),
            coords=hr_coords_unique)
        sampler_params_hr = {**self.shape_slat_sampler_params, **shape_slat_sampler_params}
        flow_model_hr = self.models['shape_slat_flow_model_1024']
        if self.low_vram:
            flow_model_hr.to(self.device)
        hr_slat = self.shape_slat_sampler.sample(flow_model_hr, noise_hr, **cond_shape_hr,
                                                 **sampler_params_hr,
                                                 verbose=True,
                                                 tqdm_desc=f"Sampling HR shape SLat (proj, "
                                                           f"{actual_hr_resolution})"
                                                 ).samples
        if self.low_vram:
            flow_model_hr.cpu()
        shape_slat = self._denormalize(hr_slat, 'shape')
        del cond_shape_hr, noise_hr, hr_slat, hr_coords_unique

        # Stage 4: texture
        cond_tex = self.get_proj_cond_shape(self.image_cond_model_tex_1024, [image],
                                            shape_slat.coords,
                                            grid_resolution_override=actual_hr_resolution // 16,
                                            **cam)
        tex_slat = self.sample_tex_slat(cond_tex, self.models['tex_slat_flow_model_1024'],
                                        shape_slat,
                                        tex_slat_sampler_params)
        del cond_tex

        # Stage 5: decode
        res = actual_hr_resolution
        out_mesh = self.decode_latent(shape_slat, tex_slat, res)
        if return_latent:
            return out_mesh, (shape_slat, tex_slat, res)
        return out_mesh
