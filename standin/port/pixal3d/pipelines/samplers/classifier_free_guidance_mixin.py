"""Stand-in of ``pixal3d.pipelines.samplers.classifier_free_guidance_mixin`` (TRELLIS.2):
the model's prediction under classifier-free guidance — strength 1: ``cond`` alone; 0:
``neg_cond`` alone; otherwise ``g · pred(cond) + (1 - g) · pred(neg_cond)`` (both computed,
``cond`` first), and with ``guidance_rescale > 0`` the guided x₀ rescaled by the ratio of the
conditional x₀'s standard deviation to its own, per sample (a dense latent: ``torch.std`` over
every axis but the first; a sparse one: the population deviation of its tokens' features, as
the real sparse tensor's ``std``), blended by ``guidance_rescale``. Products are written tensor
first (``pred * g``): the stand-in's sparse tensor has no reflected operators, and a scalar
product is the same either way round."""
import torch


def _rescaled(x_0_pos, x_0_cfg, guidance_rescale: float):
    """``guidance_rescale · x_0_cfg · std(x_0_pos) / std(x_0_cfg) + (1 - r) · x_0_cfg``."""
    if hasattr(x_0_cfg, 'feats'):
        batch = x_0_cfg.coords[:, 0].long()
        count = torch.bincount(batch).to(x_0_cfg.feats.dtype)

        def spread(x):
            mean = torch.zeros_like(count).index_add_(0, batch, x.feats.mean(dim=1)) / count
            mean2 = torch.zeros_like(count).index_add_(0, batch, (x.feats ** 2).mean(dim=1))
            return ((mean2 / count - mean ** 2).sqrt())[batch][:, None]

        ratio = spread(x_0_pos) / spread(x_0_cfg)
        return x_0_cfg.replace(x_0_cfg.feats * ratio * guidance_rescale
                               + x_0_cfg.feats * (1 - guidance_rescale))
    dims = list(range(1, x_0_cfg.ndim))
    ratio = x_0_pos.std(dim=dims, keepdim=True) / x_0_cfg.std(dim=dims, keepdim=True)
    return x_0_cfg * ratio * guidance_rescale + x_0_cfg * (1 - guidance_rescale)


class ClassifierFreeGuidanceSamplerMixin:
    def _inference_model(self, model, x_t, t, cond, neg_cond, guidance_strength,
                         guidance_rescale=0.0, **kwargs):
        if guidance_strength == 1:
            return super()._inference_model(model, x_t, t, cond, **kwargs)
        if guidance_strength == 0:
            return super()._inference_model(model, x_t, t, neg_cond, **kwargs)
        pred_pos = super()._inference_model(model, x_t, t, cond, **kwargs)
        pred_neg = super()._inference_model(model, x_t, t, neg_cond, **kwargs)
        pred = pred_pos * guidance_strength + pred_neg * (1 - guidance_strength)
        if guidance_rescale > 0:
            x_0 = _rescaled(self._pred_to_xstart(x_t, t, pred_pos),
                            self._pred_to_xstart(x_t, t, pred), guidance_rescale)
            pred = self._xstart_to_pred(x_t, t, x_0)
        return pred
