"""Stand-in camera estimator with the MoGe-2 names the port calls:
``MoGeModel.from_pretrained(name)`` and ``infer(image [3, H, W] in 0..1)`` returning a dict
with ``"intrinsics"`` [1, 3, 3] in normalised image units (fx = focal / width)."""
import torch
import torch.nn as nn
from standin_hf import _PretrainedMixin, ballast


class MoGeModel(_PretrainedMixin, nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(3, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, 1)
        self.ballast = ballast(config.ballast_numel)

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
