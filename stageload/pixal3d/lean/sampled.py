"""What a lean conditioning pass hands the port's extractor in place of its ``naf_model`` and
``proj_grid``: NAF's output left uncomputed (:class:`LazyMap`), computed only at the pixels that
the projection's bilinear samples of the active voxels read (:class:`SampledProjGrid`).

Where the port uses NAF's output as a tensor instead of handing it to the projection — its
diagnostic switches ``PIXAL3D_NAF_DEVICE`` / ``PIXAL3D_PROJ_GRID_DEVICE`` move it between
devices (``image_conditioned_proj.py`` at 809cf5f5: ``hr_features.to(...)``, ``.device``), or a
later port reads another attribute or calls a torch function on it — the :class:`LazyMap`
computes the whole map once, in bands of rows (the same arithmetic, so the same numbers), hands
the tensor over and sends one ``warning`` saying what asked for it: the pass then holds NAF's
whole output (4 GiB at 1024² and 1024 channels), not the port's 20 GiB of temporaries."""
from __future__ import annotations

import torch
from torch import nn

from stageload.pixal3d.lean import attention as la
from stageload.pixal3d.lean import checks
from stageload.pixal3d.lean import encoder as lean_encoder
from stageload.pixal3d.lean.report import fallback, whole_map

#: active voxels whose NAF pixels are computed together (4 corners each: at most 16,384 pixels,
#: 64 MiB of 1024-channel values)
VOXEL_CHUNK = 4096


def kernel_of(upsampler) -> tuple:
    """NAF\'s upsampler\'s kernel as (height, width)."""
    ks = upsampler.kernel_size
    return (ks, ks) if isinstance(ks, int) else tuple(ks)


class LazyMap:
    """NAF's output not computed: what :meth:`at` needs to compute it at chosen pixels.
    ``queries``: the query map [B, C, H, W], or a :class:`.encoder.Encoded` that gives
    the queries at pixels. ``sink``: where the ``warning`` goes when the map is made whole
    (:meth:`whole`). ``shape``, ``device`` and ``dtype`` are the map's, as a tensor's; any other
    attribute, and any torch function given a ``LazyMap``, is answered by the whole map."""

    def __init__(self, upsampler, queries, keys, values, size, sink=None):
        self.upsampler, self.queries, self.keys, self.values = upsampler, queries, keys, values
        self.shape = (values.shape[0], values.shape[1]) + tuple(size)
        self.sink = sink
        self._whole = None

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    def at(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """NAF's output at pixels (rows, cols) ``[P]`` each: ``[B, P, C]``."""
        h, w = self.shape[-2:]
        hl, wl = self.keys.shape[-2:]
        rows, cols = rows.to(self.values.device), cols.to(self.values.device)
        if isinstance(self.queries, torch.Tensor):
            q_pixels = self.queries[:, :, rows, cols].transpose(1, 2)
        else:
            q_pixels = self.queries.queries_at(rows, cols).transpose(1, 2)
        cells = (rows // (h // hl)) * wl + cols // (w // wl)
        return la.upsample_at(q_pixels, cells, self.keys, self.values,
                              self.upsampler.num_heads, kernel_of(self.upsampler))

    def whole(self, why: str, band_bytes: int = la.BAND_BYTES) -> torch.Tensor:
        """NAF's whole output ``[B, C, H, W]``, computed once in bands of output rows (each band
        :meth:`at` its pixels: about ``band_bytes`` beyond the map) and kept; the first call
        sends a ``warning`` (``why``: what needed the whole map)."""
        if self._whole is None:
            b, c, h, w = self.shape
            whole_map(self.sink, why, b * c * h * w * self.values.element_size())
            out = self.values.new_empty(b, c, h, w)
            rows = max(1, band_bytes // max(1, 2 * b * c * w * self.values.element_size()))
            cols = torch.arange(w, device=self.values.device)
            for r0 in range(0, h, rows):
                r1 = min(h, r0 + rows)
                ys = torch.arange(r0, r1, device=self.values.device).repeat_interleave(w)
                band = self.at(ys, cols.repeat(r1 - r0))
                out[:, :, r0:r1] = band.transpose(1, 2).reshape(b, c, r1 - r0, w)
            self._whole = out
        return self._whole

    def to(self, *args, **kwargs) -> torch.Tensor:
        """The whole map (:meth:`whole`) moved as ``Tensor.to`` moves it: what the port's device
        switches do with NAF's output."""
        return self.whole(f"the port moves NAF's output (.to{_shown(args, kwargs)})").to(
            *args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("upsampler", "queries", "keys", "values", "shape",
                                             "sink", "_whole"):
            raise AttributeError(name)
        return getattr(self.whole(f"the port reads NAF's output's .{name}"), name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))

        def real(x):
            if isinstance(x, cls):
                return x.whole(f"the port calls {name} on NAF's output")
            if isinstance(x, (list, tuple)):
                return type(x)(real(item) for item in x)
            return x
        return func(*real(tuple(args)), **{k: real(v) for k, v in (kwargs or {}).items()})


def _shown(args, kwargs) -> str:
    shown = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
    return f"({', '.join(shown)})"


class LazyNAF(nn.Module):
    """Stands in for the extractor's ``naf_model`` during a lean pass: NAF's image encoder
    runs in bands (:mod:`.encoder`; as written, with a ``warning``, when it is not the
    encoder read), its keys are pooled band by band, and the upsampler's attention is left to
    the sampled projection (a :class:`LazyMap`)."""

    def __init__(self, naf: nn.Module, sink=None, whole: str | None = None):
        super().__init__()
        self.naf = naf
        self.sink = sink
        self.whole = whole

    def forward(self, image, features, output_size, *args, **kwargs):
        """NAF's output as a :class:`LazyMap`; with ``whole`` (why the port needs the map: its
        device switches move it) the map made whole in bands at once (a tensor)."""
        lazy = self._lazy(image, features, output_size)
        return lazy.whole(self.whole) if self.whole else lazy

    def _lazy(self, image, features, output_size) -> LazyMap:
        naf = self.naf
        problem = lean_encoder.problem(naf.image_encoder)
        if problem is None and (type(naf.query_encoder).__name__, type(naf.key_encoder).__name__
                                ) != ("QueryEncoder", "KeyEncoder"):
            problem = "NAF's query or key encoder is not the identity / average pool read"
        size = _encoder_size(image.shape[-2:], output_size)
        if problem is None and not lean_encoder.encodable(size, output_size):
            problem = f"the encoder's {size} map does not pool to {tuple(output_size)} by blocks"
        if problem is None:
            encoded = lean_encoder.encode(naf.image_encoder, image, output_size)
            keys = encoded.keys(features.shape[-2:])
            return LazyMap(naf.upsampler, encoded, keys, features, output_size, self.sink)
        fallback(self.sink, f"NAF's image encoder runs as written (more memory): {problem}",
                  problem)
        x = naf.image_encoder(image, output_size=output_size)
        return LazyMap(naf.upsampler, naf.query_encoder(x), naf.key_encoder(x, features),
                       features, output_size, self.sink)


def _encoder_size(size, output_size) -> tuple:
    """The map size ``ImageEncoder.forward`` encodes at (it shrinks images over 4x the
    output)."""
    (h, w), (oh, ow) = size, output_size
    if h > 4 * oh or w > 4 * ow:
        return (min(h, 4 * oh, 4 * ow), min(w, 4 * ow, 4 * oh))
    return (h, w)


class SampledProjGrid(nn.Module):
    """Stands in for the extractor's ``proj_grid`` during a lean pass: the port's own
    ``ProjGrid`` built at the pass's resolution with ``grid_points`` cut to the active voxels
    (``flat`` = x * R^2 + y * R + z, the order ``get_proj_cond_shape`` reshapes by). A tensor
    map is sampled by the port's ``forward``; NAF's :class:`LazyMap` is computed only at the
    corners the same bilinear samples read (their coordinates taken from the port's own
    projection, see :func:`.checks.sample_points`)."""

    def __init__(self, grid: nn.Module, flat: torch.Tensor):
        super().__init__()
        self.grid = grid
        self.grid.grid_points = grid.grid_points[flat.to(grid.grid_points.device)]

    def forward(self, features_map, camera_angle_x, distance, mesh_scale, transform_matrix=None,
                BHWC=True):
        if not isinstance(features_map, LazyMap):
            return self.grid(features_map, camera_angle_x, distance, mesh_scale,
                             transform_matrix, BHWC=BHWC)
        points = checks.sample_points(self.grid, features_map.shape, camera_angle_x, distance,
                                      mesh_scale, transform_matrix)
        b, c, h, w = features_map.shape
        k = points.shape[1]
        out = features_map.values.new_empty(b, k, c)
        for i in range(b):
            for k0 in range(0, k, VOXEL_CHUNK):  # a chunk's pixels only, never all at once
                rows, cols, weights = la.bilinear_corners(points[i, k0:k0 + VOXEL_CHUNK], h, w)
                pixels, inverse = torch.unique(rows * w + cols, return_inverse=True)
                values = features_map.at(pixels // w, pixels % w)[i]
                weights = weights.to(device=values.device, dtype=values.dtype)
                acc = values[inverse[:, 0]] * weights[:, :1]
                for corner in range(1, 4):
                    acc += values[inverse[:, corner]] * weights[:, corner:corner + 1]
                out[i, k0:k0 + VOXEL_CHUNK] = acc
        return out
