"""Stand-in of Pixal3D-mac's ``generate_mps.py``: the same module-level names and the same order
of work in ``main()`` (init_pipeline -> preprocess_image -> camera (MoGe-2 or --fov) ->
manual_seed -> pipeline.run(..., preprocess_image=False, return_latent=True) -> export),
with a small textured-GLB export (trimesh) in place of the port's o_voxel / Blender bakers.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MOGE_MODEL_NAME = "Ruicheng/moge-2-vitl"
MODEL_PATH = "TencentARC/Pixal3D"
np = None
torch = None
Image = None
Pixal3DImageTo3DPipeline = None

IMAGE_COND_CONFIGS = {
    "ss": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 512, "grid_resolution": 16},
    "shape_512": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 512,
                  "grid_resolution": 32, "use_naf_upsample": True, "naf_target_size": 128},
    "shape_1024": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 1024,
                   "grid_resolution": 64, "use_naf_upsample": True, "naf_target_size": 128},
    "tex_1024": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 1024,
                 "grid_resolution": 64, "use_naf_upsample": True, "naf_target_size": 256},
}

EXPORT_ROTATION_ROWS = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, 0], [0, 0, 0, 1]]
EXPORT_ROTATION = None


def load_runtime_deps():
    global np, torch, Image, Pixal3DImageTo3DPipeline, EXPORT_ROTATION
    import numpy as _np
    import torch as _torch
    from PIL import Image as _Image
    from pixal3d.pipelines import Pixal3DImageTo3DPipeline as _P
    np, torch, Image, Pixal3DImageTo3DPipeline = _np, _torch, _Image, _P
    EXPORT_ROTATION = np.array(EXPORT_ROTATION_ROWS, dtype=np.float64)


def resolve_device(requested: str):
    if requested == "mps":
        if not torch.backends.mps.is_available():
            raise SystemExit("MPS was requested but is not available. Re-run with --device cpu.")
        return torch.device("mps")
    return torch.device("cpu")


def maybe_empty_cache(device):
    if device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.empty_cache()


def build_image_cond_model(config: dict, device):
    from pixal3d.trainers.flow_matching.mixins.image_conditioned_proj import DinoV3ProjFeatureExtractor
    model = DinoV3ProjFeatureExtractor(**config)
    model.eval()
    model.to(device)
    return model


def load_moge_model(device, model_name: str = MOGE_MODEL_NAME):
    from moge.model.v2 import MoGeModel
    model = MoGeModel.from_pretrained(model_name).to(device)
    model.eval()
    return model


def init_pipeline(model_path: str, device):
    pipeline = Pixal3DImageTo3DPipeline.from_pretrained(model_path)
    pipeline.to(device)
    pipeline.image_cond_model_ss = build_image_cond_model(IMAGE_COND_CONFIGS["ss"], device)
    pipeline.image_cond_model_shape_512 = build_image_cond_model(IMAGE_COND_CONFIGS["shape_512"], device)
    pipeline.image_cond_model_shape_1024 = build_image_cond_model(IMAGE_COND_CONFIGS["shape_1024"], device)
    pipeline.image_cond_model_tex_1024 = build_image_cond_model(IMAGE_COND_CONFIGS["tex_1024"], device)
    for attr in ("image_cond_model_ss", "image_cond_model_shape_512", "image_cond_model_shape_1024",
                 "image_cond_model_tex_1024"):
        model = getattr(pipeline, attr)
        if getattr(model, "use_naf_upsample", False):
            model._load_naf()
    return pipeline


def compute_f_pixels(camera_angle_x: float, resolution: int) -> float:
    return float(16.0 / math.tan(camera_angle_x / 2.0) * resolution / 32.0)


def distance_from_fov(camera_angle_x, grid_point, target_point, mesh_scale, image_resolution):
    f_pixels = compute_f_pixels(camera_angle_x, image_resolution)
    xw = float(grid_point[0]) / mesh_scale / 2
    x_ndc = float(target_point[0]) - image_resolution / 2.0
    return {"distance_from_x": float(f_pixels * xw / x_ndc), "f_pixels": f_pixels}


def get_camera_params_wild_moge(image_path, moge_model, device, mesh_scale=1.0, extend_pixel=0,
                                image_resolution=512):
    pil_image = Image.open(image_path).convert("RGB")
    width, _ = pil_image.size
    tensor = torch.from_numpy(np.array(pil_image).astype(np.float32) / 255.0).permute(2, 0, 1).to(device)
    with torch.no_grad():
        output = moge_model.infer(tensor)
    intrinsics = output["intrinsics"].squeeze().cpu().numpy()
    fx = intrinsics[0, 0] * width
    camera_angle_x = 2 * math.atan(width / (2 * fx))
    distance = distance_from_fov(camera_angle_x, torch.tensor([-1.0, 0.0, 0.0]),
                                 torch.tensor([0 - extend_pixel, image_resolution - 1 + extend_pixel]),
                                 mesh_scale, image_resolution)["distance_from_x"]
    return {"camera_angle_x": camera_angle_x, "distance": distance, "mesh_scale": mesh_scale}


def sampler_overrides(args, stage: str) -> dict:
    params = {}
    if args.steps is not None:
        params["steps"] = args.steps
    return params


def output_glb_path(output: str) -> Path:
    path = Path(output)
    return path if path.suffix.lower() == ".glb" else path.with_suffix(".glb")


def rotated_vertices(vertices):
    return vertices @ EXPORT_ROTATION[:3, :3].T + EXPORT_ROTATION[:3, 3]


def export_geometry_only(vertices, faces, glb_path: Path):
    import trimesh
    out_faces = faces[:, [0, 2, 1]] if np.linalg.det(EXPORT_ROTATION[:3, :3]) < 0 else faces
    trimesh.Trimesh(vertices=rotated_vertices(vertices), faces=out_faces, process=False).export(str(glb_path))


def try_export_native_o_voxel_glb(mesh, resolution, vertices, faces, glb_path, args) -> bool:
    """The real port bakes through a native o_voxel interpreter; the stand-in has none."""
    print("[Export] Native o_voxel Python not found; using fallback baker.")
    return False


def export_fallback_texture_glb(mesh, vertices, faces, glb_path: Path, args):
    """Front-projection bake: texel (u, v) takes the base colour of the front-most voxel in its
    column; UVs are the vertices' x, y in the unit box. Writes a GLB with a PBR base colour."""
    import trimesh
    res = int(round(1.0 / float(mesh.voxel_size))) // 16
    coords = mesh.coords.detach().cpu().long().numpy().clip(0, res - 1)
    colour = mesh.attrs.detach().cpu().float().numpy()[:, 0:3]
    grid = np.zeros((res, res, 3), dtype=np.float32)
    depth = np.full((res, res), -1, dtype=np.int64)
    np.maximum.at(depth, (coords[:, 0], coords[:, 1]), coords[:, 2])
    front = coords[:, 2] == depth[coords[:, 0], coords[:, 1]]
    grid[coords[front, 0], coords[front, 1]] = colour[front]
    image = (np.clip(grid.transpose(1, 0, 2)[::-1], 0, 1) * 255).astype(np.uint8)
    texture = Image.fromarray(image).resize((args.texture_size, args.texture_size), Image.Resampling.NEAREST)
    uv = np.clip(vertices[:, :2] + 0.5, 0, 1)
    out_faces = faces[:, [0, 2, 1]] if np.linalg.det(EXPORT_ROTATION[:3, :3]) < 0 else faces
    material = trimesh.visual.material.PBRMaterial(baseColorTexture=texture, metallicFactor=0.0, roughnessFactor=1.0)
    visual = trimesh.visual.TextureVisuals(uv=uv, material=material)
    tm = trimesh.Trimesh(vertices=rotated_vertices(vertices), faces=out_faces, visual=visual, process=False)
    tm.export(str(glb_path))
    print(f"[Export] Textured GLB saved to {glb_path}")


def parse_args():
    parser = argparse.ArgumentParser(description="Stand-in Pixal3D image-to-GLB")
    parser.add_argument("image", nargs="?", default=None)
    parser.add_argument("--output", default="output_3d")
    parser.add_argument("--model-path", default=MODEL_PATH)
    parser.add_argument("--device", choices=["mps", "cpu"], default="mps")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--fov", type=float, default=-1.0)
    parser.add_argument("--pipeline-type", choices=["1024_cascade", "1536_cascade"], default="1024_cascade")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--max-num-tokens", type=int, default=49152)
    parser.add_argument("--texture-size", type=int, default=2048, choices=[512, 1024, 2048, 4096])
    parser.add_argument("--no-texture", action="store_true")
    parser.add_argument("--force-texture-fallback", action="store_true")
    parser.add_argument("--mesh-scale", type=float, default=1.0)
    parser.add_argument("--extend-pixel", type=int, default=0)
    parser.add_argument("--image-resolution", type=int, default=512)
    return parser.parse_args()


def main():
    args = parse_args()
    glb_path = output_glb_path(args.output)
    glb_path.parent.mkdir(parents=True, exist_ok=True)
    load_runtime_deps()
    device = resolve_device(args.device)
    t0 = time.time()
    pipeline = init_pipeline(args.model_path, device)
    image_preprocessed = pipeline.preprocess_image(Image.open(args.image))
    if args.fov > 0:
        distance = distance_from_fov(args.fov, torch.tensor([-1.0, 0.0, 0.0]),
                                     torch.tensor([0 - args.extend_pixel, args.image_resolution - 1 + args.extend_pixel]),
                                     args.mesh_scale, args.image_resolution)["distance_from_x"]
        camera_params = {"camera_angle_x": float(args.fov), "distance": distance, "mesh_scale": args.mesh_scale}
    else:
        moge_model = load_moge_model(device)
        tmp = tempfile.NamedTemporaryFile(delete=False, suffix=".png", dir=str(glb_path.parent))
        tmp.close()
        try:
            image_preprocessed.save(tmp.name)
            camera_params = get_camera_params_wild_moge(Path(tmp.name), moge_model, device=device,
                                                        mesh_scale=args.mesh_scale, extend_pixel=args.extend_pixel,
                                                        image_resolution=args.image_resolution)
        finally:
            os.unlink(tmp.name)
        del moge_model
        maybe_empty_cache(device)
    torch.manual_seed(args.seed)
    mesh_list, (shape_slat, tex_slat, resolution) = pipeline.run(
        image_preprocessed, camera_params=camera_params, seed=args.seed,
        sparse_structure_sampler_params=sampler_overrides(args, "ss"),
        shape_slat_sampler_params=sampler_overrides(args, "shape"),
        tex_slat_sampler_params=sampler_overrides(args, "tex"),
        preprocess_image=False, return_latent=True, pipeline_type=args.pipeline_type,
        max_num_tokens=args.max_num_tokens)
    mesh = mesh_list[0]
    vertices = mesh.vertices.detach().cpu().numpy()
    faces = mesh.faces.detach().cpu().numpy()
    if args.no_texture:
        export_geometry_only(vertices, faces, glb_path)
    elif not try_export_native_o_voxel_glb(mesh, resolution, vertices, faces, glb_path, args):
        export_fallback_texture_glb(mesh, vertices, faces, glb_path, args)
    print(f"[Done] GLB saved to {glb_path} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
