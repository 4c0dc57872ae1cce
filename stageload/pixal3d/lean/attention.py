"""NAF's cross-scale neighbourhood attention computed from the low-resolution keys and values.

NAF (``valeoai/NAF``, ``src/layers/attentions.py``) resizes its keys and values from the
low-resolution grid ``(hl, wl)`` to the output size ``(h, w) = (hl * rh, wl * rw)`` with
``nearest-exact`` and runs NATTEN's ``na2d`` with a ``kh x kw`` kernel and dilation
``(rh, rw)``. With an integer ratio, ``nearest-exact`` maps output row ``y`` to low row
``y // rh``, and NATTEN's dilated window (one sequence per residue ``y mod rh``, the window
clamped inside it) then reads low rows ``c - kh//2 .. c + kh//2`` with
``c = clamp(y // rh, kh//2, hl - 1 - kh//2)``; columns likewise. Every output pixel of one
low-resolution cell therefore attends to the same ``kh * kw`` low-resolution keys and values:
this module computes the attention cell by cell, so the resized maps never exist.

Shapes: queries ``[B, heads * dq, h, w]``, keys ``[B, heads * dq, hl, wl]``, values
``[B, heads * dv, hl, wl]`` (NAF's head split ``b (n d) h w``); ``dv`` may differ from ``dq``
(NAF's values are DINOv3's 1024 channels against 256 query channels). Scale ``dq ** -0.5``
(NATTEN's default, which NAF's call keeps). Arithmetic: scores = (q . k) * scale, softmax over
the window, weighted sum of values, in the queries' dtype — the same operations as the port's
``_torch_na2d``, so results agree to fp32 rounding (summation order differs).
"""
from __future__ import annotations

import torch

#: bytes of transient tensors one band or chunk may hold (queries, scores, gathered windows)
BAND_BYTES = 64 * 2 ** 20


def windows(hl: int, wl: int, kernel: tuple, device=None) -> torch.Tensor:
    """Flat low-resolution indices each cell attends to: ``[hl * wl, kh * kw]`` (int64), row
    by row, each window clamped inside the grid as NATTEN clamps it. Raises ValueError when the
    kernel does not fit (``kh > hl`` or ``kw > wl``) or is even."""
    kh, kw = kernel
    if kh % 2 == 0 or kw % 2 == 0 or kh > hl or kw > wl:
        raise ValueError(f"kernel {kh}x{kw} must be odd and fit the {hl}x{wl} grid")
    rows = torch.arange(hl, device=device).clamp(kh // 2, hl - 1 - kh // 2)
    cols = torch.arange(wl, device=device).clamp(kw // 2, wl - 1 - kw // 2)
    rows = rows[:, None] + torch.arange(kh, device=device)[None, :] - kh // 2
    cols = cols[:, None] + torch.arange(kw, device=device)[None, :] - kw // 2
    return (rows[:, None, :, None] * wl + cols[None, :, None, :]).reshape(hl * wl, kh * kw)


def _flat(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, heads * d, hl, wl]`` -> ``[B, heads, hl * wl, d]`` (a view where the layout
    allows)."""
    b, c, hl, wl = x.shape
    return x.reshape(b, heads, c // heads, hl * wl).transpose(-1, -2)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """``q [..., m, dq]`` against ``k [..., K, dq]``, ``v [..., K, dv]`` -> ``[..., m, dv]``."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    return torch.matmul(scores.softmax(dim=-1), v)


def upsample_banded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                    kernel: tuple, out: torch.Tensor | None = None,
                    band_bytes: int = BAND_BYTES) -> torch.Tensor:
    """NAF's whole output ``[B, heads * dv, h, w]`` computed in bands of low-resolution rows.

    ``out``: a preallocated output to fill (else one is allocated). Working memory beyond the
    inputs and the output: one band's queries, scores and gathered windows, at most about
    ``band_bytes`` (one low-resolution row at least). Raises ValueError when ``h``/``w`` are not
    integer multiples of the keys' size or the values' size differs from the keys'."""
    b, cq, h, w = q.shape
    hl, wl = k.shape[-2:]
    if h % hl or w % wl or v.shape[-2:] != k.shape[-2:]:
        raise ValueError(f"output {h}x{w} is not an integer multiple of {hl}x{wl}, or the "
                         f"values' grid {tuple(v.shape[-2:])} is not the keys'")
    rh, rw = h // hl, w // wl
    dq, dv = cq // heads, v.shape[1] // heads
    win = windows(hl, wl, kernel, q.device)
    kf, vf = _flat(k.to(q.dtype), heads), _flat(v.to(q.dtype), heads)
    if out is None:
        out = q.new_empty(b, heads * dv, h, w)
    out_cells = out.view(b, heads, dv, hl, rh, wl, rw)
    per_row = 4 * b * heads * wl * (rh * rw * (dq + dv + win.shape[1]) + win.shape[1] * (dq + dv))
    band = max(1, min(hl, band_bytes // max(1, per_row)))
    scale = dq ** -0.5
    for r0 in range(0, hl, band):
        r1 = min(hl, r0 + band)
        qb = q[:, :, r0 * rh:r1 * rh].reshape(b, heads, dq, r1 - r0, rh, wl, rw)
        qb = qb.permute(0, 1, 3, 5, 4, 6, 2).reshape(b, heads, (r1 - r0) * wl, rh * rw, dq)
        idx = win[r0 * wl:r1 * wl]
        ob = _attend(qb, kf[:, :, idx], vf[:, :, idx], scale)
        ob = ob.reshape(b, heads, r1 - r0, wl, rh, rw, dv).permute(0, 1, 6, 2, 4, 3, 5)
        out_cells[:, :, :, r0:r1] = ob
    return out


def upsample_at(q_pixels: torch.Tensor, cells: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                heads: int, kernel: tuple, band_bytes: int = BAND_BYTES) -> torch.Tensor:
    """NAF's output at chosen pixels only: ``[B, P, heads * dv]``.

    ``q_pixels``: the queries at those pixels ``[B, P, heads * dq]``; ``cells``: each pixel's
    low-resolution cell as a flat index ``(y // rh) * wl + x // rw`` ``[P]``. Pixels are grouped
    by cell (one window gather per cell, queries padded to the fullest cell of a chunk); working
    memory about ``band_bytes`` per chunk of cells plus the ``[B, P, heads * dv]`` result."""
    b, p, cq = q_pixels.shape
    hl, wl = k.shape[-2:]
    dq, dv = cq // heads, v.shape[1] // heads
    win = windows(hl, wl, kernel, q_pixels.device)
    kf, vf = _flat(k.to(q_pixels.dtype), heads), _flat(v.to(q_pixels.dtype), heads)
    out = q_pixels.new_empty(b, p, heads * dv)
    order = torch.argsort(cells, stable=True)
    uniq, counts = torch.unique_consecutive(cells[order], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    group = torch.repeat_interleave(torch.arange(len(uniq), device=cells.device), counts)
    slot = torch.arange(p, device=cells.device) - starts[group]
    width = int(counts.max()) if p else 1
    per_cell = 4 * b * heads * (width * (dq + dv + win.shape[1]) + win.shape[1] * (dq + dv))
    chunk = max(1, band_bytes // max(1, per_cell))
    scale = dq ** -0.5
    for u0 in range(0, len(uniq), chunk):
        u1 = min(len(uniq), u0 + chunk)
        p0, p1 = int(starts[u0]), int(starts[u1 - 1] + counts[u1 - 1])
        g, s, pix = group[p0:p1] - u0, slot[p0:p1], order[p0:p1]
        m = int(counts[u0:u1].max())
        qc = q_pixels.new_zeros(b, heads, u1 - u0, m, dq)
        qc[:, :, g, s] = q_pixels[:, pix].reshape(b, p1 - p0, heads, dq).transpose(1, 2)
        idx = win[uniq[u0:u1]]
        oc = _attend(qc, kf[:, :, idx], vf[:, :, idx], scale)
        out[:, pix] = oc[:, :, g, s].transpose(1, 2).reshape(b, p1 - p0, heads * dv)
    return out


def bilinear_corners(grid: torch.Tensor, h: int, w: int):
    """What ``F.grid_sample(mode="bilinear", align_corners=False, padding_mode="border")`` reads
    for sample points ``grid [K, 2]`` (x, y in [-1, 1]) of an ``h x w`` map: ``(rows [K, 4],
    cols [K, 4], weights [K, 4])`` for the corners (nw, ne, sw, se), each clamped inside the map
    (a corner outside it has weight 0, as in grid_sample). Coordinates are unnormalised and
    clipped to the border as PyTorch's grid sampler does."""
    ix = (((grid[:, 0] + 1) * w - 1) / 2).clamp(0, w - 1)
    iy = (((grid[:, 1] + 1) * h - 1) / 2).clamp(0, h - 1)
    x0, y0 = ix.floor(), iy.floor()
    x1, y1 = x0 + 1, y0 + 1
    weights = torch.stack([(x1 - ix) * (y1 - iy), (ix - x0) * (y1 - iy),
                           (x1 - ix) * (iy - y0), (ix - x0) * (iy - y0)], dim=1)
    cols = torch.stack([x0, x1, x0, x1], dim=1).long().clamp(max=w - 1)
    rows = torch.stack([y0, y0, y1, y1], dim=1).long().clamp(max=h - 1)
    return rows, cols, weights
