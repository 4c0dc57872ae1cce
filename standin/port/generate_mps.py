"""Stand-in of Pixal3D-mac's ``generate_mps.py`` as of commit 0be9e69a (read with the search
tools; no code copied): the same module-level names and signatures, and the same control flow.

``main()``: ``parse_args`` -> ``_configure_fdg_environment`` (the FDG partial-quad flag that
``pixal3d/utils/mesh_extract.py`` reads from the environment) -> ``load_runtime_deps`` ->
``resolve_device`` -> ``load_pipeline(args, device)`` (``init_pipeline`` + the optional texture
recalibration) -> ``image_to_asset(pipeline, image, args, device, tmp_dir=)`` (preprocess,
camera by MoGe-2 or ``--fov``, ``manual_seed``, ``pipeline.run``, stop with exit status 2 and
the watchdog message on an empty mesh) -> ``save_mesh_checkpoint`` (``--save-mesh``) ->
``asset_to_glb(asset, glb_path, args)`` (``--native-preclean-nme`` / ``PIXAL3D_PRECLEAN_NME``,
then geometry only / native o_voxel export in-process unless ``PIXAL3D_NATIVE_SUBPROCESS=1`` /
the fallback baker). ``init_pipeline`` honours ``PIXAL3D_FP32_MODELS`` and
``PIXAL3D_CPU_MODELS``, and reads ``PIXAL3D_NAF_ANE_REPLACE``/``_WHOLE`` and
``PIXAL3D_NAF_METAL`` (the stand-in has no CoreML/Metal kernels: it says so and goes on, as
the real one does when its helper scripts cannot be imported).

Not mirrored: the fixture-capture and CUDA-substitution harness (``PIXAL3D_DUMP_FIXTURES``,
``PIXAL3D_CUDA_SUBSTITUTE``, ``PIXAL3D_HR_SLAT_INJECT``: flags are parsed, nothing is dumped),
``--flash-sdpa``'s Metal kernel, ``--load-fixture-07`` (``--save-mesh``/``--load-mesh`` are
mirrored: ``save_mesh_checkpoint``/``load_mesh_checkpoint``, the runner's hand-over), and the real
export chain (see ``pixal3d/utils``: the export helper owns its mirror). Export here is a small
trimesh front-projection bake.

Mirrored at real shapes (the only place they run here): ``load_runtime_deps`` binds
``natten.na2d`` (the stand-in ``natten`` package has only CUDA kernels) to natten-mps's compat
kernel for MPS tensors of equal widths and otherwise to the port's pure-PyTorch
``_torch_na2d`` with its flat copies and 2,048-query gathers — the path NAF always takes on a
Mac, its values being wider than its queries.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PIXAL3D_DUMP_FIXTURES = os.environ.get("PIXAL3D_DUMP_FIXTURES", "").strip()
MOGE_MODEL_NAME = "Ruicheng/moge-2-vitl"
MODEL_PATH = "TencentARC/Pixal3D"
np = None
torch = None
Image = None
Pixal3DImageTo3DPipeline = None

IMAGE_COND_CONFIGS = {
    "ss": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 512,
           "grid_resolution": 16},
    "shape_512": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 512,
                  "grid_resolution": 32, "use_naf_upsample": True, "naf_target_size": 64},
    "shape_1024": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 1024,
                   "grid_resolution": 64, "use_naf_upsample": True, "naf_target_size": 128},
    "tex_1024": {"model_name": "camenduru/dinov3-vitl16-pretrain-lvd1689m", "image_size": 1024,
                 "grid_resolution": 64, "use_naf_upsample": True, "naf_target_size": 128},
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
    _bind_na2d()


#: queries whose neighbourhoods ``_torch_na2d`` gathers at a time (the port's value)
_NA2D_QUERY_CHUNK = 2048


def _torch_na2d(query, key, value, kernel_size, dilation=1, scale=None, stride=1, backend=None,
                **kw):
    """The port's pure-PyTorch neighbourhood attention (NATTEN's clamped windows): flat
    ``[B*heads, H*W, D]`` copies of q, k and v, an output of the same layout, then a contiguous
    copy of it back in ``[B, H, W, heads, Dv]``; neighbourhoods gathered for
    ``_NA2D_QUERY_CHUNK`` queries at a time. Value width may differ from the query width."""
    if stride != 1:
        raise NotImplementedError(f"_torch_na2d: stride={stride} not supported")
    kh, kw_ = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    B, H, W, N, Dq = query.shape
    Dv = value.shape[-1]
    scale = Dq ** -0.5 if scale is None else scale
    dev = query.device
    HW, K = H * W, kh * kw_
    rows = torch.arange(H, device=dev).clamp(min=(kh // 2) * dh, max=H - 1 - (kh // 2) * dh)
    cols = torch.arange(W, device=dev).clamp(min=(kw_ // 2) * dw, max=W - 1 - (kw_ // 2) * dw)
    rows = rows[:, None] + dh * (torch.arange(kh, device=dev) - kh // 2)[None, :]
    cols = cols[:, None] + dw * (torch.arange(kw_, device=dev) - kw_ // 2)[None, :]
    neighbours = (rows[:, None, :, None] * W + cols[None, :, None, :]).reshape(HW, K)
    k_flat = key.permute(0, 3, 1, 2, 4).reshape(B * N, HW, Dq)
    v_flat = value.permute(0, 3, 1, 2, 4).reshape(B * N, HW, Dv)
    q_flat = query.permute(0, 3, 1, 2, 4).reshape(B * N, HW, Dq)
    out = torch.empty(B * N, HW, Dv, device=dev, dtype=query.dtype)
    for start in range(0, HW, _NA2D_QUERY_CHUNK):
        end = min(start + _NA2D_QUERY_CHUNK, HW)
        index = neighbours[start:end].reshape(-1)
        k_n = k_flat.index_select(1, index).reshape(B * N, end - start, K, Dq)
        v_n = v_flat.index_select(1, index).reshape(B * N, end - start, K, Dv)
        scores = torch.einsum("bsd,bskd->bsk", q_flat[:, start:end, :], k_n) * scale
        out[:, start:end, :] = torch.einsum("bsk,bskd->bsd", scores.softmax(dim=-1), v_n)
        del k_n, v_n, scores
    return out.reshape(B, N, H, W, Dv).permute(0, 2, 3, 1, 4).contiguous()


def _bind_na2d():
    """Bind ``natten.na2d`` (whose CUDA kernels the Mac lacks) before NAF is loaded: MPS
    tensors of equal q/k/v shapes go to natten-mps's compat kernel when it is installed; every
    other call (NAF's values are wider than its queries, and any CPU call) to
    :func:`_torch_na2d`."""
    import natten
    try:
        from natten_mps.compat.v020 import na2d as compat_na2d
    except ImportError:
        compat_na2d = None

    def na2d(query, key, value, kernel_size, dilation=1, scale=None, stride=1, backend=None,
             **kw):
        if (compat_na2d is not None and query.device.type == "mps"
                and query.shape == key.shape == value.shape):
            return compat_na2d(query, key, value, kernel_size, stride=stride, dilation=dilation,
                               scale=scale)
        return _torch_na2d(query, key, value, kernel_size, dilation=dilation, scale=scale,
                           stride=stride, backend=backend, **kw)
    natten.na2d = na2d


def resolve_device(requested: str):
    if requested == "mps":
        if not torch.backends.mps.is_available():
            raise SystemExit("MPS was requested but is not available. Re-run with --device cpu.")
        return torch.device("mps")
    return torch.device("cpu")


def maybe_empty_cache(device):
    if device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.empty_cache()


def _install_low_vram_hooks(pipeline, device):
    """Opt-in (``--low-vram``): empty the allocator cache after each sampling/decoding method,
    wrapping the methods on the pipeline instance. Returns the wrapped names."""
    wrapped = []
    for name in ("sample_sparse_structure", "sample_shape_slat", "decode_shape_slat",
                 "sample_tex_slat", "decode_tex_slat"):
        fn = getattr(pipeline, name, None)
        if fn is None or getattr(fn, "_low_vram_wrapped", False):
            continue

        def wrapper(*a, __fn=fn, **k):
            out = __fn(*a, **k)
            maybe_empty_cache(device)
            return out
        wrapper._low_vram_wrapped = True
        setattr(pipeline, name, wrapper)
        wrapped.append(name)
    print(f"[low-vram] empty_cache after stages: {', '.join(wrapped)}", flush=True)
    return wrapped


def build_image_cond_model(config: dict, device):
    from pixal3d.trainers.flow_matching.mixins.image_conditioned_proj import (
        DinoV3ProjFeatureExtractor,
    )
    model = DinoV3ProjFeatureExtractor(**config)
    model.eval()
    model.to(device)
    return model


def load_moge_model(device, model_name: str = MOGE_MODEL_NAME):
    from moge.model.v2 import MoGeModel
    model = MoGeModel.from_pretrained(model_name).to(device)
    model.eval()
    return model


def _install_tex_pbr_recalib(pipeline, recalib_metallic, metallic_mean, metallic_std, sat_boost):
    """Cosmetic override of the decoded texture field (per instance, around decode_tex_slat)."""
    orig = pipeline.decode_tex_slat

    def wrapped(slat, subs, *a, **k):
        out = orig(slat, subs, *a, **k)
        f = out.feats.clone()
        if recalib_metallic:
            m = f[:, 3]
            z = (m - m.mean()) / m.std().clamp_min(1e-6)
            f[:, 3] = (z * metallic_std + metallic_mean).clamp(0, 1)
        if sat_boost != 1.0:
            luma = f[:, 0:3].mean(dim=1, keepdim=True)
            f[:, 0:3] = (luma + (f[:, 0:3] - luma) * sat_boost).clamp(0, 1)
        return out.replace(f)
    pipeline.decode_tex_slat = wrapped
    print(f"[tex-recalib] installed (metallic={recalib_metallic}, sat_boost={sat_boost})",
          flush=True)


def _env_list(name):
    return [n.strip() for n in os.environ.get(name, "").split(",") if n.strip()]


def init_pipeline(model_path: str, device):
    pipeline = Pixal3DImageTo3DPipeline.from_pretrained(model_path)
    pipeline.to(device)
    pipeline.image_cond_model_ss = build_image_cond_model(IMAGE_COND_CONFIGS["ss"], device)
    pipeline.image_cond_model_shape_512 = build_image_cond_model(IMAGE_COND_CONFIGS["shape_512"],
                                                                 device)
    pipeline.image_cond_model_shape_1024 = build_image_cond_model(IMAGE_COND_CONFIGS["shape_1024"],
                                                                  device)
    pipeline.image_cond_model_tex_1024 = build_image_cond_model(IMAGE_COND_CONFIGS["tex_1024"],
                                                                device)
    for attr in ("image_cond_model_ss", "image_cond_model_shape_512", "image_cond_model_shape_1024",
                 "image_cond_model_tex_1024"):
        model = getattr(pipeline, attr)
        if getattr(model, "use_naf_upsample", False):
            model._load_naf()
    for name in ("PIXAL3D_NAF_ANE_REPLACE", "PIXAL3D_NAF_ANE_WHOLE"):
        if _env_list(name):
            print(f"[ane-swap] ERROR: cannot import naf_ane_swap module ({name})", flush=True)
    if os.environ.get("PIXAL3D_NAF_METAL", "").strip() not in ("", "0", "false", "False", "off",
                                                               "OFF"):
        print("[metal-swap] ERROR: cannot import naf_metal_swap", flush=True)
    for name in _env_list("PIXAL3D_FP32_MODELS"):
        sub = pipeline.models.get(name)
        if sub is not None:
            sub.float()
            print(f"  {name}: param dtype -> {next(sub.parameters()).dtype}")
    for name in _env_list("PIXAL3D_CPU_MODELS"):
        sub = pipeline.models.get(name)
        if sub is not None:
            for p in sub.parameters():
                p.data = p.data.cpu()
            print(f"  {name}: device -> cpu")
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
    tensor = torch.from_numpy(np.array(pil_image).astype(np.float32) / 255.0).permute(2, 0,
                                                                                      1).to(device)
    with torch.no_grad():
        output = moge_model.infer(tensor)
    intrinsics = output["intrinsics"].squeeze().cpu().numpy()
    fx = intrinsics[0, 0] * width
    camera_angle_x = 2 * math.atan(width / (2 * fx))
    distance = distance_from_fov(camera_angle_x, torch.tensor([-1.0, 0.0, 0.0]),
                                 torch.tensor([0 - extend_pixel,
                                               image_resolution - 1 + extend_pixel]),
                                 mesh_scale, image_resolution)["distance_from_x"]
    return {"camera_angle_x": camera_angle_x, "distance": distance, "mesh_scale": mesh_scale}


def sampler_overrides(args, stage: str) -> dict:
    params = {}
    if args.steps is not None:
        params["steps"] = args.steps
    for key in ("steps", "guidance_strength", "guidance_rescale", "rescale_t"):
        value = getattr(args, f"{stage}_{key}")
        if value is not None:
            params[key] = value
    return params


def output_glb_path(output: str) -> Path:
    path = Path(output)
    return path if path.suffix.lower() == ".glb" else path.with_suffix(".glb")


def rotated_vertices(vertices):
    return vertices @ EXPORT_ROTATION[:3, :3].T + EXPORT_ROTATION[:3, 3]


def export_geometry_only(vertices, faces, glb_path: Path):
    import trimesh
    out_faces = faces[:, [0, 2, 1]] if np.linalg.det(EXPORT_ROTATION[:3, :3]) < 0 else faces
    trimesh.Trimesh(vertices=rotated_vertices(vertices), faces=out_faces,
                    process=False).export(str(glb_path))


def _configure_fdg_environment(args):
    os.environ["PIXAL3D_FDG_CAP_PARTIAL_QUADS"] = "1" if args.fdg_cap_partial_quads else "0"
    os.environ["PIXAL3D_FDG_VERBOSE"] = "1" if args.fdg_verbose else "0"


def _write_mesh_npz(path, mesh, vertices, faces, resolution: int):
    payload = dict(vertices=vertices.astype(np.float32), faces=faces.astype(np.int32),
                   coords=mesh.coords.detach().cpu().numpy(),
                   attrs=mesh.attrs.detach().cpu().numpy(),
                   origin=mesh.origin.detach().cpu().numpy().astype(np.float32),
                   voxel_size=np.float32(float(mesh.voxel_size)),
                   resolution=np.int32(int(resolution)))
    for attr in ("fdg_coords", "fdg_dual_vertices", "fdg_intersected", "fdg_split_weight"):
        value = getattr(mesh, attr, None)
        if value is not None:
            payload[attr] = value.detach().cpu().numpy()
    np.savez(str(path), **payload)


def _run_native_o_voxel_in_process(cmd: list) -> int:
    """The bridge's ``main(argv)`` in this process: its return value, 127 when the bridge
    module cannot be imported, 1 when it raises."""
    try:
        from pixal3d.utils import o_voxel_native_export
    except ImportError as exc:
        print(f"[Export] In-process o_voxel bridge import failed ({exc}); falling back.")
        return 127
    try:
        rc = o_voxel_native_export.main(cmd[2:])
        return int(rc) if rc is not None else 0
    except SystemExit as exc:
        return int(exc.code) if exc.code is not None else 0
    except Exception as exc:
        print(f"[Export] In-process o_voxel bridge raised: {exc}")
        return 1


def try_export_native_o_voxel_glb(mesh, resolution: int, vertices, faces, glb_path: Path,
                                  args) -> bool:
    """In-process bridge by default; ``PIXAL3D_NATIVE_SUBPROCESS=1`` asks for the old separate
    interpreter, which the stand-in never has (so: fallback baker, as the real one without it)."""
    if args.no_texture or args.force_texture_fallback:
        return False
    if os.environ.get("PIXAL3D_NATIVE_SUBPROCESS", "").strip() == "1":
        print("[Export] Native o_voxel Python not found (PIXAL3D_NATIVE_SUBPROCESS=1); using "
              "fallback baker.")
        return False
    tmp = tempfile.NamedTemporaryFile(delete=False, suffix=".npz", prefix="o_voxel_native_",
                                      dir=str(glb_path.parent))
    native_input = Path(tmp.name)
    tmp.close()
    try:
        _write_mesh_npz(native_input, mesh, vertices, faces, resolution)
        cmd = [sys.executable, str(ROOT / "pixal3d" / "utils" / "o_voxel_native_export.py"),
               "--input", str(native_input), "--output", str(glb_path), "--texture-size",
               str(args.texture_size),
               "--decimation-target", str(max(1, int(args.native_decimation_target))),
               "--remesh-band", str(args.native_remesh_band), "--remesh-project",
               str(args.native_remesh_project),
               "--output-transform", args.native_output_transform]
        if args.native_remesh:
            cmd.append("--remesh")
        import gc
        gc.collect()
        maybe_empty_cache(torch.device("mps") if torch.backends.mps.is_available()
                          else torch.device("cpu"))
        if _run_native_o_voxel_in_process(cmd) != 0:
            return False
        if not glb_path.exists() or glb_path.stat().st_size == 0:
            return False
        print(f"[Export] Textured GLB saved to {glb_path}")
        return True
    finally:
        if os.environ.get("PIXAL3D_KEEP_NATIVE_O_VOXEL_INPUT") != "1":
            native_input.unlink(missing_ok=True)


def export_fallback_texture_glb(mesh, vertices, faces, glb_path: Path, args):
    """Front-projection bake: texel (u, v) takes the base colour of the front-most voxel in its
    column of the declared grid (``1 / voxel_size`` cells a side); UVs are the vertices' x, y
    in the unit box. Writes a GLB with a PBR base colour."""
    import trimesh
    res = int(round(1.0 / float(mesh.voxel_size)))
    coords = mesh.coords.detach().cpu().long().numpy().clip(0, res - 1)
    colour = mesh.attrs.detach().cpu().float().numpy()[:, 0:3]
    grid = np.zeros((res, res, 3), dtype=np.float32)
    depth = np.full((res, res), -1, dtype=np.int64)
    np.maximum.at(depth, (coords[:, 0], coords[:, 1]), coords[:, 2])
    front = coords[:, 2] == depth[coords[:, 0], coords[:, 1]]
    grid[coords[front, 0], coords[front, 1]] = colour[front]
    image = (np.clip(grid.transpose(1, 0, 2)[::-1], 0, 1) * 255).astype(np.uint8)
    texture = Image.fromarray(image).resize((args.texture_size, args.texture_size),
                                            Image.Resampling.NEAREST)
    uv = np.clip(vertices[:, :2] + 0.5, 0, 1)
    out_faces = faces[:, [0, 2, 1]] if np.linalg.det(EXPORT_ROTATION[:3, :3]) < 0 else faces
    material = trimesh.visual.material.PBRMaterial(baseColorTexture=texture, metallicFactor=0.0,
                                                   roughnessFactor=1.0)
    visual = trimesh.visual.TextureVisuals(uv=uv, material=material)
    tm = trimesh.Trimesh(vertices=rotated_vertices(vertices), faces=out_faces, visual=visual,
                         process=False)
    tm.export(str(glb_path))
    print(f"[Export] Textured GLB saved to {glb_path}")




def watchdog_help_message() -> str:
    return ("\nERROR: The decoder produced an empty mesh.\n"
            "On Apple Silicon this is commonly caused by a long-running Metal kernel\n"
            "being interrupted by the macOS GPU watchdog.\n"
            "Workarounds: retry with --steps 1; close display-heavy apps; "
            "SPARSE_CONV_BACKEND=none.\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Stand-in Pixal3D image-to-GLB")
    p.add_argument("image", nargs="?", default=None)
    p.add_argument("--load-fixture-07", type=str, default=None)
    p.add_argument("--output", default="output_3d")
    p.add_argument("--model-path", default=MODEL_PATH)
    p.add_argument("--device", choices=["mps", "cpu"], default="mps")
    p.add_argument("--flash-sdpa", dest="flash_sdpa", action=argparse.BooleanOptionalAction,
                   default=False)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--fov", type=float, default=-1.0)
    p.add_argument("--pipeline-type", choices=["1024_cascade", "1536_cascade"],
                   default="1024_cascade")
    p.add_argument("--steps", type=int, default=None)
    for stage in ("ss", "shape", "tex"):
        p.add_argument(f"--{stage}-steps", type=int, default=None)
        p.add_argument(f"--{stage}-guidance-strength", f"--{stage}-guidance",
                       dest=f"{stage}_guidance_strength",
                       type=float, default=None)
        p.add_argument(f"--{stage}-guidance-rescale", type=float, default=None)
        p.add_argument(f"--{stage}-rescale-t", type=float, default=None)
    p.add_argument("--max-num-tokens", type=int, default=49152)
    p.add_argument("--texture-size", type=int, default=2048, choices=[512, 1024, 2048, 4096])
    p.add_argument("--low-vram", action="store_true")
    p.add_argument("--tex-recalib", dest="tex_recalib", action=argparse.BooleanOptionalAction,
                   default=False)
    p.add_argument("--tex-metallic-mean", type=float, default=0.0)
    p.add_argument("--tex-metallic-std", type=float, default=0.0)
    p.add_argument("--tex-sat-boost", type=float, default=1.0)
    p.add_argument("--fdg-cap-partial-quads", dest="fdg_cap_partial_quads", action="store_true",
                   default=True)
    p.add_argument("--no-fdg-cap-partial-quads", dest="fdg_cap_partial_quads", action="store_false")
    p.add_argument("--fdg-verbose", action="store_true")
    p.add_argument("--reextract-mesh-from-fdg", action="store_true")
    p.add_argument("--no-texture", action="store_true")
    p.add_argument("--force-texture-fallback", action="store_true")
    p.add_argument("--native-decimation-target", type=int, default=1000000)
    p.add_argument("--native-remesh", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--native-remesh-band", type=float, default=1.0)
    p.add_argument("--native-remesh-project", type=float, default=0.9)
    p.add_argument("--native-preclean-nme", action="store_true")
    p.add_argument("--native-output-transform", choices=["pixal3d", "o_voxel", "y_up"],
                   default="pixal3d")
    p.add_argument("--mesh-scale", type=float, default=1.0)
    p.add_argument("--extend-pixel", type=int, default=0)
    p.add_argument("--image-resolution", type=int, default=512)
    p.add_argument("--save-mesh", default=None)
    p.add_argument("--load-mesh", default=None)
    return p.parse_args(argv)


def save_mesh_checkpoint(path, mesh, vertices, faces, resolution):
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_mesh_npz(out, mesh, vertices, faces, resolution)
    print(f"[Checkpoint] Saved mesh to {out}")


@dataclass
class Pixal3DAsset:
    """Hand-off between generation and export (``mesh`` keeps its voxels and fdg_* tensors)."""
    mesh: object
    vertices: object
    faces: object
    resolution: int
    has_voxels: bool
    camera_info: dict | None = None


def _mesh_has_voxels(mesh) -> bool:
    return getattr(mesh, "attrs", None) is not None and getattr(mesh, "coords", None) is not None


class _LoadedMesh:
    """The attributes the export path reads from a mesh, rebuilt from a ``--save-mesh`` file."""
    __slots__ = ("vertices", "faces", "coords", "attrs", "origin", "voxel_size",
                 "fdg_coords", "fdg_dual_vertices", "fdg_intersected", "fdg_split_weight")


def load_mesh_checkpoint(path):
    """Inverse of ``save_mesh_checkpoint``: ``(mesh, vertices, faces, resolution)``."""
    data = np.load(str(path))
    vertices, faces = data["vertices"], data["faces"]
    mesh = _LoadedMesh()
    mesh.vertices, mesh.faces = torch.from_numpy(vertices), torch.from_numpy(faces)
    mesh.coords, mesh.attrs = torch.from_numpy(data["coords"]), torch.from_numpy(data["attrs"])
    mesh.origin = torch.from_numpy(data["origin"])
    mesh.voxel_size = float(data["voxel_size"])
    for attr in ("fdg_coords", "fdg_dual_vertices", "fdg_intersected", "fdg_split_weight"):
        setattr(mesh, attr, torch.from_numpy(data[attr]) if attr in data.files else None)
    return mesh, vertices, faces, int(data["resolution"])


def load_pipeline(args, device=None):
    if device is None:
        device = resolve_device(args.device)
    pipeline = init_pipeline(args.model_path, device)
    if getattr(args, "tex_recalib", False) or getattr(args, "tex_sat_boost", 1.0) != 1.0:
        _install_tex_pbr_recalib(pipeline,
                                 recalib_metallic=bool(getattr(args, "tex_recalib", False)),
                                 metallic_mean=float(getattr(args, "tex_metallic_mean", 0.0002)),
                                 metallic_std=float(getattr(args, "tex_metallic_std", 0.001)),
                                 sat_boost=float(getattr(args, "tex_sat_boost", 1.0)))
    return pipeline


def image_to_asset(pipeline, image, args, device=None, *, tmp_dir=None) -> Pixal3DAsset:
    if device is None:
        device = resolve_device(args.device)
    tmp_dir = Path(tmp_dir) if tmp_dir is not None else Path(tempfile.gettempdir())
    if getattr(args, "low_vram", False):
        _install_low_vram_hooks(pipeline, device)
    image_preprocessed = pipeline.preprocess_image(image)
    if args.fov > 0:
        distance = distance_from_fov(float(args.fov), torch.tensor([-1.0, 0.0, 0.0]),
                                     torch.tensor([0 - args.extend_pixel,
                                                   args.image_resolution - 1 + args.extend_pixel]),
                                     args.mesh_scale, args.image_resolution)["distance_from_x"]
        camera_params = {"camera_angle_x": float(args.fov), "distance": distance,
                         "mesh_scale": args.mesh_scale}
    else:
        moge_model = load_moge_model(device)
        tmp = tempfile.NamedTemporaryFile(delete=False, suffix=".png", dir=str(tmp_dir))
        tmp_path = Path(tmp.name)
        tmp.close()
        try:
            image_preprocessed.save(tmp_path)
            camera_params = get_camera_params_wild_moge(tmp_path, moge_model, device=device,
                                                        mesh_scale=args.mesh_scale,
                                                        extend_pixel=args.extend_pixel,
                                                        image_resolution=args.image_resolution)
        finally:
            tmp_path.unlink(missing_ok=True)
        del moge_model
        maybe_empty_cache(device)
    torch.manual_seed(args.seed)
    try:
        mesh_list, (shape_slat, tex_slat, resolution) = pipeline.run(
            image_preprocessed, camera_params=camera_params, seed=args.seed,
            sparse_structure_sampler_params=sampler_overrides(args, "ss"),
            shape_slat_sampler_params=sampler_overrides(args, "shape"),
            tex_slat_sampler_params=sampler_overrides(args, "tex"),
            preprocess_image=False, return_latent=True, pipeline_type=args.pipeline_type,
            max_num_tokens=args.max_num_tokens)
    except (IndexError, AssertionError) as exc:
        if any(sig in str(exc) for sig in ("non-zero size", "BVH needs at least 8 triangles")):
            print(watchdog_help_message())
            sys.exit(2)
        raise
    mesh = mesh_list[0]
    vertices = mesh.vertices.detach().cpu().numpy()
    faces = mesh.faces.detach().cpu().numpy()
    if vertices.shape[0] == 0 or faces.shape[0] == 0:
        print(watchdog_help_message())
        sys.exit(2)
    return Pixal3DAsset(mesh=mesh, vertices=vertices, faces=faces, resolution=resolution,
                        has_voxels=_mesh_has_voxels(mesh), camera_info=camera_params)


def asset_to_glb(asset, glb_path, args):
    glb_path = Path(glb_path)
    glb_path.parent.mkdir(parents=True, exist_ok=True)
    mesh, vertices, faces = asset.mesh, asset.vertices, asset.faces
    if args.native_preclean_nme or os.environ.get("PIXAL3D_PRECLEAN_NME", "").strip() in ("1",
                                                                                          "true",
                                                                                          "yes"):
        print("[Pre-clean] the stand-in surface has no non-manifold edges; nothing to repair")
    if args.no_texture or not asset.has_voxels:
        export_geometry_only(vertices, faces, glb_path)
    elif not try_export_native_o_voxel_glb(mesh, asset.resolution, vertices, faces, glb_path, args):
        export_fallback_texture_glb(mesh, vertices, faces, glb_path, args)
    if not glb_path.exists() or glb_path.stat().st_size == 0:
        raise SystemExit(f"Export failed: GLB was not written or is empty: {glb_path}")
    return glb_path


def main():
    args = parse_args()
    if getattr(args, "flash_sdpa", False):
        print("[flash-sdpa] mtlflashattn not available; dense attention stays on stock SDPA",
              flush=True)
    _configure_fdg_environment(args)
    glb_path = output_glb_path(args.output)
    glb_path.parent.mkdir(parents=True, exist_ok=True)
    load_runtime_deps()
    device = resolve_device(args.device)
    t0 = time.time()
    if args.load_fixture_07:
        raise SystemExit("the stand-in does not resume from stage-07 fixtures")
    if args.load_mesh:
        ckpt_path = Path(args.load_mesh)
        if not ckpt_path.exists():
            raise SystemExit(f"Mesh checkpoint not found: {ckpt_path}")
        mesh, vertices, faces, resolution = load_mesh_checkpoint(ckpt_path)
        asset = Pixal3DAsset(mesh, vertices, faces, resolution, _mesh_has_voxels(mesh))
    else:
        if not args.image:
            raise SystemExit("An input image is required unless --load-mesh PATH is given")
        input_path = Path(args.image)
        if not input_path.exists():
            raise SystemExit(f"Input image not found: {input_path}")
        pipeline = load_pipeline(args, device)
        image = Image.open(input_path)
        asset = image_to_asset(pipeline, image, args, device, tmp_dir=glb_path.parent)
        if args.save_mesh:
            save_mesh_checkpoint(args.save_mesh, asset.mesh, asset.vertices, asset.faces,
                                 asset.resolution)
    asset_to_glb(asset, glb_path, args)
    print(f"[Done] GLB saved to {glb_path} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
