"""Stand-in of NAF's ``src/layers/attentions.py``: ``CrossAttention(dim, num_heads,
kernel_size=(9, 9))`` whose ``forward(q, k, v, image=None, return_weights=False)`` sets
``dilation = (hq // hk, wq // wk)``, splits heads (``b (n d) h w -> b h w n d``), resizes keys
and values to the queries' size with ``nearest-exact`` (``_resize``), runs ``na2d`` (NATTEN >=
0.20's fused call, backend ``cutlass-fna``) and merges heads back. The real module falls back to
NATTEN's legacy ``na2d_qk``/``na2d_av`` when those import; the stand-in ``natten`` package has
only ``na2d`` (the recent API the port's pins give), so only that branch is mirrored.
"""
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange

NATTEN_RECENT = True
from natten import na2d  # noqa: E402  (imported at module load, as the real one does)


class CrossAttention(nn.Module):
    def __init__(self, dim, num_heads, kernel_size=(9, 9), **kwargs):
        super().__init__()
        assert dim % num_heads == 0, "dim must be divisible by num_heads"
        self.num_heads = num_heads
        self.kernel_size = kernel_size
        self.scale = (dim // num_heads) ** -0.5

    def _resize(self, x, size, dtype):
        x = F.interpolate(x, size=size, mode="nearest-exact")
        return rearrange(x, "b (n d) h w -> b h w n d", n=self.num_heads).to(dtype)

    def forward(self, q, k, v, image=None, return_weights=False, **kwargs):
        hq, wq = q.shape[-2:]
        hk, wk = k.shape[-2:]
        dilation = (hq // hk, wq // wk)
        self.dilation = dilation
        q = rearrange(q, "b (n d) h w -> b h w n d", n=self.num_heads)
        k = self._resize(k, size=(hq, wq), dtype=q.dtype)
        v = self._resize(v, size=(hq, wq), dtype=q.dtype)
        if return_weights:
            raise AssertionError("Return weights not supported with recent natten versions")
        out = na2d(q, k, v, kernel_size=self.kernel_size, dilation=dilation, stride=1,
                   backend="cutlass-fna")
        return rearrange(out, "b h w n d -> b (n d) h w")
