"""The eager build of a Pixal3D-mac pipeline: the port's own loading (``load_pipeline``, or
``init_pipeline`` on a port without it: every model, four backbones, three NAFs, ``low_vram``
as the port sets it), with each load reported as a ``load`` event in ``setup``."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from torch import nn

from ..patching import patched
from ..releasing import module_bytes


class TimedLoads:
    """Wraps the port's loaders so that each call is reported through ``run.emit`` as a
    ``load`` event (``model``, the run's current ``stage``, ``bytes`` of the returned module,
    ``seconds``); a name loaded again is reported as ``name#2``, ``name#3`` …"""

    def __init__(self, run):
        self.run = run
        self.counts: dict[str, int] = {}

    def wrap(self, fn: Callable, name_of: Callable[..., str]) -> Callable:
        """``fn``, timed; ``name_of(*args, **kwargs)`` names the model a call loads."""
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            module = fn(*args, **kwargs)
            seconds = time.perf_counter() - start
            name = name_of(*args, **kwargs)
            self.counts[name] = self.counts.get(name, 0) + 1
            if self.counts[name] > 1:
                name = f"{name}#{self.counts[name]}"
            size = module_bytes(module) if isinstance(module, nn.Module) else 0
            self.run.emit("load", model=name, stage=self.run.stage, bytes=size,
                          seconds=seconds, outside_stage=False)
            return module
        return wrapper


def build_eager(run) -> None:
    """Enter ``setup`` and build ``run.pipeline`` with the port's own loaders, timed
    (``adapter.Pixal3DRun``: reads its ``port``, ``gm``, ``args``, ``device``, ``model_path``
    and ``entry_points``). The background remover, which the port builds inside its pipeline
    constructor, is reported afterwards with 0 seconds."""
    run.enter("setup")
    port = run.port
    import torch.hub
    timed = TimedLoads(run)
    ckpt_names: dict = {}

    def ckpt_name(path, **kw) -> str:
        return ckpt_names.setdefault(path, Path(str(path)).name)

    backbone = port.icp.DINOv3ViTModel
    with patched(port.models, "from_pretrained", timed.wrap(port.models.from_pretrained,
                                                            ckpt_name)), \
            patched(torch.hub, "load", timed.wrap(torch.hub.load, lambda *a, **k: "naf")), \
            patched(backbone, "from_pretrained",
                    staticmethod(timed.wrap(backbone.from_pretrained,
                                            lambda *a, **k: "image_cond_backbone"))):
        run.pipeline = (run.gm.load_pipeline(run.args, run.device) if run.entry_points
                        else run.gm.init_pipeline(run.model_path, run.device))
    rembg = getattr(run.pipeline.rembg_model, "model", None)
    if isinstance(rembg, nn.Module):
        run.emit("load", model="rembg_model", stage="setup", bytes=module_bytes(rembg),
                 seconds=0.0, outside_stage=False)
