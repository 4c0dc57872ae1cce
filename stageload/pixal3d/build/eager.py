"""The eager build of a Pixal3D-mac pipeline: the port's own loading (``load_pipeline``, or
``init_pipeline`` on a port without it: every model, four backbones, three NAFs, ``low_vram``
as the port sets it), with each load reported as a ``load`` event in ``setup``."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from torch import nn

from stageload.patching import patched
from stageload.releasing import module_bytes


class TimedLoads:
    """Wraps the port's loaders so that each call is reported through ``run.emit`` as a
    ``load`` event (``model``, the run's current ``stage``, ``bytes`` of the returned module,
    ``seconds``); a name loaded again is reported as ``name#2``, ``name#3`` …"""

    def __init__(self, run):
        self.run = run
        self.counts: dict[str, int] = {}
        self.bad: list = []  # BadWeights met (the port's base class retries under the bare name)

    def checked(self, fn: Callable) -> Callable:
        """``fn`` (the port's ``models.from_pretrained``), its module checked against the file
        it read (``direct.load_checked``): the port loads with ``strict=False``, so a missing
        parameter would keep its random initialisation. A ``BadWeights`` is kept in ``bad``
        (re-raised by :func:`build_eager` even when the port's retry hid it)."""
        from stageload.pixal3d.build.direct import load_checked
        from stageload.pixal3d.errors import BadWeights

        def loader(path, *args, **kwargs):
            module = fn(path, *args, **kwargs)
            try:
                return load_checked(lambda _path: module, str(path))
            except BadWeights as exc:
                self.bad.append(exc)
                raise
        return loader

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
    models_load = timed.wrap(timed.checked(port.models.from_pretrained), ckpt_name)
    try:
        with patched(port.models, "from_pretrained", models_load), \
                patched(torch.hub, "load", timed.wrap(torch.hub.load, lambda *a, **k: "naf")), \
                patched(backbone, "from_pretrained",
                        staticmethod(timed.wrap(backbone.from_pretrained,
                                                lambda *a, **k: "image_cond_backbone"))):
            run.pipeline = (run.gm.load_pipeline(run.args, run.device) if run.entry_points
                            else run.gm.init_pipeline(run.model_path, run.device))
    except Exception as exc:
        if timed.bad:
            raise timed.bad[0] from exc
        raise
    if timed.bad:  # the port's bare-name retry loaded something else in its place
        raise timed.bad[0]
    rembg = getattr(run.pipeline.rembg_model, "model", None)
    if isinstance(rembg, nn.Module):
        run.emit("load", model="rembg_model", stage="setup", bytes=module_bytes(rembg),
                 seconds=0.0, outside_stage=False)
