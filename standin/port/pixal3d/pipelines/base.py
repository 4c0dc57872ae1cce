"""``Pipeline`` base: ``from_pretrained(path)`` reads ``pipeline.json`` and builds every model
listed under ``args.models`` through ``pixal3d.models.from_pretrained`` (first
``f"{path}/{ckpt}"``, on any exception ``ckpt`` itself), as the real base class does."""
from typing import *

import torch

from .. import models


class Pipeline:
    def __init__(self, models: dict = None):
        if models is None:
            return
        self.models = models
        for model in self.models.values():
            model.eval()

    @classmethod
    def from_pretrained(cls, path: str, config_file: str = "pipeline.json") -> "Pipeline":
        import json
        import os
        if os.path.exists(f"{path}/{config_file}"):
            config_file = f"{path}/{config_file}"
        else:
            from huggingface_hub import hf_hub_download
            config_file = hf_hub_download(path, config_file)
        with open(config_file, 'r') as f:
            args = json.load(f)['args']
        _models = {}
        for k, v in args['models'].items():
            if hasattr(cls, 'model_names_to_load') and k not in cls.model_names_to_load:
                continue
            try:
                _models[k] = models.from_pretrained(f"{path}/{v}")
            except Exception:
                _models[k] = models.from_pretrained(v)
        new_pipeline = cls(_models)
        new_pipeline._pretrained_args = args
        return new_pipeline

    @property
    def device(self) -> torch.device:
        if hasattr(self, '_device'):
            return self._device
        for model in self.models.values():
            if hasattr(model, 'parameters'):
                return next(model.parameters()).device
        raise RuntimeError("No device found.")

    def to(self, device) -> None:
        for model in self.models.values():
            model.to(device)

    def cpu(self) -> None:
        self.to(torch.device("cpu"))
