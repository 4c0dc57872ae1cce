"""Minimal ``SparseTensor``: per-token features ``feats`` [N, C] at integer ``coords`` [N, 4]
(batch, x, y, z), with the arithmetic the pipeline uses (``* std + mean``, ``- mean``, ``/ std``),
``replace(feats)``, ``device``, ``dtype``, ``shape`` ([batch, *feats.shape[1:]]),
``layout`` (each batch's slice of the rows; rows are kept sorted by batch, as the real
``VarLenTensor`` keeps them) and ``spatial_shape``. The sparse attention lives in
``attention`` and its back end in ``config``, as in the real package.
"""
from __future__ import annotations

import torch


class SparseTensor:
    def __init__(self, feats: torch.Tensor, coords: torch.Tensor):
        self.feats = feats
        self.coords = coords

    @property
    def device(self):
        return self.feats.device

    @property
    def shape(self):
        batch = int(self.coords[:, 0].max().item()) + 1 if self.coords.shape[0] else 1
        return torch.Size([batch, *self.feats.shape[1:]])

    @property
    def dtype(self):
        return self.feats.dtype

    @property
    def layout(self):
        counts = torch.bincount(self.coords[:, 0].long(), minlength=self.shape[0]).tolist()
        starts = [sum(counts[:b]) for b in range(len(counts))]
        return [slice(start, start + count) for start, count in zip(starts, counts, strict=True)]

    @property
    def spatial_shape(self):
        if self.coords.shape[0] == 0:
            return torch.Size([0, 0, 0])
        return torch.Size((self.coords[:, 1:].max(0).values + 1).tolist())

    def replace(self, feats: torch.Tensor) -> "SparseTensor":
        return SparseTensor(feats=feats, coords=self.coords)

    def _op(self, other, fn):
        other = other.feats if isinstance(other, SparseTensor) else other
        return self.replace(fn(self.feats, other))

    def __mul__(self, other):
        return self._op(other, torch.mul)

    def __add__(self, other):
        return self._op(other, torch.add)

    def __sub__(self, other):
        return self._op(other, torch.sub)

    def __truediv__(self, other):
        return self._op(other, torch.div)

    def __iter__(self):
        batch = self.shape[0]
        for b in range(batch):
            keep = self.coords[:, 0] == b
            yield SparseTensor(feats=self.feats[keep], coords=self.coords[keep])

    def __repr__(self):
        return f"SparseTensor(feats={tuple(self.feats.shape)}, coords={tuple(self.coords.shape)})"


from . import config  # noqa: E402,F401  (the attention back end, as the real package has it)
