"""Euler sampler of a rectified flow, t from 1 to 0 (deterministic: no noise is drawn here).

``sample(model, noise, cond, neg_cond, steps, ..., verbose, tqdm_desc, **kwargs)`` returns an
object with ``.samples`` (same type as ``noise``: tensor or SparseTensor), like the real one.
"""
from types import SimpleNamespace

import torch


class FlowEulerSampler:
    def __init__(self, sigma_min: float = 1e-5):
        self.sigma_min = sigma_min

    def _inference_model(self, model, x_t, t, cond, **kwargs):
        t = torch.tensor([1000 * t] * x_t.shape[0] if isinstance(x_t, torch.Tensor) else [1000 * t],
                         device=x_t.device, dtype=torch.float32)
        return model(x_t, t, cond, **kwargs)

    def _velocity(self, model, x_t, t, cond, neg_cond, guidance_strength, guidance_interval, **kwargs):
        v = self._inference_model(model, x_t, t, cond, **kwargs)
        lo, hi = guidance_interval
        if guidance_strength != 1 and lo <= t <= hi:
            v_neg = self._inference_model(model, x_t, t, neg_cond, **kwargs)
            v = v * guidance_strength + v_neg * (1 - guidance_strength)
        return v

    @torch.no_grad()
    def sample(self, model, noise, cond=None, neg_cond=None, steps=4, rescale_t=1.0,
               guidance_strength=1.0, guidance_interval=(0.0, 1.0), guidance_rescale=0.0,
               verbose=False, tqdm_desc="Sampling", **kwargs):
        ts = [i / steps for i in range(steps, -1, -1)]
        ts = [rescale_t * t / (1 + (rescale_t - 1) * t) for t in ts]
        x = noise
        for t, t_prev in zip(ts[:-1], ts[1:]):
            v = self._velocity(model, x, t, cond, neg_cond, guidance_strength, guidance_interval, **kwargs)
            x = x - v * (t - t_prev)
        return SimpleNamespace(samples=x)


class FlowEulerGuidanceIntervalSampler(FlowEulerSampler):
    """Classifier-free guidance applied inside ``guidance_interval`` only (the real default)."""
