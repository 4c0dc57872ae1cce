"""The ``camera`` stage of a Pixal3D run: the camera estimator (MoGe-2) on the preprocessed
image, or a manual field of view without it, as the port's ``main()`` does; and the
``load_moge_model`` the port's ``image_to_asset`` is given while the adapter runs it."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from ..releasing import module_bytes


def _timed_moge(run, load: Callable, device, *args, **kwargs):
    """``load(device, …)`` (a ``load_moge_model``), reported through ``run.emit`` as the
    ``camera_estimator``'s ``load`` event in the run's current stage."""
    start = time.perf_counter()
    moge = load(device, *args, **kwargs)
    run.emit("load", model="camera_estimator", stage=run.stage, bytes=module_bytes(moge),
             seconds=time.perf_counter() - start, outside_stage=False)
    return moge


def camera_params(run, image, *, fov: Optional[float] = None, mesh_scale: float = 1.0,
                  extend_pixel: int = 0, image_resolution: int = 512) -> dict:
    """The ``camera`` stage of ``run`` (an ``adapter.Pixal3DRun``; entered here unless it is
    the current stage): MoGe-2 on the preprocessed PIL ``image`` (staged: the
    ``camera_estimator`` model; eager: the port's ``load_moge_model``, timed), or the manual
    field of view ``fov`` (radians, > 0) without MoGe. Returns the port's camera parameters
    (``camera_angle_x``, ``distance``, ``mesh_scale`` …)."""
    gm = run.gm
    if run.stage != "camera":
        run.enter("camera")
    if fov is not None and fov > 0:
        pixels = torch.tensor([0 - extend_pixel, image_resolution - 1 + extend_pixel])
        distance = gm.distance_from_fov(fov, torch.tensor([-1.0, 0.0, 0.0]), pixels,
                                        mesh_scale, image_resolution)["distance_from_x"]
        return {"camera_angle_x": float(fov), "distance": distance, "mesh_scale": mesh_scale}
    if run.models is not None:
        moge = run.models["camera_estimator"]
    else:
        moge = _timed_moge(run, gm.load_moge_model, run.device)
    with tempfile.TemporaryDirectory(prefix="pixal3d-camera-") as tmp:
        path = Path(tmp) / "preprocessed.png"
        image.save(path)
        params = gm.get_camera_params_wild_moge(path, moge, device=run.device,
                                                mesh_scale=mesh_scale, extend_pixel=extend_pixel,
                                                image_resolution=image_resolution)
    del moge
    gm.maybe_empty_cache(run.device)
    return params


def moge_for_port(run) -> Callable:
    """The ``load_moge_model`` the port's ``image_to_asset`` gets while ``run`` drives it: the
    staged camera estimator (loaded in ``camera``), or (eager) the port's own
    (``run.port_load_moge``), timed as a ``load``."""
    def load_moge_model(device, *args, **kwargs):
        if run.models is not None:
            return run.models["camera_estimator"]
        return _timed_moge(run, run.port_load_moge, device, *args, **kwargs)
    return load_moge_model
