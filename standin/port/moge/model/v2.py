"""Stand-in camera estimator with the MoGe-2 names and checkpoint format the port relies on
(``microsoft/MoGe`` ``moge/model/v2.py``, read at c5055657; the port pins MoGe at 07444410):

- the checkpoint is one ``model.pt`` (``torch.save`` of ``{"model_config": constructor
  keywords, "model": state dict}``) in the model's Hugging Face repository;
- ``MoGeModel.from_pretrained(name_or_path, model_kwargs=None, **hf_kwargs)`` takes a local
  file as it is, otherwise ``hf_hub_download(repo_id=…, repo_type="model",
  filename="model.pt")``; reads it whole with ``torch.load(map_location="cpu",
  weights_only=True)``, constructs ``cls(**model_config)`` (its random initialisation: every
  weight allocated and drawn from the default generator) and copies the state dict in with
  ``load_state_dict(strict=False)`` — the checkpoint and the model both whole at once;
- ``infer(image [3, H, W] in 0..1)`` returns a dict with ``"intrinsics"`` [1, 3, 3] in
  normalised image units (fx = focal / width).
"""
from pathlib import Path

import torch
import torch.nn as nn
from huggingface_hub import hf_hub_download
from standin_hf import add_ballast


class MoGeModel(nn.Module):
    def __init__(self, hidden_size: int = 8, ballast_numel: int = 1, **deprecated_kwargs):
        super().__init__()
        self.fc = nn.Linear(3, hidden_size)
        self.head = nn.Linear(hidden_size, 1)
        add_ballast(self, ballast_numel)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, model_kwargs=None, **hf_kwargs):
        if Path(pretrained_model_name_or_path).exists():
            checkpoint_path = pretrained_model_name_or_path
        else:
            checkpoint_path = hf_hub_download(repo_id=pretrained_model_name_or_path,
                                              repo_type="model", filename="model.pt",
                                              **hf_kwargs)
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        config = checkpoint["model_config"]
        if model_kwargs is not None:
            config.update(model_kwargs)
        model = cls(**config)
        model.load_state_dict(checkpoint["model"], strict=False)
        return model

    @torch.no_grad()
    def infer(self, image: torch.Tensor) -> dict:
        colour = image.reshape(3, -1).mean(1)
        head = self.head(torch.tanh(self.fc(colour)))[0]
        fx = 1.2 + 0.1 * torch.tanh(head + 1e-3 * self.ballast.mean())
        intrinsics = torch.eye(3, device=image.device)
        intrinsics[0, 0] = fx
        intrinsics[1, 1] = fx
        intrinsics[0, 2] = 0.5
        intrinsics[1, 2] = 0.5
        return {"intrinsics": intrinsics[None]}
