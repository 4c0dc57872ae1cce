"""Stand-in of NAF's ``src/layers/convolutions.py``: ``EncBlock`` (norm → SiLU → conv, twice,
with an optional shortcut) and ``encoder(...)`` (a first conv, then ``num_layers`` blocks with
GroupNorm and reflect padding), the same layers in the same order as the real one."""
import torch.nn as nn


class EncBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, norm_kwargs=None,
                 pad_mode="zeros", norm_fn=None, activation_fn=nn.SiLU,
                 use_conv_shortcut=False, bias=True, residual=False):
        super().__init__()
        norm_kwargs = norm_kwargs or {}
        pad = kernel_size // 2
        self.use_conv_shortcut = use_conv_shortcut
        self.norm1 = norm_fn(**norm_kwargs)
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size, padding=pad,
                               padding_mode=pad_mode, bias=bias)
        self.norm2 = norm_fn(**norm_kwargs)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size, padding=pad,
                               padding_mode=pad_mode, bias=bias)
        self.activation_fn = activation_fn()
        if in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, padding=0,
                                      padding_mode=pad_mode, bias=bias)
        self.residual = residual

    def forward(self, x):
        skip = x
        x = self.norm1(x)
        x = self.activation_fn(x)
        x = self.conv1(x)
        x = self.norm2(x)
        x = self.activation_fn(x)
        x = self.conv2(x)
        if self.use_conv_shortcut or skip.shape != x.shape:
            skip = self.shortcut(skip)
        return x + skip if self.residual else x


def encoder(in_dim, hidden_dim, kernel_size=1, ks_res=1, num_layers=2, bias=True, num_groups=8,
            residual=False):
    blocks = [EncBlock(hidden_dim, hidden_dim, kernel_size=ks_res, pad_mode="reflect",
                       norm_fn=nn.GroupNorm,
                       norm_kwargs={"num_groups": num_groups, "num_channels": hidden_dim},
                       activation_fn=nn.SiLU, bias=bias, residual=residual)
              for _ in range(num_layers)]
    return nn.Sequential(nn.Conv2d(in_dim, hidden_dim, kernel_size, padding=kernel_size // 2,
                                   padding_mode="reflect", bias=bias), *blocks)
