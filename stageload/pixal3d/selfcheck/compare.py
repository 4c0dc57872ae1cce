"""How far apart two results of the same computation are: every tensor in them, in order.

``tensors`` walks what the port's methods return — tensors, tuples, lists, dicts, and objects
holding tensors (a ``SparseTensor``'s ``feats`` and ``coords``, a mesh's ``vertices`` and
``faces``) — so a part compares whatever the port hands back without knowing its classes.
"""
from __future__ import annotations

from typing import Optional

import torch


def tensors(obj, depth: int = 0) -> list[torch.Tensor]:
    """Every tensor in ``obj``, depth first, in a stable order (dict keys and attribute names
    sorted); objects with ``feats`` and ``coords`` give those two only (a sparse tensor's
    caches are not part of its value)."""
    if depth > 6:
        return []
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors(item, depth + 1)]
    if isinstance(obj, dict):
        return [t for key in sorted(obj, key=str) for t in tensors(obj[key], depth + 1)]
    if hasattr(obj, "feats") and hasattr(obj, "coords"):
        return tensors([obj.feats, obj.coords], depth + 1)
    fields = getattr(obj, "__dict__", None)
    if isinstance(fields, dict):
        return [t for key in sorted(fields) if not key.startswith("_")
                for t in tensors(fields[key], depth + 1)]
    return []


def agreement(lean, port) -> tuple[Optional[float], Optional[str]]:
    """``(max |lean - port| / max |port| over the floating tensors, None)`` when both results
    hold the same tensors (shapes, dtypes, and the integer ones equal); else ``(None, what
    differs)``. A port result of zeros compares by the absolute difference."""
    a, b = tensors(lean), tensors(port)
    if len(a) != len(b):
        return None, f"{len(a)} tensors where the port's result has {len(b)}"
    if not b:
        return None, "the results hold no tensor to compare"
    worst, scale = 0.0, 0.0
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if tuple(x.shape) != tuple(y.shape):
            return None, f"tensor {i}: shape {tuple(x.shape)} where the port's is {tuple(y.shape)}"
        if not y.is_floating_point():
            if not torch.equal(x.cpu(), y.cpu()):
                return None, f"tensor {i} ({y.dtype}, {tuple(y.shape)}) differs"
            continue
        if y.numel():
            x64, y64 = x.detach().double().cpu(), y.detach().double().cpu()
            worst = max(worst, float((x64 - y64).abs().max()))
            scale = max(scale, float(y64.abs().max()))
    return (worst / scale if scale else worst), None
