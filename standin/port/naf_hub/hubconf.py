"""torch.hub entry point of the stand-in NAF upsampler (loaded with ``source="local"``).

Mirrors ``valeoai/NAF``'s ``hubconf.py`` as read: ``dependencies = ["torch", "natten"]`` and
``naf(pretrained=True, device="cpu")`` building ``src.model.naf.NAF`` and, when ``pretrained``,
loading its state dict. The real one downloads ``naf_release.pth`` into torch.hub's
``checkpoints`` folder; this one never downloads: it reads ``naf_standin.json`` (the
constructor's sizes, tiny in tests) and ``naf_standin.safetensors`` from
``<torch.hub.get_dir()>/checkpoints`` (``$TORCH_HOME/hub/checkpoints``), written by
``standin/port/make_weights.py``.
"""
dependencies = ["torch", "natten"]

import json
import os

import torch
from src.model.naf import NAF


def naf(pretrained: bool = True, device="cpu"):
    folder = os.path.join(torch.hub.get_dir(), "checkpoints")
    with open(os.path.join(folder, "naf_standin.json")) as f:
        config = json.load(f)
    model = NAF(**config).to(device)
    if pretrained:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(os.path.join(folder, "naf_standin.safetensors"),
                                        device=str(device)))
    return model
