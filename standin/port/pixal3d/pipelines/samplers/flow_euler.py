"""Stand-in of ``pixal3d.pipelines.samplers.flow_euler`` (TRELLIS.2): Euler sampling of a
rectified flow from t = 1 (noise) to t = 0, deterministic (no noise is drawn here).

``FlowEulerSampler(sigma_min)``: ``sample(model, noise, cond=None, steps=50, rescale_t=1.0,
verbose=True, tqdm_desc="Sampling", **kwargs)`` → an object with ``samples`` (same type as
``noise``: tensor or sparse tensor) and the per-step lists ``pred_x_t``, ``pred_x_0``; times
``linspace(1, 0, steps + 1)`` warped by ``rescale_t · t / (1 + (rescale_t - 1) · t)``; each
step is ``sample_once(model, x_t, t, t_prev, cond, **kwargs)`` (→ ``pred_x_prev = x_t - (t -
t_prev) · v``, ``pred_x_0 = (1 - σ) x_t - (σ + (1 - σ) t) v``), the model called as
``model(x_t, t·1000 for each sample [B], cond, **kwargs)`` (``kwargs``: e.g. ``concat_cond``).
``FlowEulerCfgSampler`` adds classifier-free guidance (``neg_cond``, ``guidance_strength``,
``guidance_rescale``); ``FlowEulerGuidanceIntervalSampler`` applies it only inside
``guidance_interval``. The real one shows a tqdm bar (``verbose``); this one is silent.
Products are written tensor first (see ``classifier_free_guidance_mixin``).
"""
from types import SimpleNamespace
from typing import *

import numpy as np
import torch

from .base import Sampler
from .classifier_free_guidance_mixin import ClassifierFreeGuidanceSamplerMixin
from .guidance_interval_mixin import GuidanceIntervalSamplerMixin

__all__ = ['FlowEulerSampler', 'FlowEulerCfgSampler', 'FlowEulerGuidanceIntervalSampler']


class FlowEulerSampler(Sampler):
    def __init__(self, sigma_min: float):
        self.sigma_min = sigma_min

    def _v_to_xstart_eps(self, x_t, t, v):
        eps = v * (1 - t) + x_t
        x_0 = x_t * (1 - self.sigma_min) - v * (self.sigma_min + (1 - self.sigma_min) * t)
        return x_0, eps

    def _pred_to_xstart(self, x_t, t, pred):
        return x_t * (1 - self.sigma_min) - pred * (self.sigma_min + (1 - self.sigma_min) * t)

    def _xstart_to_pred(self, x_t, t, x_0):
        return (x_t * (1 - self.sigma_min) - x_0) / (self.sigma_min + (1 - self.sigma_min) * t)

    def _inference_model(self, model, x_t, t, cond=None, **kwargs):
        t = torch.tensor([1000 * t] * x_t.shape[0], device=x_t.device, dtype=torch.float32)
        return model(x_t, t, cond, **kwargs)

    def _get_model_prediction(self, model, x_t, t, cond=None, **kwargs):
        pred_v = self._inference_model(model, x_t, t, cond, **kwargs)
        pred_x_0, pred_eps = self._v_to_xstart_eps(x_t=x_t, t=t, v=pred_v)
        return pred_x_0, pred_eps, pred_v

    @torch.no_grad()
    def sample_once(self, model, x_t, t: float, t_prev: float, cond: Optional[Any] = None,
                    **kwargs):
        """One Euler step from ``t`` to ``t_prev``: ``pred_x_prev``, ``pred_x_0``."""
        pred_x_0, _, pred_v = self._get_model_prediction(model, x_t, t, cond, **kwargs)
        return SimpleNamespace(pred_x_prev=x_t - pred_v * (t - t_prev), pred_x_0=pred_x_0)

    @torch.no_grad()
    def sample(self, model, noise, cond: Optional[Any] = None, steps: int = 50,
               rescale_t: float = 1.0, verbose: bool = True, tqdm_desc: str = "Sampling",
               **kwargs):
        t_seq = np.linspace(1, 0, steps + 1)
        t_seq = (rescale_t * t_seq / (1 + (rescale_t - 1) * t_seq)).tolist()
        ret = SimpleNamespace(samples=None, pred_x_t=[], pred_x_0=[])
        sample = noise
        for t, t_prev in zip(t_seq[:-1], t_seq[1:], strict=True):
            out = self.sample_once(model, sample, t, t_prev, cond, **kwargs)
            sample = out.pred_x_prev
            ret.pred_x_t.append(out.pred_x_prev)
            ret.pred_x_0.append(out.pred_x_0)
        ret.samples = sample
        return ret


class FlowEulerCfgSampler(ClassifierFreeGuidanceSamplerMixin, FlowEulerSampler):
    @torch.no_grad()
    def sample(self, model, noise, cond, neg_cond, steps: int = 50, rescale_t: float = 1.0,
               guidance_strength: float = 3.0, verbose: bool = True, **kwargs):
        return super().sample(model, noise, cond, steps, rescale_t, verbose, neg_cond=neg_cond,
                              guidance_strength=guidance_strength, **kwargs)


class FlowEulerGuidanceIntervalSampler(GuidanceIntervalSamplerMixin,
                                       ClassifierFreeGuidanceSamplerMixin, FlowEulerSampler):
    @torch.no_grad()
    def sample(self, model, noise, cond, neg_cond, steps: int = 50, rescale_t: float = 1.0,
               guidance_strength: float = 3.0, guidance_interval: Tuple[float, float] = (0.0, 1.0),
               verbose: bool = True, **kwargs):
        return super().sample(model, noise, cond, steps, rescale_t, verbose, neg_cond=neg_cond,
                              guidance_strength=guidance_strength,
                              guidance_interval=guidance_interval, **kwargs)
