"""Stand-in for the few Hugging Face names the real port calls (no network, no `transformers`).

The real Pixal3D-mac imports ``DINOv3ViTModel`` and ``AutoModelForImageSegmentation`` from
``transformers`` and ``hf_hub_download`` from ``huggingface_hub``; those resolve a repository id
such as ``camenduru/dinov3-vitl16-pretrain-lvd1689m`` through the local Hugging Face cache.
This module keeps the same names and the same way of resolving: a repository id maps to
``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``, default ``~/.cache/huggingface/hub``) /
``models--ORG--NAME/snapshots/<revision>/``, the revision named by ``refs/main`` — the real
cache's layout (huggingface_hub's "Manage the cache" guide), without its ``blobs/`` symlinks.
Each model folder holds ``config.json`` and ``model.safetensors`` written by
``make_weights.py``; a missing file raises ``FileNotFoundError`` naming the path, as the real
library does when it is offline and the cache is empty.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder, from the same environment variables as the real one."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "huggingface")
    return Path(home) / "hub"


#: the revision folder the stand-in writes (``refs/main`` names it)
REVISION = "standin0000000000000000000000000000000000"


def repo_root(repo_id: str) -> Path:
    """Cache folder of ``repo_id`` (``ORG/NAME``): ``models--ORG--NAME`` in
    :func:`hub_cache_dir`."""
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def repo_dir(repo_id: str) -> Path:
    """Snapshot folder of ``repo_id``: ``snapshots/<refs/main>`` of :func:`repo_root` (the
    stand-in's revision when ``refs/main`` is absent)."""
    root = repo_root(repo_id)
    try:
        revision = (root / "refs" / "main").read_text().strip()
    except OSError:
        revision = REVISION
    return root / "snapshots" / revision


def hf_hub_download(repo_id: str, filename: str, repo_type: str = "model", **kwargs) -> str:
    """Path of ``filename`` in the cached repository ``repo_id`` (``repo_type`` and other
    keywords of the real function are accepted; only model repositories are cached here);
    FileNotFoundError if absent."""
    path = repo_dir(repo_id) / filename
    if not path.is_file():
        raise FileNotFoundError(f"{filename} of {repo_id} is not in the Hugging Face cache "
                                f"({path}); "
                                f"this stand-in never downloads")
    return str(path)


class Config:
    """Attribute view of a ``config.json`` dict (like ``transformers.PretrainedConfig``)."""

    def __init__(self, **entries):
        self.__dict__.update(entries)


def ballast(numel: int) -> nn.Parameter:
    """A randomly initialised weight vector of ``numel`` float32 values (4 bytes each).

    It stands for the bulk of a real model's weights: it is read from safetensors like every
    other weight and enters the output (through its mean), so a model's size in bytes can be set
    to a realistic fraction without making the stand-in slow.
    """
    p = nn.Parameter(torch.empty(max(1, int(numel))))
    nn.init.normal_(p, std=0.02)
    return p


def add_ballast(module: nn.Module, numel: int) -> None:
    """Register ``module.ballast`` (``numel`` float32 values), then initialise it in place.

    Same values and the same draw from the default generator as :func:`ballast`, but in the
    order real layers use (``nn.Linear``: register an empty weight, then ``reset_parameters``),
    so building with parameters on ``meta`` allocates and initialises nothing. The pixal3d
    models use this one; the Hugging Face stand-ins keep :func:`ballast`.
    """
    module.ballast = nn.Parameter(torch.empty(max(1, int(numel))))
    nn.init.normal_(module.ballast, std=0.02)


class _PretrainedMixin:
    @classmethod
    def from_pretrained(cls, model_name: str, **kwargs):
        """Build from ``config.json`` and give it ``model.safetensors``'s tensors, as
        ``transformers`` 5.x does (the port pins transformers 5.9.0 in requirements-mac.txt):
        the model is constructed under ``torch.device("meta")`` — no weight is allocated and no
        initialiser draws from a generator (transformers pull requests #36963, which made this
        the only way, and #42941, which builds directly on meta) — then each weight is read once
        onto the device of the surrounding ``torch.device`` context (transformers takes that
        context as its ``device_map``) and assigned. Raises ``FileNotFoundError`` for a file not
        in the cache, ``RuntimeError`` for a checkpoint that does not fit the model."""
        folder = repo_dir(model_name)
        config_path = hf_hub_download(model_name, "config.json")
        weights_path = hf_hub_download(model_name, "model.safetensors")
        with open(config_path) as f:
            config = Config(**json.load(f))
        device = torch.get_default_device()
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict(load_file(weights_path, device=str(device)), assign=True)
        model.name_or_path = str(folder)
        return model


class _PatchEmbeddings(nn.Module):
    def __init__(self, hidden: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2d(3, hidden, kernel_size=patch, stride=patch)

    @property
    def weight(self):
        return self.proj.weight


class _Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.patch_embeddings = _PatchEmbeddings(config.hidden_size, config.patch_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.hidden_size) * 0.02)
        self.register_tokens = nn.Parameter(torch.randn(1, config.num_register_tokens,
                                                        config.hidden_size) * 0.02)

    def forward(self, pixel_values, bool_masked_pos=None):
        x = self.patch_embeddings.proj(pixel_values)  # [B, D, h, w]
        x = x.flatten(2).transpose(1, 2)  # [B, h*w, D]
        b = x.shape[0]
        return torch.cat([self.cls_token.expand(b, -1, -1), self.register_tokens.expand(b, -1, -1),
                          x], dim=1)


class _Rope(nn.Module):
    """Fixed sine position code per patch (stand-in for DINOv3's rotary embeddings)."""

    def __init__(self, config):
        super().__init__()
        self.patch_size = config.patch_size
        self.hidden = config.hidden_size

    def forward(self, pixel_values):
        h = pixel_values.shape[-2] // self.patch_size
        w = pixel_values.shape[-1] // self.patch_size
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32),
                                torch.arange(w, dtype=torch.float32), indexing="ij")
        freqs = torch.arange(self.hidden, dtype=torch.float32) / self.hidden * math.pi
        pos = torch.sin(ys.reshape(-1, 1) * freqs / max(h, 1) + xs.reshape(-1, 1) * freqs / max(w,
                                                                                                1))
        return pos.to(pixel_values.device)


class _Layer(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden, hidden * 2)
        self.fc2 = nn.Linear(hidden * 2, hidden)

    def forward(self, hidden_states, position_embeddings=None):
        x = hidden_states
        if position_embeddings is not None:
            n = position_embeddings.shape[0]
            x = torch.cat([x[:, :-n], x[:, -n:] + position_embeddings], dim=1)
        return hidden_states + self.fc2(F.gelu(self.fc1(x)))


class DINOv3ViTModel(_PretrainedMixin, nn.Module):
    """DINOv3-like ViT: patch embedding, CLS + register tokens, a few residual MLP layers.

    config: ``patch_size``, ``hidden_size``, ``num_register_tokens``, ``num_layers``,
    ``ballast_numel``. Exposes ``embeddings``, ``rope_embeddings``, ``layer`` and ``config``,
    the attributes ``DinoV3ProjFeatureExtractor.extract_features`` reads.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.rope_embeddings = _Rope(config)
        self.layer = nn.ModuleList([_Layer(config.hidden_size) for _ in range(config.num_layers)])
        self.ballast = ballast(config.ballast_numel)
        # the ballast's share of the output: one scalar, added to the patch embedding bias
        self.embeddings.patch_embeddings.proj.register_forward_hook(
            lambda _m, _i, out: out + 1e-3 * self.ballast.mean())


class _SegNet(nn.Module):
    """BiRefNet-like matting net: foreground = distance from the border colour, refined by convs."""

    def __init__(self, config):
        super().__init__()
        self.conv1 = nn.Conv2d(3, config.hidden_size, 3, padding=1)
        self.conv2 = nn.Conv2d(config.hidden_size, 1, 3, padding=1)
        self.ballast = ballast(config.ballast_numel)

    def forward(self, x):
        border = torch.cat([x[..., 0, :], x[..., -1, :], x[..., :, 0], x[..., :, -1]],
                           dim=-1).mean(-1)
        dist = (x - border[..., None, None]).abs().sum(1, keepdim=True)
        refine = self.conv2(F.gelu(self.conv1(x)))
        logits = 8.0 * (dist - 0.3) + 0.1 * torch.tanh(refine) + 1e-3 * self.ballast.mean()
        return [logits]


class AutoModelForImageSegmentation(_PretrainedMixin, _SegNet):
    """Stand-in for ``transformers.AutoModelForImageSegmentation`` (BiRefNet/RMBG-2)."""

    @classmethod
    def from_pretrained(cls, model_name: str, trust_remote_code: bool = False, **kwargs):
        return super().from_pretrained(model_name)
