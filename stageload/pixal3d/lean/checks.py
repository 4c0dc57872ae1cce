"""Preconditions of the lean conditioning (:mod:`.conditioning`), checked on the live objects,
and the byte estimates its ``working_memory`` events carry.

Each ``*_problem`` function returns None when the lean path may run, else one line saying what
does not hold (it becomes a ``warning`` event and the port's path runs). What is checked, from
NAF and the port as read (see :mod:`.conditioning`): NAF's layer names (``image_encoder``,
``query_encoder``, ``key_encoder``, ``upsampler``); the upsampler is a ``CrossAttention`` with
``num_heads`` and an odd ``kernel_size`` whose ``_resize`` repeats each low-resolution value
over its ``r x r`` block with heads split ``b (n d) h w`` (probed: that is what
``nearest-exact`` does at an integer ratio, and all the lean path relies on); the output an
integer multiple of the input, the kernel fitting the input grid; the projection's module has
``sample_features`` (the lean path reads the port's sample coordinates there) and its
``ProjGrid`` is built as ``ProjGrid(grid_resolution=, image_resolution=)``; one image, batch 0.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

import torch

NAF_LAYERS = ("image_encoder", "query_encoder", "key_encoder", "upsampler")
PASS_ARGS = ("camera_angle_x", "distance", "mesh_scale", "grid_resolution_override")
#: The port's diagnostic switches that move NAF's output between devices
#: (``image_conditioned_proj.py`` at 809cf5f5): the sampled pass then makes the map whole.
DEVICE_SWITCHES = ("PIXAL3D_NAF_DEVICE", "PIXAL3D_PROJ_GRID_DEVICE")
#: The port's ``_torch_na2d`` gathers this many queries' neighbourhoods at a time.
PORT_QUERY_CHUNK = 2048


def _kernel(upsampler):
    ks = getattr(upsampler, "kernel_size", None)
    ks = (ks, ks) if isinstance(ks, int) else ks
    if not (isinstance(ks, (tuple, list)) and len(ks) == 2
            and all(isinstance(k, int) and k > 0 and k % 2 for k in ks)):
        return None
    return tuple(ks)


def upsampler_problem(upsampler) -> Optional[str]:
    """Why ``upsampler`` is not the NAF ``CrossAttention`` the banded computation reproduces."""
    if type(upsampler).__name__ != "CrossAttention":
        return f"the upsampler is a {type(upsampler).__name__}, not NAF's CrossAttention"
    heads = getattr(upsampler, "num_heads", None)
    if not isinstance(heads, int) or heads < 1:
        return f"CrossAttention.num_heads is {heads!r}, not a positive int"
    if _kernel(upsampler) is None:
        return f"CrossAttention.kernel_size is {getattr(upsampler, 'kernel_size', None)!r}, " \
               f"not two odd ints"
    if not callable(getattr(upsampler, "_resize", None)):
        return "CrossAttention has no _resize (the keys' and values' resize)"
    low = torch.arange(heads * 2 * 3 * 2, dtype=torch.float32).reshape(1, heads * 2, 3, 2)
    try:
        got = upsampler._resize(low, size=(6, 4), dtype=torch.float32)
    except Exception as exc:  # any failure of the probe means: not the resize we know
        return f"CrossAttention._resize failed on a probe: {exc}"
    ys, xs = torch.arange(6) // 2, torch.arange(4) // 2
    want = low.reshape(1, heads, 2, 3, 2)[:, :, :, ys][..., xs].permute(0, 3, 4, 1, 2)
    if tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
        return "CrossAttention._resize does not repeat each value over its block with heads " \
               "split as b (n d) h w (nearest-exact at an integer ratio)"
    return None


def naf_problem(naf) -> Optional[str]:
    """Why ``naf`` is not a NAF the lean pass can take apart."""
    missing = [name for name in NAF_LAYERS if not callable(getattr(naf, name, None))]
    if missing:
        return f"NAF has no {', '.join(missing)}"
    return upsampler_problem(naf.upsampler)


def shape_problem(q, k, v, kernel) -> Optional[str]:
    """Why one upsampler call's shapes cannot be computed in bands."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "q, k and v must be [B, C, H, W]"
    (hq, wq), (hk, wk) = q.shape[-2:], k.shape[-2:]
    ks = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
    if hq % hk or wq % wk:
        return f"output {hq}x{wq} is not an integer multiple of the input {hk}x{wk}"
    if v.shape[-2:] != k.shape[-2:] or q.shape[1] != k.shape[1]:
        return "values' grid differs from the keys', or keys' width from the queries'"
    if ks[0] > hk or ks[1] > wk:
        return f"kernel {ks[0]}x{ks[1]} does not fit the {hk}x{wk} input"
    return None


def port_upsample_bytes(q, k, v) -> int:
    """Bytes the port's NAF call holds beyond its inputs and one output, estimated from the
    tensors ``_torch_na2d`` makes: resized k and v, flat copies of q, k and v, the second
    (contiguous) output, one chunk's gathered neighbourhoods and scores."""
    e = q.element_size()
    hw, cq, cv = q.shape[-2] * q.shape[-1], q.shape[1], v.shape[1]
    ks = 81
    return e * (hw * (2 * cq + 2 * cv + cq + cv) + PORT_QUERY_CHUNK * ks * (cq + cv + 1))


def sample_points(grid, map_shape, camera_angle_x, distance, mesh_scale, transform_matrix):
    """The sample coordinates ``[B, K, 2]`` (in [-1, 1]) the port's ``ProjGrid.forward`` hands
    to its module's ``sample_features`` for ``grid``'s points, read by running that forward on
    a 2x2 map with ``sample_features`` recording its argument for the call."""
    module = sys.modules[type(grid).__module__]
    original = module.sample_features
    seen = []

    def record(fmap, queries_ndc):
        seen.append(queries_ndc)
        return fmap.new_zeros(fmap.shape[0], fmap.shape[1], queries_ndc.shape[1])

    module.sample_features = record
    try:
        probe = torch.zeros(map_shape[0], 1, 2, 2, device=grid.grid_points.device)
        grid(probe, camera_angle_x, distance, mesh_scale, transform_matrix, BHWC=False)
    finally:
        module.sample_features = original
    return seen[0]


def device_switches(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """``NAME=value`` for each of :data:`DEVICE_SWITCHES` set (not empty) in ``environ``
    (default ``os.environ``), as the port reads them (stripped)."""
    environ = os.environ if environ is None else environ
    return [f"{name}={environ[name].strip()}" for name in DEVICE_SWITCHES
            if environ.get(name, "").strip()]


def pipeline_problem(pipeline) -> Optional[str]:
    """Why ``pipeline`` cannot take the lean conditioning at all."""
    if not callable(getattr(pipeline, "get_proj_cond_shape", None)):
        return "the pipeline has no get_proj_cond_shape"
    if getattr(sys.modules.get(type(pipeline).__module__), "SparseTensor", None) is None:
        return f"{type(pipeline).__module__} has no SparseTensor"
    return None


def pipeline_pass_problem(pipeline) -> Optional[str]:
    """Why the pipeline's own state does not let a lean pass run as the port's would: the
    pass reads ``pipeline.device`` (where the port puts the pass's tensors) and
    ``pipeline.low_vram`` (whether it moves the extractor there and back)."""
    device = getattr(pipeline, "device", None)
    if not isinstance(device, (torch.device, str)):
        return f"pipeline.device is {type(device).__name__}, not a device"
    if not hasattr(pipeline, "low_vram"):
        return "the pipeline has no low_vram (whether the port moves the extractor to its " \
               "device for the pass)"
    if not isinstance(pipeline.low_vram, bool):
        return "pipeline.low_vram is not True or False"
    return None


def _pair(value) -> Optional[tuple]:
    """``value`` as (int, int) of positive ints, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        return tuple(value)
    return None


def naf_sizes(extractor) -> tuple[Optional[tuple], Optional[int]]:
    """The extractor's NAF output size ``naf_target_size`` (h, w) and its patch grid side
    ``patch_number``, each None when absent or not positive whole numbers."""
    patches = getattr(extractor, "patch_number", None)
    ok = isinstance(patches, int) and not isinstance(patches, bool) and patches > 0
    return _pair(getattr(extractor, "naf_target_size", None)), patches if ok else None


def banded_problem(extractor) -> Optional[str]:
    """Why NAF's upsampling cannot be computed from the low-resolution keys and values for this
    extractor at all — in bands or at chosen pixels (None: it can, or the extractor does not
    upsample with NAF). Checks NAF (when loaded) and the output's ratio to the patch grid."""
    if not getattr(extractor, "use_naf_upsample", False):
        return None
    naf = getattr(extractor, "naf_model", None)
    if naf is not None:
        problem = naf_problem(naf)
        if problem:
            return problem
    target, patches = naf_sizes(extractor)
    if target is None or patches is None:
        return "the extractor's naf_target_size or patch_number is missing or not whole numbers"
    if target[0] % patches or target[1] % patches:
        return f"NAF output {target} is not an integer multiple of {patches}x{patches}"
    if naf is not None and max(_kernel(naf.upsampler)) > patches:
        return f"NAF's kernel does not fit the {patches}x{patches} patch grid"
    return None


def sampled_problem(extractor) -> Optional[str]:
    """Why the projection cannot be sampled at the active voxels only (the port's
    ``ProjGrid`` restricted to their points, its sample coordinates read from the module's
    ``sample_features``)."""
    resolution = getattr(extractor, "grid_resolution", None)
    if not isinstance(resolution, int) or isinstance(resolution, bool) or resolution < 1:
        return "the extractor's grid_resolution is not a whole number"
    grid = getattr(extractor, "proj_grid", None)
    if grid is None or not hasattr(grid, "grid_points") or not hasattr(grid,
                                                                       "image_resolution"):
        return "the extractor has no proj_grid with grid_points and image_resolution"
    module = sys.modules.get(type(grid).__module__)
    if not callable(getattr(module, "sample_features", None)):
        return f"{type(grid).__module__} has no sample_features"
    try:
        type(grid)(grid_resolution=2, image_resolution=grid.image_resolution)
    except Exception as exc:  # the port builds it so in get_proj_cond_shape; we must too
        return f"{type(grid).__name__}(grid_resolution=, image_resolution=) failed: {exc}"
    return None


def pass_problem(pipeline, extractor, image, coords, kwargs) -> Optional[str]:
    """Why this ``get_proj_cond_shape`` call cannot run the sampled pass (its NAF checked
    apart: :func:`banded_problem`)."""
    unknown = sorted(set(kwargs) - set(PASS_ARGS))
    if unknown:
        return f"get_proj_cond_shape was given {', '.join(unknown)}, which it does not know"
    if not isinstance(image, list) or len(image) != 1:
        count = len(image) if isinstance(image, (list, tuple)) else "a tensor of"
        return f"the sampled pass takes one image, this call has {count} images"
    if coords.dim() != 2 or coords.shape[1] != 4 or bool((coords[:, 0] != 0).any()):
        return "coords must be [N, 4] with batch index 0"
    return pipeline_pass_problem(pipeline) or sampled_problem(extractor)


def port_pass_bytes(extractor, resolution: int, coords) -> int:
    """Bytes the port's pass holds at its peak beyond what the lean one holds, estimated from
    the port's tensors in the order the port makes and frees them
    (``image_conditioned_proj.py`` at 809cf5f5, ``forward``):

    1. the low-resolution projection over the whole grid, ``[1, R³, C]``, made first and kept;
    2. NAF: its output map ``[1, C, H, W]`` and the attention's temporaries
       (:func:`port_upsample_bytes`), freed when NAF returns;
    3. the high-resolution projection over the whole grid and the concatenation (two more
       ``[1, R³, C]`` and one ``[1, R³, 2C]``) while the output map is held.

    The peak is the larger of (1 + 2) and (1 + 3): NAF's temporaries are gone before the
    grid's features exist (≈ 20.8 GiB for the texture pass at 1024² against ≈ 8 GiB after).
    The lean pass holds the active voxels' ``[N, 2C]`` rows, taken off. Without NAF: the whole
    grid's ``[1, R³, C]`` less the kept rows."""
    c = int(getattr(extractor, "embed_dim", 0) or 0)
    grid = resolution ** 3
    kept = 4 * int(coords.shape[0]) * c
    naf = getattr(extractor, "naf_model", None)
    target, _ = naf_sizes(extractor)
    if not getattr(extractor, "use_naf_upsample", False) or naf is None or target is None:
        return 4 * grid * c - kept
    h, w = target
    cq = int(getattr(getattr(naf, "image_encoder", None), "out_channels", c) or c)
    q = torch.empty(1, cq, h, w, device="meta")
    v = torch.empty(1, c, 1, 1, device="meta")
    low, naf_map = 4 * grid * c, 4 * c * h * w
    during_naf = low + naf_map + port_upsample_bytes(q, q, v)
    after_naf = low + naf_map + 4 * grid * c * 3
    return max(during_naf, after_naf) - 2 * kept
