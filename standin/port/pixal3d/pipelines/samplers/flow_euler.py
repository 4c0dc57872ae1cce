"""Euler sampler of a rectified flow, t from 1 to 0 (deterministic: no noise is drawn here).

``sample(model, noise, cond, neg_cond, steps, ..., verbose, tqdm_desc, **kwargs)`` returns an
object with ``.samples`` (same type as ``noise``: tensor or SparseTensor), like the real one;
as in TRELLIS/Pixal3D, its step loop calls ``self.sample_once(model, x_t, t, t_prev, cond,
**kwargs)`` once per step (``.pred_x_prev``, ``.pred_x_0``).
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

    def _velocity(self, model, x_t, t, cond, neg_cond, guidance_strength, guidance_interval,
                  **kwargs):
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
        for t, t_prev in zip(ts[:-1], ts[1:], strict=True):
            x = self.sample_once(model, x, t, t_prev, cond, neg_cond=neg_cond,
                                 guidance_strength=guidance_strength,
                                 guidance_interval=guidance_interval, **kwargs).pred_x_prev
        return SimpleNamespace(samples=x)

    @torch.no_grad()
    def sample_once(self, model, x_t, t, t_prev, cond=None, neg_cond=None, guidance_strength=1.0,
                    guidance_interval=(0.0, 1.0), **kwargs):
        """One Euler step from ``t`` to ``t_prev``."""
        v = self._velocity(model, x_t, t, cond, neg_cond, guidance_strength, guidance_interval,
                           **kwargs)
        return SimpleNamespace(pred_x_prev=x_t - v * (t - t_prev), pred_x_0=x_t - v * t)


class FlowEulerGuidanceIntervalSampler(FlowEulerSampler):
    """Classifier-free guidance applied inside ``guidance_interval`` only (the real default)."""
