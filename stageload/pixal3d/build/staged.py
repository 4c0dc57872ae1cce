"""The staged build of a Pixal3D-mac pipeline: construct it as the port does while reading no
weights, then give it a ``StagedModels`` whose loaders read each model when a stage needs it.

In order (names and files: see the package docstring):

1. ``Pixal3DImageTo3DPipeline.from_pretrained(model_path)`` runs as written, while
   ``pixal3d.models.from_pretrained`` records each checkpoint path instead of reading it and
   the pipeline module's ``rembg`` namespace records the background remover's class and
   arguments instead of building it. No weights are read.
2. ``pipeline.models`` becomes a ``StagedModels`` whose loaders read the checkpoint's config
   JSON, build the port's class (through ``pixal3d.models``) with its parameters on ``meta``
   and assign the safetensors read straight to the device (``direct.load_port_model``: the
   weights are allocated once; the bare name is tried as the port's base class does). A model
   that would keep a tensor on ``meta`` falls back to the port's own
   ``pixal3d.models.from_pretrained(ckpt)`` on the device (logged, and the ``load`` event gets
   ``"fallback": reason``; every such event carries ``"method"``). ``--no-direct-load``: the
   port's ``from_pretrained`` on the CPU, then moved. ``pipeline.rembg_model`` becomes a proxy
   (:class:`StagedRembg`) that builds the port's wrapper when called.
3. Still in ``setup``, with ``direct_to_device``: ``direct.prepare_meta_runtime()`` pays the
   one-time import of ``torch._dynamo`` that the first initialiser on a meta tensor triggers
   (runtime, ~70 MB; otherwise paid inside the first model's load and carried by every later
   stage). ``low_vram`` is set False (on unified memory its CPU parking frees nothing and adds
   a copy) and ``pipeline.to(device)`` is called as ``init_pipeline`` does.
4. The backbone: the four extractors are built with the port's ``build_image_cond_model`` and
   ``IMAGE_COND_CONFIGS`` inside ``share(image_conditioned_proj.DINOv3ViTModel,
   "from_pretrained")``, so one backbone object serves all four; the NAF upsampler likewise
   inside ``share(torch.hub, "load")`` around each extractor's ``_load_naf()``. Each extractor
   stays its own object (``get_proj_cond_shape`` changes ``grid_resolution``/``proj_grid`` of
   the extractor it is given).
5. The camera estimator: the port's ``load_moge_model`` with MoGe-2's ``from_pretrained``
   building on meta and assigning its checkpoint once (``hub_loads.py``, which also says why
   the backbone and the background remover need nothing: ``transformers`` loads them so).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable

import torch
from torch import nn

from stageload.patching import patched
from stageload.sharing import share
from stageload.staged import StagedModels
from stageload.pixal3d.build.direct import METHOD_PORT, LoadNote, build_with_cpu_retry, load_checked, load_port_model, prepare_meta_runtime, with_bare_fallback
from stageload.pixal3d.errors import PortVersionError
from stageload.pixal3d.build.hub_loads import load_camera_estimator
from stageload.pixal3d.port.open import EXTRACTOR_KEYS
from stageload.pixal3d.build.prefetch_files import model_files

log = logging.getLogger(__name__)

#: ``source`` of the warning event a model loaded another way than asked gets: how a model was
#: built never changes silently.
LOAD_FALLBACK_SOURCE = "stageload.pixal3d.build.direct (the adapter's loader; docs/pixal3d.md, Fallbacks)"


def warn_fallback(run, name: str, reason: str) -> None:
    """The ``warning`` event for a model of ``run`` loaded another way than the direct path
    (the port's own loader, another checkpoint, built on the CPU): ``fallback: model_load``,
    ``cause``, ``differs``, ``model``."""
    run.emit("warning", message=f"{name} was loaded another way: {reason}",
             source=LOAD_FALLBACK_SOURCE, fallback="model_load", cause=reason,
             differs="how the weights were loaded (the port's own loader, another checkpoint "
                     "or device); the weights were checked against the model", model=name)

_EAGER = "Use --load eager with this port version."


class _Deferred:
    """What ``pixal3d.models.from_pretrained`` returns while the pipeline is constructed:
    the checkpoint path, and ``eval()`` (the base class calls it on every model)."""

    def __init__(self, path: str):
        self.path = path

    def eval(self):
        return self


class _DeferredRembg:
    """Stands for the background remover while the pipeline is constructed: class + kwargs."""

    def __init__(self, cls: type, kwargs: dict):
        self.cls = cls
        self.kwargs = kwargs


class _RecordingNamespace:
    """Replaces the pipeline module's ``rembg`` during construction: attribute lookups return a
    factory that records the class and arguments instead of building (loading) the model."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        cls = getattr(self._real, name)
        return lambda **kwargs: _DeferredRembg(cls, kwargs)


class PendingExtractor:
    """Stands in ``pipeline.image_cond_model_*`` until ``structure`` builds the extractors
    (``run()`` only checks that the four are not None before its first stage). Any use raises
    ``RuntimeError`` naming the attribute."""

    def __init__(self, attr: str):
        self._attr = attr

    def __getattr__(self, name):
        raise RuntimeError(f"pipeline.{self._attr} is built when the structure stage begins "
                           f"(get_proj_cond_ss); it was used before that (.{name})")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"pipeline.{self._attr} was called before the structure stage "
                           "built it")


class StagedRembg:
    """``pipeline.rembg_model`` in staged mode: calls build the port's wrapper through the
    ``StagedModels`` entry ``rembg_model`` (its network is what is loaded and released).

    ``model``: the loaded network (loads it); ``to()``/``cpu()``: no-ops (staged mode builds on
    the device and never parks on the CPU).
    """

    def __init__(self, models: StagedModels, cls: type, kwargs: dict, device: torch.device,
                 building: Callable = contextlib.nullcontext):
        self._models = models
        self._cls = cls
        self._kwargs = kwargs
        self._device = device
        self._building = building
        self._wrapper = None

    def build(self) -> nn.Module:
        """Loader for the ``rembg_model`` entry: a fresh port wrapper, constructed inside
        ``building()`` (the run's device context, so ``transformers`` reads the weights straight
        to it), then moved with its own ``to()`` (the port's ``to`` does the same when
        ``low_vram`` is off; a no-op once there); returns its ``.model``."""
        with self._building():
            self._wrapper = self._cls(**self._kwargs)
        self._wrapper.to(self._device)
        return self._wrapper.model

    @property
    def model(self) -> nn.Module:
        return self._models["rembg_model"]

    def __call__(self, image):
        self._models["rembg_model"]
        return self._wrapper(image)

    def to(self, device):
        return self

    def cpu(self):
        return self


@contextlib.contextmanager
def on_device(device: torch.device):
    """Build modules on ``device`` and make ``safetensors.torch.load_file`` read to it.

    The port's ``from_pretrained`` imports ``load_file`` inside the function, so the patched
    default applies there; code that imported it earlier keeps reading to the CPU (correct,
    with a transient CPU copy). On the CPU nothing is patched.
    """
    if device.type == "cpu":
        yield
        return
    import safetensors.torch as st
    original = st.load_file

    def shim(filename, device="cpu"):
        return original(filename, device=str(target) if device in (None, "cpu") else device)

    target = device
    with torch.device(device), patched(st, "load_file", shim):
        yield


class StagedBuild:
    """The staged pipeline of one ``adapter.Pixal3DRun`` (``run``) and the loaders of its
    ``StagedModels``.

    Reads the run's ``port``, ``gm``, ``device``, ``model_path``, ``args``, ``plan``,
    ``pipeline_type``, ``preserve_rng``, ``direct_to_device``, ``prefetch`` (the plan's files
    per model go to the ``StagedModels``: ``prefetch_files.model_files``), ``entry_points`` and
    ``port_load_moge``; sets its ``pipeline``, ``models`` and ``runtime_note``; fills its
    ``load_notes`` and ``share_stats``; enters ``setup`` through ``run.enter``. Raises
    ``PortVersionError`` when the port does not build its pipeline the way this relies on.
    """

    def __init__(self, run):
        self.run = run
        self.rembg: StagedRembg | None = None
        self._cpu_built: dict[str, str] = {}

    def build(self) -> None:
        """The staged pipeline. With the port's ``load_pipeline``, it runs as written, its
        ``init_pipeline`` replaced for the call by the deferred construction (so what
        ``load_pipeline`` adds — the texture recalibration — applies to the staged
        pipeline)."""
        run = self.run
        if not run.entry_points:
            self.build_pipeline()
            return
        with patched(run.gm, "init_pipeline", lambda model_path, device: self.build_pipeline()):
            pipeline = run.gm.load_pipeline(run.args, run.device)
        if pipeline is not run.pipeline:
            raise PortVersionError("The port's load_pipeline did not return the pipeline its "
                                   "init_pipeline built.", _EAGER, ("load_pipeline",))

    def build_pipeline(self):
        """Construct the pipeline with every load deferred, put the staged models in, enter
        ``setup`` and move it to the device; returns the pipeline (``init_pipeline``'s
        place)."""
        run = self.run
        recorded = run.port.models.from_pretrained
        pipeline = self._construct()
        loaders = self._loaders(pipeline.models, recorded)
        rembg = pipeline.rembg_model
        files = (model_files(run.port.root, run.pipeline_type, run.model_path) if run.prefetch
                 else {})
        run.models = StagedModels(loaders, dict(run.plan), events=run.relay,
                                  preserve_rng=run.preserve_rng,
                                  files={k: v for k, v in files.items() if k in loaders},
                                  prefetch=run.prefetch)
        self.rembg = StagedRembg(run.models, rembg.cls, rembg.kwargs, run.device, self.building)
        pipeline.models = run.models
        pipeline.rembg_model = self.rembg
        pipeline.low_vram = False
        for attr in EXTRACTOR_KEYS.values():
            setattr(pipeline, attr, PendingExtractor(attr))
        run.pipeline = pipeline
        run.enter("setup")
        if run.direct_to_device:
            # Runtime, not weights: the first initialiser on a meta tensor imports
            # torch._dynamo (~70 MB, 1.5-2.5 s, once per process; see
            # direct.prepare_meta_runtime). Paid here, in setup, with the interpreter's other
            # fixed costs, so no later stage's window (and no model's load time) carries it.
            run.runtime_note = prepare_meta_runtime()
        pipeline.to(run.device)
        return pipeline

    def _construct(self):
        """The port's ``from_pretrained`` with every model and the background remover
        recorded instead of loaded. Raises ``PortVersionError`` when one was built anyway."""
        port = self.run.port
        with patched(port.models, "from_pretrained", lambda path, **kw: _Deferred(path)), \
                patched(port.pipeline_module, "rembg",
                        _RecordingNamespace(port.pipeline_module.rembg)):
            pipeline = port.pipeline_cls.from_pretrained(self.run.model_path)
        deferred = getattr(pipeline, "models", {})
        not_deferred = [k for k, v in deferred.items() if not isinstance(v, _Deferred)]
        if not_deferred or not isinstance(pipeline.rembg_model, _DeferredRembg):
            raise PortVersionError(
                "The port's Pixal3DImageTo3DPipeline.from_pretrained did not build its models "
                "through pixal3d.models.from_pretrained and the module's rembg namespace "
                f"(built directly: {', '.join(not_deferred) or 'rembg_model'}); the staged "
                "adapter cannot defer them.", _EAGER, tuple(not_deferred))
        return pipeline

    def _loaders(self, deferred: dict, from_pretrained: Callable) -> dict:
        """Name → loader for every model the plan may load. Raises ``PortVersionError`` when
        the plan names one the pipeline's ``pipeline.json`` does not list."""
        run = self.run
        loaders: dict[str, Callable[[], nn.Module]] = {}
        for name, placeholder in deferred.items():
            loaders[name] = self.model_loader(name, from_pretrained, placeholder.path)
        loaders["camera_estimator"] = self.build_camera_estimator
        loaders["image_cond_backbone"] = self.build_extractors
        loaders["naf"] = self.build_naf
        loaders["rembg_model"] = lambda: self.rembg.build()
        missing = sorted({n for ns in dict(run.plan).values() for n in ns} - set(loaders))
        if missing:
            raise PortVersionError(f"pipeline.json of {run.model_path} lists no "
                                   f"{', '.join(missing)}; the {run.pipeline_type} plan needs "
                                   "them.", "Check the model folder (its pipeline.json) or the "
                                   "pipeline type.", tuple(missing))
        return loaders

    def building(self):
        """Where the port's code builds modules: the run's device with ``direct_to_device``,
        else the CPU (:func:`on_device`)."""
        run = self.run
        return on_device(run.device if run.direct_to_device else torch.device("cpu"))

    def model_loader(self, name: str, from_pretrained: Callable,
                     path: str) -> Callable[[], nn.Module]:
        """Loader of one ``pipeline.models`` entry: with ``direct_to_device``, parameters built
        on meta and the safetensors assigned on the device (``direct.load_port_model``), else
        (``--no-direct-load``) the port's own ``from_pretrained`` on the CPU, then moved. The
        fallback of the direct path is the port's loader on the device, for that model only."""
        run = self.run
        prefix = f"{run.model_path}/"
        bare = path[len(prefix):] if path.startswith(prefix) else None

        bare_used: list = []  # the port's bare-name retry, when it was taken (a warning)

        def port_load() -> nn.Module:
            device = run.device if run.direct_to_device else torch.device("cpu")
            module, reason = build_with_cpu_retry(
                lambda: with_bare_fallback(lambda p: load_checked(from_pretrained, p), path,
                                           bare, bare_used.append), device, on_device)
            if reason is not None:
                log.warning("%s: %s", name, reason)
                self._cpu_built[name] = reason
            return module

        def load() -> nn.Module:
            if run.direct_to_device:
                model, note = with_bare_fallback(
                    lambda p: load_port_model(run.port.models, p, run.device, port_load),
                    path, bare, bare_used.append)
            else:
                model, note = port_load(), LoadNote(METHOD_PORT, None, None)
            cpu = self._cpu_built.pop(name, None)
            extra = [r for r in (cpu, *bare_used) if r]
            bare_used.clear()
            if extra:
                note = LoadNote(note.method, "; ".join(r for r in (note.fallback, *extra) if r),
                                note.checkpoint)
            if note.fallback:
                log.warning("%s: loaded with the port's own from_pretrained instead: %s", name,
                            note.fallback)
                warn_fallback(run, name, note.fallback)
            run.load_notes[name] = note
            model.eval()
            return model.to(run.device)
        return load

    def build_camera_estimator(self) -> nn.Module:
        """Loader of ``camera_estimator``: the port's ``load_moge_model`` with MoGe-2's weights
        assigned once on the device (``hub_loads.load_camera_estimator``; ``--no-direct-load``:
        MoGe's own loading). A fallback to MoGe's own is a ``warning`` event."""
        run = self.run
        if not run.direct_to_device:
            return run.port_load_moge(run.device)
        model, note = load_camera_estimator(run.port_load_moge, run.device)
        if note.fallback:
            log.warning("camera_estimator: loaded with MoGe's own from_pretrained instead: %s",
                        note.fallback)
            warn_fallback(run, "camera_estimator", note.fallback)
        run.load_notes["camera_estimator"] = note
        return model

    def build_extractors(self) -> nn.Module:
        """Loader of ``image_cond_backbone``: four extractors, one backbone; returns it.

        Loaded again inside a run (the backbone released after a conditioning pass,
        ``stageload.pixal3d.releases``), the extractors already on the pipeline stay the
        pipeline's and get the new backbone: the port's ``run()`` reads
        ``self.image_cond_model_*`` as the argument of ``get_proj_cond_shape`` before the stage
        hook loads the backbone, so the object that pass computes with is the one already
        there. The new extractors built here only carry the backbone over (they hold no
        weights of their own; NAF is the ``naf`` entry's)."""
        run = self.run
        icp, configs = run.port.icp, run.gm.IMAGE_COND_CONFIGS
        with share(icp.DINOv3ViTModel, "from_pretrained") as shared, self.building():
            extractors = {attr: run.gm.build_image_cond_model(configs[key], run.device)
                          for key, attr in EXTRACTOR_KEYS.items()}
        backbones = {id(e.model) for e in extractors.values()}
        if len(backbones) != 1:
            raise PortVersionError("The extractors did not get their backbone from "
                                   "DINOv3ViTModel.from_pretrained, so it could not be shared.",
                                   _EAGER, ("DINOv3ViTModel.from_pretrained",))
        run.share_stats["backbone"] = (shared.calls, shared.hits)
        backbone = next(iter(extractors.values())).model
        models = run.models
        naf = models["naf"] if models is not None and "naf" in models.loaded() else None
        for attr, extractor in extractors.items():
            built = getattr(run.pipeline, attr, None)
            if isinstance(built, nn.Module):
                built.model = backbone
                extractor = built
            if naf is not None and getattr(extractor, "use_naf_upsample", False):
                extractor.naf_model = naf
            setattr(run.pipeline, attr, extractor)
        return backbone

    def build_naf(self) -> nn.Module:
        """Loader of ``naf``: one NAF for every extractor that upsamples; returns it."""
        run = self.run
        run.models["image_cond_backbone"]  # the extractors (and their device) first
        import torch.hub
        users = [getattr(run.pipeline, attr) for attr in EXTRACTOR_KEYS.values()
                 if getattr(getattr(run.pipeline, attr), "use_naf_upsample", False)]
        with share(torch.hub, "load") as shared, self.building():
            for extractor in users:
                extractor.naf_model = None
                extractor._load_naf()
        run.share_stats["naf"] = (shared.calls, shared.hits)
        nafs = {id(e.naf_model) for e in users}
        if len(nafs) != 1:
            raise PortVersionError("The extractors' NAF upsamplers did not come from one "
                                   "torch.hub.load call.", _EAGER, ("_load_naf",))
        return users[0].naf_model
