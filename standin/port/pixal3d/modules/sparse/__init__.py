"""Minimal ``SparseTensor``: per-token features ``feats`` [N, C] at integer ``coords`` [N, 4]
(batch, x, y, z), with the arithmetic the pipeline uses (``* std + mean``, ``- mean``, ``/ std``),
``replace(feats, coords=None)``, ``device``, ``dtype``, ``shape`` ([batch, *feats.shape[1:]]),
``layout`` (each batch's slice of the rows; rows are kept sorted by batch, as the real
``VarLenTensor`` keeps them), ``spatial_shape``, ``type``/``half``/``float``/``to``/``cpu``, and
the real tensor's *spatial cache*: a dict shared by every tensor ``replace`` derives, keyed by
the tensor's scale (``_scale``, a tuple of ``Fraction`` halved by each channel-to-space step),
where the sparse convolution keeps its neighbour map (``register_spatial_cache`` /
``get_spatial_cache``). The sparse attention lives in ``attention`` and its back end in
``config``; ``SparseLinear`` (``linear``), ``SparseConv3d`` (``conv``, back end ``config.CONV``)
and ``SparseChannel2Spatial`` (``spatial``) load on first use, as in the real package.
"""
from __future__ import annotations

import importlib
from fractions import Fraction

import torch

_UNIT_SCALE = (Fraction(1, 1), Fraction(1, 1), Fraction(1, 1))


class SparseTensor:
    def __init__(self, feats: torch.Tensor, coords: torch.Tensor, shape=None, *,
                 scale=_UNIT_SCALE, spatial_cache=None):
        self.feats = feats
        self.coords = coords
        self._shape = shape
        self._scale = scale
        self._spatial_cache = {} if spatial_cache is None else spatial_cache

    @property
    def device(self):
        return self.feats.device

    @property
    def shape(self):
        if self._shape is None:
            batch = int(self.coords[:, 0].max().item()) + 1 if self.coords.shape[0] else 1
            self._shape = torch.Size([batch, *self.feats.shape[1:]])
        return self._shape

    @property
    def dtype(self):
        return self.feats.dtype

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def layout(self):
        counts = torch.bincount(self.coords[:, 0].long(), minlength=self.shape[0]).tolist()
        starts = [sum(counts[:b]) for b in range(len(counts))]
        return [slice(start, start + count) for start, count in zip(starts, counts, strict=True)]

    @property
    def spatial_shape(self):
        cached = self.get_spatial_cache('shape')
        if cached is not None:
            return cached
        if self.coords.shape[0] == 0:
            return torch.Size([0, 0, 0])
        return torch.Size((self.coords[:, 1:].max(0).values + 1).tolist())

    def replace(self, feats: torch.Tensor, coords: torch.Tensor = None) -> "SparseTensor":
        shape = None if self._shape is None else torch.Size([self._shape[0], *feats.shape[1:]])
        return SparseTensor(feats=feats, coords=self.coords if coords is None else coords,
                            shape=shape, scale=self._scale, spatial_cache=self._spatial_cache)

    def type(self, dtype) -> "SparseTensor":
        return self.replace(self.feats.type(dtype))

    def half(self) -> "SparseTensor":
        return self.replace(self.feats.half())

    def float(self) -> "SparseTensor":
        return self.replace(self.feats.float())

    def to(self, *args, **kwargs) -> "SparseTensor":
        feats = self.feats.to(*args, **kwargs)
        return self.replace(feats, self.coords.to(feats.device))

    def cpu(self) -> "SparseTensor":
        return self.replace(self.feats.cpu(), self.coords.cpu())

    def detach(self) -> "SparseTensor":
        return self.replace(self.feats.detach(), self.coords.detach())

    def register_spatial_cache(self, key, value) -> None:
        """Keep ``value`` under ``key`` for every tensor of this scale sharing this cache."""
        self._spatial_cache.setdefault(str(self._scale), {})[key] = value

    def get_spatial_cache(self, key=None):
        """The value kept under ``key`` at this tensor's scale (None when absent); without a
        key, the whole dict of this scale."""
        here = self._spatial_cache.get(str(self._scale), {})
        return here if key is None else here.get(key)

    def clear_spatial_cache(self) -> None:
        self._spatial_cache = {}

    def _op(self, other, fn):
        out = self.replace(fn(self.feats, other.feats if isinstance(other, SparseTensor)
                              else other))
        if isinstance(other, SparseTensor) and other._spatial_cache is not self._spatial_cache:
            merged = {k: dict(v) for k, v in self._spatial_cache.items()}
            for k, v in other._spatial_cache.items():
                merged.setdefault(k, {}).update(v)
            out._spatial_cache = merged
        return out

    def __mul__(self, other):
        return self._op(other, torch.mul)

    def __add__(self, other):
        return self._op(other, torch.add)

    def __sub__(self, other):
        return self._op(other, torch.sub)

    def __truediv__(self, other):
        return self._op(other, torch.div)

    def __getitem__(self, index: int) -> "SparseTensor":
        """Batch ``index`` alone, its batch coordinate set to 0 (the real ``__getitem__`` for
        an int). Raises IndexError past the last batch (which ends iteration)."""
        if not 0 <= index < self.shape[0]:
            raise IndexError(f"batch {index} of {self.shape[0]}")
        keep = self.coords[:, 0] == index
        coords = self.coords[keep].clone()
        coords[:, 0] = 0
        return SparseTensor(feats=self.feats[keep], coords=coords,
                            shape=torch.Size([1, *self.feats.shape[1:]]))

    def __iter__(self):
        for b in range(self.shape[0]):
            yield self[b]

    def __repr__(self):
        return f"SparseTensor(feats={tuple(self.feats.shape)}, coords={tuple(self.coords.shape)})"


from . import config  # noqa: E402,F401  (the attention back end, as the real package has it)

#: Names loaded from their submodule on first use (``__getattr__``), as the real package does.
_LAZY = {'SparseLinear': 'linear', 'SparseConv3d': 'conv', 'SparseInverseConv3d': 'conv',
         'SparseChannel2Spatial': 'spatial'}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name in ('conv', 'spatial', 'linear'):
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__} has no attribute {name}")
    globals()[name] = value
    return value
