"""NAF's image encoder layer by layer in row bands, for the lean pass (:mod:`.lean`).

NAF's ``ImageEncoder`` (``valeoai/NAF`` ``src/model/naf.py``, read at f63aadff) runs two conv
stacks over the guide image at up to 4x the output size — ``encoder`` (1x1) and
``sem_encoder`` (3x3), each ``Conv2d`` then ``EncBlock``s of GroupNorm -> SiLU -> Conv2d twice,
reflect padding — concatenates them (256 channels), average-pools to the output size and
applies RoPE. Run as written at 1024x1024 it holds several 128-channel maps at once (each
512 MiB: the block's input kept for its shortcut test, the norm's and the activation's outputs,
reflect-padded copies, the concatenation, RoPE's products): about 4 GiB measured here.

:func:`encode` keeps two maps of the 3x3 stack at a time: a layer's input and its output, the
output computed in bands of rows (GroupNorm with the statistics of the whole input, SiLU,
reflect-padded conv; a band reads ``k // 2`` rows around it), and keeps its output (128
channels). The 1x1 stack is never stored: per pixel once its GroupNorms' statistics are known
(a sweep over the image per norm), it is recomputed where needed (:class:`_Pointwise`).
Pooling and RoPE are per pixel and are applied only where needed (:class:`Encoded`: the keys,
band by band; the queries at chosen pixels). Arithmetic is the modules' own (their weights,
``F.conv2d``, the GroupNorm formula with PyTorch's biased variance), so results agree with the
module's forward to fp32 rounding. :func:`problem` says when the encoder is not the one read.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

BAND_BYTES = 32 * 2 ** 20


def _conv_problem(conv) -> Optional[str]:
    if not isinstance(conv, nn.Conv2d):
        return f"{type(conv).__name__} where a Conv2d was read"
    k = conv.kernel_size[0]
    if (conv.kernel_size != (k, k) or conv.stride != (1, 1) or conv.dilation != (1, 1)
            or conv.groups != 1 or conv.padding != (k // 2, k // 2) or k % 2 == 0
            or conv.padding_mode not in ("reflect", "zeros")):
        return "a Conv2d other than odd, stride 1, same-size padding"
    return None


def _steps(stack) -> list:
    """``[(norm or None, conv)]`` of one stack, or raises ValueError naming what differs."""
    layers = list(stack)
    problem = _conv_problem(layers[0]) if layers else "an empty stack"
    steps = [(None, layers[0])]
    for block in layers[1:]:
        if problem:
            break
        if (getattr(block, "residual", True) or getattr(block, "use_conv_shortcut", True)
                or not isinstance(getattr(block, "activation_fn", None), nn.SiLU)):
            problem = "an EncBlock with a residual, a shortcut or not SiLU"
            break
        for norm, conv in ((block.norm1, block.conv1), (block.norm2, block.conv2)):
            if not isinstance(norm, nn.GroupNorm) or not norm.affine:
                problem = "an EncBlock norm that is not an affine GroupNorm"
            problem = problem or _conv_problem(conv)
            steps.append((norm, conv))
    if problem:
        raise ValueError(problem)
    return steps


def problem(image_encoder) -> Optional[str]:
    """Why ``image_encoder`` is not NAF's ``ImageEncoder`` as read (None when it is)."""
    if not getattr(image_encoder, "use_encoder", False):
        return "ImageEncoder.use_encoder is off"
    rope = getattr(image_encoder, "rope", None)
    if not all(callable(getattr(rope, n, None)) for n in ("rotate", "create_coordinate")):
        return "ImageEncoder.rope has no rotate/create_coordinate"
    try:
        for stack in (image_encoder.encoder, image_encoder.sem_encoder):
            _steps(stack)
    except (AttributeError, TypeError, ValueError) as exc:
        return f"ImageEncoder's conv stacks differ: {exc}"
    return None


def _rows(x: torch.Tensor, r0: int, r1: int, halo: int) -> torch.Tensor:
    """Rows ``r0 - halo .. r1 + halo`` of ``x`` [B, C, H, W], reflected at the edges as
    ``F.pad(mode="reflect")`` does."""
    h = x.shape[2]
    idx = torch.arange(r0 - halo, r1 + halo, device=x.device)
    idx = torch.where(idx < 0, -idx, idx)
    idx = torch.where(idx >= h, 2 * h - 2 - idx, idx)
    return x.index_select(2, idx)


def _layer(x: torch.Tensor, norm, conv, band_bytes: int) -> torch.Tensor:
    """``conv(silu(norm(x)))`` (``conv(x)`` without a norm) over the whole map, in row bands."""
    b, c, h, w = x.shape
    k = conv.kernel_size[0]
    halo = k // 2
    if norm is not None:
        groups = norm.num_groups
        var, mean = torch.var_mean(x.reshape(b, groups, -1), dim=-1, unbiased=False)
        rstd = (var + norm.eps).rsqrt()
        scale = (rstd.repeat_interleave(c // groups, dim=1) * norm.weight).reshape(b, c, 1, 1)
        shift = norm.bias.reshape(1, c, 1, 1) - mean.repeat_interleave(
            c // groups, dim=1).reshape(b, c, 1, 1) * scale
    out = x.new_empty(b, conv.out_channels, h, w)
    band = max(1, min(h, band_bytes // max(1, 4 * b * w * (3 * c + conv.out_channels))))
    for r0 in range(0, h, band):
        r1 = min(h, r0 + band)
        if conv.padding_mode == "reflect":  # reflection commutes with the pointwise norm
            xb, pad = _rows(x, r0, r1, halo), (halo, halo, 0, 0)
        else:  # zeros pad the activations: pad after the norm
            lo, hi = max(0, r0 - halo), min(h, r1 + halo)
            xb, pad = x[:, :, lo:hi], (halo, halo, halo - (r0 - lo), halo - (hi - r1))
        if norm is not None:
            xb = F.silu(xb * scale + shift)
        if halo:
            mode = "reflect" if conv.padding_mode == "reflect" else "constant"
            xb = F.pad(xb, pad, mode=mode)
        out[:, :, r0:r1] = F.conv2d(xb, conv.weight, conv.bias)
    return out


def _stack(x: torch.Tensor, stack, band_bytes: int) -> torch.Tensor:
    for norm, conv in _steps(stack):
        x = _layer(x, norm, conv, band_bytes)
    return x


class _Pointwise:
    """A stack of 1x1 convs (NAF's ``encoder``) never stored: each pixel's output depends on
    that pixel alone once its GroupNorms' statistics are known, so those are gathered first —
    one sweep over the image in row bands per norm — and the stack is then
    recomputed for the rows (:meth:`rows`) or pixels (:meth:`at`) asked for."""

    def __init__(self, x: torch.Tensor, steps: list, band_bytes: int):
        self.x, self.steps, self.affine = x, steps, []
        b, _, h, w = x.shape
        widest = max(conv.out_channels for _, conv in steps)
        self.band = max(1, min(h, band_bytes // max(1, 16 * b * w * widest)))
        for k, (norm, _) in enumerate(steps):
            self.affine.append(None if norm is None else self._statistics(k, norm))

    def _run(self, x: torch.Tensor, upto: int) -> torch.Tensor:
        for (_, conv), affine in zip(self.steps[:upto], self.affine[:upto], strict=False):
            if affine is not None:
                x = F.silu(x * affine[0] + affine[1])
            x = F.conv2d(x, conv.weight, conv.bias)
        return x

    def _statistics(self, k: int, norm) -> tuple:
        """GroupNorm ``norm``'s per-channel scale and shift for step ``k``'s input: each band's
        mean and variance on the device (fp32, as GroupNorm computes them), combined across
        bands in float64 on the CPU (Chan et al.'s pairwise update; MPS has no float64)."""
        b, _, h, w = self.x.shape
        c, g = self.steps[k - 1][1].out_channels, norm.num_groups
        count, mean, m2 = 0, torch.zeros(b, g, dtype=torch.float64), torch.zeros(
            b, g, dtype=torch.float64)
        for r0 in range(0, h, self.band):
            y = self._run(self.x[:, :, r0:r0 + self.band], k).reshape(b, g, -1)
            var_b, mean_b = (t.double().cpu() for t in torch.var_mean(y, dim=-1,
                                                                        unbiased=False))
            n_b = y.shape[-1]
            delta = mean_b - mean
            mean = mean + delta * (n_b / (count + n_b))
            m2 = m2 + var_b * n_b + delta * delta * (count * n_b / (count + n_b))
            count += n_b
        rstd = (m2 / count + norm.eps).rsqrt().float().to(self.x.device)
        mean = mean.float().to(self.x.device)
        scale = (rstd.repeat_interleave(c // g, dim=1) * norm.weight).reshape(b, c, 1, 1)
        shift = norm.bias.reshape(1, c, 1, 1) - (mean.repeat_interleave(c // g, dim=1)
                                                 .reshape(b, c, 1, 1) * scale)
        return scale, shift

    @property
    def shape(self) -> tuple:
        return (self.x.shape[0], self.steps[-1][1].out_channels) + tuple(self.x.shape[-2:])

    def rows(self, r0: int, r1: int) -> torch.Tensor:
        """The stack's output rows ``r0 .. r1``: [B, C, r1 - r0, W]."""
        return self._run(self.x[:, :, r0:r1], len(self.steps))

    def at(self, ry: torch.Tensor, rx: torch.Tensor) -> torch.Tensor:
        """The stack's output at pixels ``(ry, rx)`` (same shape S): [B, C, *S]."""
        picked = self.x[:, :, ry.reshape(-1), rx.reshape(-1)]
        out = self._run(picked[..., None], len(self.steps))[..., 0]
        return out.reshape(out.shape[:2] + tuple(ry.shape))


def _rows_of(stack, r0: int, r1: int) -> torch.Tensor:
    return stack.rows(r0, r1) if isinstance(stack, _Pointwise) else stack[:, :, r0:r1]


def _at(stack, ry: torch.Tensor, rx: torch.Tensor) -> torch.Tensor:
    return stack.at(ry, rx) if isinstance(stack, _Pointwise) else stack[:, :, ry, rx]


class Encoded:
    """NAF's encoded image as the lean pass needs it, without the pooled and rotated map:
    the two stacks' outputs (``stacks``, [B, C/2, He, We] each), the pooling factor ``s`` to the
    output size and the ``rope``. :meth:`keys` = ``KeyEncoder`` (the rotated map average-pooled
    to the features' size), band by band; :meth:`queries_at` = the rotated map at pixels."""

    def __init__(self, stacks, output_size, rope):
        self.stacks, self.rope = stacks, rope
        self.out_h, self.out_w = output_size
        self.s = stacks[1].shape[-2] // self.out_h
        self.coords = rope.create_coordinate(H=self.out_h, W=self.out_w)

    def _rotate(self, x: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """``x`` [B, C, P] at output pixels ``flat`` [P] (y * W + x) -> rotated [B, C, P]."""
        b, c, p = x.shape
        heads = self.rope.num_heads
        x = x.reshape(b, heads, c // heads, p).transpose(-1, -2)
        return self.rope.rotate(x, self.coords[flat]).transpose(-1, -2).reshape(b, c, p)

    def _pooled(self, r0: int, r1: int) -> torch.Tensor:
        """Output rows ``r0 .. r1`` of the pooled concatenation, [B, C, r1 - r0, W]."""
        band = torch.cat([_rows_of(t, r0 * self.s, r1 * self.s) for t in self.stacks], dim=1)
        return F.adaptive_avg_pool2d(band, (r1 - r0, self.out_w)) if self.s > 1 else band

    def keys(self, size, band_bytes: int = BAND_BYTES) -> torch.Tensor:
        """``[B, C, hl, wl]``: the rotated map average-pooled to ``size`` (rows in bands)."""
        hl, wl = size
        r = self.out_h // hl
        b, c = self.stacks[0].shape[0], sum(t.shape[1] for t in self.stacks)
        out = self.stacks[1].new_empty(b, c, hl, wl)
        rows = max(1, band_bytes // max(1, 8 * c * self.out_w * r * self.s ** 2))
        for k0 in range(0, hl, rows):
            k1 = min(hl, k0 + rows)
            band = self._pooled(k0 * r, k1 * r)
            flat = torch.arange(k0 * r * self.out_w, k1 * r * self.out_w, device=band.device)
            band = self._rotate(band.reshape(b, c, -1), flat).reshape(band.shape)
            out[:, :, k0:k1] = F.adaptive_avg_pool2d(band, (k1 - k0, wl))
        return out

    def queries_at(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The rotated map (NAF's queries) at output pixels (rows, cols) ``[P]``: [B, C, P]."""
        s = self.s
        d = torch.arange(s, device=rows.device)
        ry = (rows[:, None, None] * s + d[None, :, None]).expand(-1, s, s)
        rx = (cols[:, None, None] * s + d[None, None, :]).expand(-1, s, s)
        parts = [_at(t, ry, rx) for t in self.stacks]
        parts = [p[..., 0, 0] if s == 1 else p.mean(dim=(-1, -2)) for p in parts]
        return self._rotate(torch.cat(parts, dim=1), rows * self.out_w + cols)


def encode(image_encoder, x: torch.Tensor, output_size,
           band_bytes: int = BAND_BYTES) -> Encoded:
    """NAF's ``ImageEncoder.forward(x, output_size)`` as an :class:`Encoded`. ``x``: the guide
    image [B, 3, H, W]. Raises ValueError when the encoder's size is not an integer multiple of
    ``output_size`` (check first with :func:`encodable`)."""
    oh, ow = output_size
    if x.shape[-2] > 4 * oh or x.shape[-1] > 4 * ow:  # as ImageEncoder.forward resizes
        size = (min(x.shape[-2], 4 * oh, 4 * ow), min(x.shape[-1], 4 * ow, 4 * oh))
        x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
    if not encodable(x.shape[-2:], output_size):
        raise ValueError(f"encoder size {tuple(x.shape[-2:])} is not a multiple of "
                         f"{tuple(output_size)}")
    second = _stack(x, image_encoder.sem_encoder, band_bytes)  # 3x3: stored, 2 maps at a time
    steps = _steps(image_encoder.encoder)
    first = _Pointwise(x, steps, band_bytes) if all(
        conv.kernel_size == (1, 1) for _, conv in steps) else _stack(x, image_encoder.encoder,
                                                                      band_bytes)
    return Encoded((first, second), output_size, image_encoder.rope)


def encodable(size, output_size) -> bool:
    """Whether the encoder's map ``size`` pools to ``output_size`` by whole equal blocks."""
    (h, w), (oh, ow) = size, output_size
    return h % oh == 0 and w % ow == 0 and h // oh == w // ow
