"""``Pixal3DRun``: build a Pixal3D-mac pipeline with staged (or the port's own eager) loading,
run one image after another through the port's own ``run()``, export the port's own GLB.

Staged mode, in order (names and files: see the package docstring):

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
   that builds the port's wrapper when called.
3. Still in ``setup``, with ``direct_to_device``: ``direct.prepare_meta_runtime()`` pays the
   one-time import of ``torch._dynamo`` that the first initialiser on a meta tensor triggers
   (runtime, ~70 MB; otherwise paid inside the first model's load and carried by every later
   stage). ``low_vram`` is set False (on unified memory its CPU parking frees nothing and adds a copy)
   and ``pipeline.to(device)`` is called as ``init_pipeline`` does.
4. Stage hooks (``stageload.on_call``) on the pipeline instance: ``preprocess_image``
   (enters ``preprocess``; on return enters ``camera``, which releases the background remover),
   ``get_proj_cond_ss`` (``structure``), ``get_proj_cond_shape`` (``shape_512``,
   ``shape_1024`` or ``texture``, told apart by which extractor object is passed),
   ``decode_latent`` (``decode``). Before ``export`` everything is released.
5. The backbone: the four extractors are built with the port's ``build_image_cond_model`` and
   ``IMAGE_COND_CONFIGS`` inside ``share(image_conditioned_proj.DINOv3ViTModel,
   "from_pretrained")``, so one backbone object serves all four; the NAF upsampler likewise
   inside ``share(torch.hub, "load")`` around each extractor's ``_load_naf()``. Each extractor
   stays its own object (``get_proj_cond_shape`` changes ``grid_resolution``/``proj_grid`` of
   the extractor it is given).

Eager mode runs ``generate_mps.init_pipeline`` (the port's own loading: every model, four
backbones, three NAFs, ``low_vram`` as the port sets it) with the same stage hooks, reporting
each load as a ``load`` event in ``setup``.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn

from ..events import EventSink, make_event
from ..hooks import on_call
from ..patching import patched
from ..releasing import module_bytes
from ..sharing import share
from ..staged import StagedModels
from .direct import (METHOD_PORT, LoadNote, RuntimeNote, build_with_cpu_retry, load_port_model,
                     prepare_meta_runtime, with_bare_fallback)
from .export import ResolvedExport, port_argv, run_export, save_asset
from . import knobs
from .choices import PIPELINE_ADVICE, PIPELINE_ADVICE_SOURCE
from .errors import EmptyMeshError, KnobRefused, PortVersionError
from .fingerprint import FingerprintRecorder
from .plan import SHAPE_PASS_STAGE, STAGES, keep_across_gap, plan_for
from .port import EXTRACTOR_KEYS, HANDOVER_NAMES, Port, open_port
from .portargs import given_options, port_namespace
from .prefetch_files import model_files

log = logging.getLogger(__name__)

#: Pipeline types the port itself advises against, with its advice (warning event at start).
PIPELINE_WARNINGS, PIPELINE_WARNING_SOURCE = PIPELINE_ADVICE, PIPELINE_ADVICE_SOURCE

SAMPLER_STAGE_KEY = {"structure": "sparse_structure", "shape_512": "shape_512",
                     "shape_1024": "shape_1024", "texture": "texture"}


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
        raise RuntimeError(f"pipeline.{self._attr} was called before the structure stage built it")


class StagedRembg:
    """``pipeline.rembg_model`` in staged mode: calls build the port's wrapper through the
    ``StagedModels`` entry ``rembg_model`` (its network is what is loaded and released).

    ``model``: the loaded network (loads it); ``to()``/``cpu()``: no-ops (staged mode builds on
    the device and never parks on the CPU).
    """

    def __init__(self, models: StagedModels, cls: type, kwargs: dict, device: torch.device):
        self._models = models
        self._cls = cls
        self._kwargs = kwargs
        self._device = device
        self._wrapper = None

    def build(self) -> nn.Module:
        """Loader for the ``rembg_model`` entry: a fresh port wrapper, moved to the device with
        its own ``to()`` (the port's ``to`` does the same when ``low_vram`` is off); returns its
        ``.model``."""
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
def _on_device(device: torch.device):
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


class Pixal3DRun:
    """A Pixal3D-mac pipeline with staged (default) or eager loading, for many images.

    Args:
        port_dir: the Pixal3D-mac folder (None: ``$PIXAL3D_DIR`` or the interpreter's own).
        device: ``"mps"``, ``"cuda"`` or ``"cpu"`` (default: mps when available, else cpu).
        model_path: the port's ``--model-path`` (default its ``MODEL_PATH``, a Hugging Face id).
        load: ``"staged"`` or ``"eager"`` (the port's own ``init_pipeline``).
        pipeline_type: ``"1024_cascade"`` or ``"1536_cascade"``.
        keep_resident: bytes a model needed again later may keep occupying across stages that do
            not list it (the shape decoder between ``shape_512`` and ``decode``); 0 keeps none.
        events: sink for stage/ready/load/reload/release events (see ``stageload.events``).
        preserve_rng: restore every generator after each load (False only for the control run).
        fingerprint: folder for a fingerprint of each run (see ``fingerprint.py``), or None.
        direct_to_device: build the pipeline's models with parameters on ``meta`` and assign
            the safetensors read straight to ``device``; the backbone, NAF, background remover
            and camera estimator are built by the port's code under ``torch.device(device)``
            (default True; False builds and reads everything on the CPU with the port's own
            loaders, then moves: a transient second copy, for a port whose constructors dislike
            this).
        port_args: extra options for the port's own ``parse_args`` (``["--low-vram",
            "--no-native-remesh"]``), honoured or refused as ``knobs`` says.
        prefetch: staged only: once a stage is ready, read the next stage's weight files ahead
            into the OS's file cache (``stageload.prefetch``; the files per model from
            ``prefetch_files.model_files``); default True. Eager loads everything in setup.

    Runs the port's own entry points where it has them (0be9e69a: ``load_pipeline`` →
    ``image_to_asset`` → ``asset_to_glb``, with the environment set-up of its ``main()``);
    older ports (0578f857) through the ``main()`` steps they inline.

    Raises ``PortError`` subclasses before anything is loaded: ``PortMissing``,
    ``PortVersionError`` (the port lacks a name it relies on), ``KnobRefused`` (a port option
    or environment switch this mode cannot honour, named).
    Attributes after a run: ``load_notes`` (``pipeline.models`` name → ``direct.LoadNote``: how
    it was last loaded, and why it fell back if it did), ``runtime_note`` (``direct.RuntimeNote``:
    what setup paid for the meta-device runtime, staged with ``direct_to_device`` only; None
    otherwise), ``resident_bytes`` (stage → bytes of models loaded at the end of the
    stage), ``kept`` (stage → names kept across a gap), ``last_latents`` (key → sampler output),
    ``share_stats`` (``{"backbone": (calls, hits), "naf": (calls, hits)}``).
    """

    def __init__(self, port_dir: Optional[os.PathLike | str] = None, *, device: Optional[str] = None,
                 model_path: Optional[str] = None, load: str = "staged", pipeline_type: str = "1024_cascade",
                 keep_resident: int = 0, events: Optional[EventSink] = None, preserve_rng: bool = True,
                 fingerprint: Optional[os.PathLike | str] = None, port: Optional[Port] = None,
                 direct_to_device: bool = True, port_args: Sequence[str] = (),
                 prefetch: bool = True):
        if load not in ("staged", "eager"):
            raise ValueError(f"load must be 'staged' or 'eager', got {load!r}")
        if keep_resident < 0:
            raise ValueError(f"keep_resident is bytes >= 0, got {keep_resident}")
        self.plan = plan_for(pipeline_type)
        self.port = port or open_port(port_dir)  # PortError here: nothing loaded yet
        self.gm = self.port.gm
        self.device = torch.device(device or ("mps" if torch.backends.mps.is_available() else "cpu"))
        self.model_path = model_path or self.gm.MODEL_PATH
        self.load_mode = load
        self.pipeline_type = pipeline_type
        self.keep_resident = int(keep_resident)
        self._events = events
        self.preserve_rng = preserve_rng
        self.fingerprint_dir = Path(fingerprint) if fingerprint else None
        self.direct_to_device = direct_to_device
        self.prefetch = bool(prefetch)
        self.resident_bytes: dict[str, int] = {}
        self.kept: dict[str, list[str]] = {}
        self.last_latents: dict[str, Any] = {}
        self.share_stats: dict[str, tuple[int, int]] = {}
        self.load_notes: dict[str, LoadNote] = {}
        self.runtime_note: Optional[RuntimeNote] = None
        self._kept_now: list[str] = []
        self._recorder: Optional[FingerprintRecorder] = None
        self._hooks = []
        self._eager_stage: Optional[str] = None
        self.models: Optional[StagedModels] = None
        self.port_args = self._check_knobs(tuple(port_args))  # KnobRefused here: nothing loaded yet
        self._real_load_moge = self.gm.load_moge_model
        self._steps: dict[str, int] = {}
        self._cpu_built: dict[str, str] = {}
        if pipeline_type in PIPELINE_WARNINGS:
            self._emit("warning", message=PIPELINE_WARNINGS[pipeline_type], source=PIPELINE_WARNING_SOURCE)
        if load == "staged":
            self._build_staged()
        else:
            self._build_eager()
        self._install_hooks()

    # ------------------------------------------------------------------ events and stages
    @property
    def events(self) -> Optional[EventSink]:
        """The event sink; assigning it also redirects the staged models' events."""
        return self._events

    @events.setter
    def events(self, sink: Optional[EventSink]) -> None:
        self._events = sink  # the staged models report through _relay, which reads this

    def _relay(self, event: dict) -> None:
        """The staged models' sink: adds ``method`` (``"meta_assign"`` or
        ``"port_from_pretrained"``) and, when the direct path fell back, ``fallback`` (the
        reason) to the load/reload event of a ``pipeline.models`` entry, then passes it on."""
        if event.get("event") in ("load", "reload"):
            note = self.load_notes.get(event.get("model"))
            if note is not None:
                event["method"] = note.method
                if note.fallback:
                    event["fallback"] = note.fallback
        if self._events is not None:
            self._events(event)

    def _emit(self, kind: str, **fields) -> None:
        if self.events is not None:
            self.events(make_event(kind, **fields))

    @property
    def entry_points(self) -> bool:
        """Whether the port has ``load_pipeline``/``image_to_asset``/``asset_to_glb`` (0be9e69a)."""
        return all(callable(getattr(self.gm, n, None)) for n in ("load_pipeline", "image_to_asset", "asset_to_glb"))

    @property
    def can_hand_over(self) -> bool:
        """Whether the port has what an export process needs (``port.HANDOVER_NAMES``: its
        asset, mesh checkpoint writer and reader, ``asset_to_glb``)."""
        return all(hasattr(self.gm, n) for n in HANDOVER_NAMES)

    def _check_knobs(self, extra: tuple) -> tuple:
        """Refuse (``KnobRefused``, naming each) the port options and environment switches this
        mode cannot honour; then set the port's environment up as its ``main()`` does
        (``_configure_fdg_environment``). Returns ``extra``."""
        given = given_options(self.gm, extra)
        refused = knobs.refusals(given, os.environ, self.load_mode)
        if refused:
            raise KnobRefused(
                f"{self.load_mode.capitalize()} Pixal3D cannot honour " +
                "; ".join(f"{name} ({why})" for name, why in refused) + ". Nothing was loaded.",
                "Unset or leave these out" + (", or run with --load eager" if self.load_mode == "staged" else "")
                + " (docs/pixal3d.md lists every option and switch).", tuple(name for name, _ in refused))
        self.args = self._namespace(extra=extra)
        configure = getattr(self.gm, "_configure_fdg_environment", None)
        if callable(configure):
            configure(self.args)
        return extra

    def _namespace(self, **values):
        """The port's argument namespace with the adapter's values (see ``portargs``)."""
        values.setdefault("extra", getattr(self, "port_args", ()))
        return port_namespace(self.gm, model_path=self.model_path, pipeline_type=self.pipeline_type, **values)

    @property
    def stage(self) -> Optional[str]:
        """The current stage (None before setup and after close)."""
        return self.models.stage if self.models is not None else self._eager_stage

    def enter(self, stage: str) -> None:
        """Begin ``stage``: note what the ending stage held, apply the keep-resident policy,
        then (staged) release what the stage does not need, or (eager) just announce it."""
        current = self.stage
        if current is not None:
            self.resident_bytes[current] = self._resident()
        if self.models is not None:
            loaded = {name: module_bytes(m) for name, m in self.models.items()}
            keep = keep_across_gap(self.plan, stage, loaded, self.keep_resident)
            for name in self._kept_now:
                if name not in keep:
                    self.models.unpin(name)
            for name in keep:
                self.models.pin(name)
            self._kept_now = keep
            self.kept[stage] = list(keep)
            self.models.enter(stage)
        else:
            start = time.perf_counter()
            self._eager_stage = stage
            self._emit("stage", stage=stage, index=STAGES.index(stage), count=len(STAGES))
            self._emit("ready", stage=stage, seconds=time.perf_counter() - start, released_bytes=0)

    def _resident(self) -> int:
        if self.models is not None:
            return sum(module_bytes(m) for m in self.models.values())
        seen, total = set(), 0
        for module in self._eager_modules():
            for t in list(module.parameters()) + list(module.buffers()):
                if id(t) not in seen and t.device.type != "meta":
                    seen.add(id(t))
                    total += t.numel() * t.element_size()
        return total

    def _eager_modules(self):
        p = self.pipeline
        out = [m for m in p.models.values() if isinstance(m, nn.Module)]
        out += [getattr(p, a) for a in EXTRACTOR_KEYS.values() if isinstance(getattr(p, a, None), nn.Module)]
        if getattr(p, "rembg_model", None) is not None and isinstance(getattr(p.rembg_model, "model", None), nn.Module):
            out.append(p.rembg_model.model)
        return out

    # ------------------------------------------------------------------ building
    def _build_staged(self) -> None:
        """Staged pipeline. With the port's ``load_pipeline``, it runs as written, its
        ``init_pipeline`` replaced for the call by the deferred construction (so what
        ``load_pipeline`` adds — the texture recalibration — applies to the staged pipeline)."""
        if not self.entry_points:
            self._build_staged_pipeline()
            return
        with patched(self.gm, "init_pipeline", lambda model_path, device: self._build_staged_pipeline()):
            pipeline = self.gm.load_pipeline(self.args, self.device)
        if pipeline is not self.pipeline:
            raise PortVersionError("The port's load_pipeline did not return the pipeline its init_pipeline "
                                   "built.", "Use --load eager with this port version.", ("load_pipeline",))

    def _build_staged_pipeline(self):
        port = self.port
        names = dict(self.plan)
        recorded = port.models.from_pretrained
        with patched(port.models, "from_pretrained", lambda path, **kw: _Deferred(path)), \
                patched(port.pipeline_module, "rembg", _RecordingNamespace(port.pipeline_module.rembg)):
            pipeline = port.pipeline_cls.from_pretrained(self.model_path)
        deferred = getattr(pipeline, "models", {})
        not_deferred = [k for k, v in deferred.items() if not isinstance(v, _Deferred)]
        if not_deferred or not isinstance(pipeline.rembg_model, _DeferredRembg):
            raise PortVersionError("The port's Pixal3DImageTo3DPipeline.from_pretrained did not build "
                            "its models through pixal3d.models.from_pretrained and the module's rembg namespace "
                            f"(built directly: {', '.join(not_deferred) or 'rembg_model'}); the staged adapter "
                            "cannot defer them.", "Use --load eager with this port version.", tuple(not_deferred))
        loaders: dict[str, Callable[[], nn.Module]] = {}
        for name, placeholder in deferred.items():
            loaders[name] = self._model_loader(name, recorded, placeholder.path)
        rembg = pipeline.rembg_model
        self.rembg = None
        loaders["camera_estimator"] = lambda: self._real_load_moge(self.device)
        loaders["image_cond_backbone"] = self._build_extractors
        loaders["naf"] = self._build_naf
        loaders["rembg_model"] = lambda: self.rembg.build()
        missing = sorted({n for ns in names.values() for n in ns} - set(loaders))
        if missing:
            raise PortVersionError(f"pipeline.json of {self.model_path} lists no "
                            f"{', '.join(missing)}; the {self.pipeline_type} plan needs them.",
                            "Check the model folder (its pipeline.json) or the pipeline type.", tuple(missing))
        files = model_files(self.port.root, self.pipeline_type, self.model_path) if self.prefetch else {}
        self.models = StagedModels(loaders, names, events=self._relay, preserve_rng=self.preserve_rng,
                                   files={k: v for k, v in files.items() if k in loaders},
                                   prefetch=self.prefetch)
        self.rembg = StagedRembg(self.models, rembg.cls, rembg.kwargs, self.device)
        pipeline.models = self.models
        pipeline.rembg_model = self.rembg
        pipeline.low_vram = False
        for attr in EXTRACTOR_KEYS.values():
            setattr(pipeline, attr, PendingExtractor(attr))
        self.pipeline = pipeline
        self.enter("setup")
        if self.direct_to_device:
            # Runtime, not weights: the first initialiser on a meta tensor imports
            # torch._dynamo (~70 MB, 1.5-2.5 s, once per process; see
            # direct.prepare_meta_runtime). Paid here, in setup, with the interpreter's other
            # fixed costs, so no later stage's window (and no model's load time) carries it.
            self.runtime_note = prepare_meta_runtime()
        pipeline.to(self.device)
        return pipeline

    def _building(self):
        return _on_device(self.device if self.direct_to_device else torch.device("cpu"))

    def _model_loader(self, name: str, from_pretrained: Callable, path: str) -> Callable[[], nn.Module]:
        """Loader of one ``pipeline.models`` entry: with ``direct_to_device``, parameters built
        on meta and the safetensors assigned on the device (``direct.load_port_model``), else
        (``--no-direct-load``) the port's own ``from_pretrained`` on the CPU, then moved. The
        fallback of the direct path is the port's loader on the device, for that model only."""
        prefix = f"{self.model_path}/"
        bare = path[len(prefix):] if path.startswith(prefix) else None

        def port_load() -> nn.Module:
            device = self.device if self.direct_to_device else torch.device("cpu")
            module, reason = build_with_cpu_retry(lambda: with_bare_fallback(from_pretrained, path, bare),
                                                  device, _on_device)
            if reason is not None:
                log.warning("%s: %s", name, reason)
                self._cpu_built[name] = reason
            return module

        def direct_load() -> tuple[nn.Module, LoadNote]:
            return with_bare_fallback(lambda p: load_port_model(self.port.models, p, self.device, port_load),
                                      path, bare)

        def load() -> nn.Module:
            if self.direct_to_device:
                model, note = direct_load()
            else:
                model, note = port_load(), LoadNote(METHOD_PORT, None, None)
            cpu = self._cpu_built.pop(name, None)
            if cpu is not None:
                note = LoadNote(note.method, "; ".join(r for r in (note.fallback, cpu) if r), note.checkpoint)
            if note.fallback:
                log.warning("%s: loaded with the port's own from_pretrained instead: %s", name, note.fallback)
            self.load_notes[name] = note
            model.eval()
            return model.to(self.device)
        return load

    def _build_extractors(self) -> nn.Module:
        """Loader of ``image_cond_backbone``: four extractors, one backbone; returns it."""
        icp, configs = self.port.icp, self.gm.IMAGE_COND_CONFIGS
        with share(icp.DINOv3ViTModel, "from_pretrained") as shared, self._building():
            extractors = {attr: self.gm.build_image_cond_model(configs[key], self.device)
                          for key, attr in EXTRACTOR_KEYS.items()}
        backbones = {id(e.model) for e in extractors.values()}
        if len(backbones) != 1:
            raise PortVersionError("The extractors did not get their backbone from "
                            "DINOv3ViTModel.from_pretrained, so it could not be shared.",
                            "Use --load eager with this port version.", ("DINOv3ViTModel.from_pretrained",))
        self.share_stats["backbone"] = (shared.calls, shared.hits)
        naf = self.models["naf"] if self.models is not None and "naf" in self.models.loaded() else None
        for attr, extractor in extractors.items():
            if naf is not None and getattr(extractor, "use_naf_upsample", False):
                extractor.naf_model = naf
            setattr(self.pipeline, attr, extractor)
        return next(iter(extractors.values())).model

    def _build_naf(self) -> nn.Module:
        """Loader of ``naf``: one NAF for every extractor that upsamples; returns it."""
        self.models["image_cond_backbone"]  # the extractors (and their device) first
        import torch.hub
        users = [getattr(self.pipeline, attr) for attr in EXTRACTOR_KEYS.values()
                 if getattr(getattr(self.pipeline, attr), "use_naf_upsample", False)]
        with share(torch.hub, "load") as shared, self._building():
            for extractor in users:
                extractor.naf_model = None
                extractor._load_naf()
        self.share_stats["naf"] = (shared.calls, shared.hits)
        nafs = {id(e.naf_model) for e in users}
        if len(nafs) != 1:
            raise PortVersionError("The extractors' NAF upsamplers did not come from one "
                            "torch.hub.load call.", "Use --load eager with this port version.", ("_load_naf",))
        return users[0].naf_model

    def _build_eager(self) -> None:
        """The port's own ``init_pipeline``, with each load reported as a ``load`` event."""
        self.enter("setup")
        port = self.port
        real_models = port.models.from_pretrained
        import torch.hub
        counts: dict[str, int] = {}

        def timed(kind: str, fn: Callable, name_of: Callable[..., str]):
            def wrapper(*args, **kwargs):
                start = time.perf_counter()
                module = fn(*args, **kwargs)
                seconds = time.perf_counter() - start
                name = name_of(*args, **kwargs)
                counts[name] = counts.get(name, 0) + 1
                if counts[name] > 1:
                    name = f"{name}#{counts[name]}"
                self._emit("load", model=name, stage=self.stage, bytes=module_bytes(module) if isinstance(module, nn.Module) else 0,
                           seconds=seconds, outside_stage=False)
                return module
            return wrapper

        ckpt_names = {}
        with patched(port.models, "from_pretrained",
                      timed("model", real_models, lambda path, **kw: ckpt_names.setdefault(path, Path(str(path)).name))), \
                patched(torch.hub, "load", timed("naf", torch.hub.load, lambda *a, **k: "naf")), \
                patched(port.icp.DINOv3ViTModel, "from_pretrained",
                         staticmethod(timed("backbone", port.icp.DINOv3ViTModel.from_pretrained,
                                            lambda *a, **k: "image_cond_backbone"))):
            self.pipeline = (self.gm.load_pipeline(self.args, self.device) if self.entry_points
                             else self.gm.init_pipeline(self.model_path, self.device))
        rembg = getattr(self.pipeline.rembg_model, "model", None)
        if isinstance(rembg, nn.Module):
            self._emit("load", model="rembg_model", stage="setup", bytes=module_bytes(rembg), seconds=0.0,
                       outside_stage=False)

    # ------------------------------------------------------------------ hooks
    def _install_hooks(self) -> None:
        p = self.pipeline

        def shape_pass(image_cond_model, *args, **kwargs):
            for attr, stage in SHAPE_PASS_STAGE.items():
                if image_cond_model is getattr(p, attr):
                    self.enter(stage)
                    if self.models is not None:
                        self.models["image_cond_backbone"]
                        self.models["naf"]
                    return
            raise PortVersionError("get_proj_cond_shape was called with an extractor that is "
                            "none of image_cond_model_shape_512/_shape_1024/_tex_1024.",
                            "This port version calls it differently; use --load eager.",
                            ("get_proj_cond_shape",))

        def structure(*args, **kwargs):
            self.enter("structure")
            if self.models is not None:
                self.models["image_cond_backbone"]

        self._hooks = [
            on_call(p, "preprocess_image", before=lambda *a, **k: self.enter("preprocess"),
                    after=lambda *a, **k: self.enter("camera")),
            on_call(p, "get_proj_cond_ss", before=structure),
            on_call(p, "get_proj_cond_shape", before=shape_pass),
            on_call(p, "decode_latent", before=lambda *a, **k: self.enter("decode")),
        ]
        for attr in ("sparse_structure_sampler", "shape_slat_sampler", "tex_slat_sampler"):
            sampler = getattr(p, attr, None)
            if sampler is not None and hasattr(sampler, "__dict__"):
                self._hooks.append(on_call(sampler, "sample", before=self._sampling_begins(sampler),
                                           after=self._record_sample))
                if callable(getattr(sampler, "sample_once", None)):
                    self._hooks.append(on_call(sampler, "sample_once", after=self._step_done(sampler)))

    def _sampling_begins(self, sampler):
        """Before ``sampler.sample``: note its number of steps (the ``steps`` it is given, else
        the default of its class's ``sample``) and emit ``progress`` 0 for the stage."""
        default = inspect.signature(type(sampler).sample).parameters.get("steps")

        def before(*args, **kwargs) -> None:
            steps = kwargs.get("steps", getattr(default, "default", None))
            self._steps["total"] = int(steps) if isinstance(steps, int) and steps > 0 else 0
            self._steps["done"] = 0
            self._emit("progress", stage=self.stage, fraction=0.0, step=0, steps=self._steps["total"])
        return before

    def _step_done(self, sampler):
        """After each ``sample_once`` of ``sampler`` (one step of its loop): a ``progress``
        event with the fraction of the stage's sampling done."""
        def after(result, *args, **kwargs) -> None:
            self._steps["done"] = self._steps.get("done", 0) + 1
            total = self._steps.get("total") or 0
            fraction = min(1.0, self._steps["done"] / total) if total else 0.0
            self._emit("progress", stage=self.stage, fraction=fraction, step=self._steps["done"], steps=total)
        return after

    def _record_sample(self, result, *args, **kwargs) -> None:
        samples = getattr(result, "samples", None)
        key = SAMPLER_STAGE_KEY.get(self.stage or "", self.stage or "unknown")
        if samples is None:
            return
        name = key if key not in self.last_latents else f"{key}_{len(self.last_latents)}"
        self.last_latents[name] = samples
        if self._recorder is not None:
            self._recorder.record(key, samples)

    # ------------------------------------------------------------------ running
    def camera_params(self, image, *, fov: Optional[float] = None, mesh_scale: float = 1.0,
                      extend_pixel: int = 0, image_resolution: int = 512) -> dict:
        """The ``camera`` stage as the port's ``main()`` does it: MoGe-2 on the preprocessed
        image, or the manual field of view ``fov`` (radians, > 0) without MoGe."""
        gm = self.gm
        if self.stage != "camera":
            self.enter("camera")
        if fov is not None and fov > 0:
            distance = gm.distance_from_fov(fov, torch.tensor([-1.0, 0.0, 0.0]),
                                            torch.tensor([0 - extend_pixel, image_resolution - 1 + extend_pixel]),
                                            mesh_scale, image_resolution)["distance_from_x"]
            return {"camera_angle_x": float(fov), "distance": distance, "mesh_scale": mesh_scale}
        if self.models is not None:
            moge = self.models["camera_estimator"]
        else:
            start = time.perf_counter()
            moge = gm.load_moge_model(self.device)
            self._emit("load", model="camera_estimator", stage="camera", bytes=module_bytes(moge),
                       seconds=time.perf_counter() - start, outside_stage=False)
        with tempfile.TemporaryDirectory(prefix="pixal3d-camera-") as tmp:
            path = Path(tmp) / "preprocessed.png"
            image.save(path)
            params = gm.get_camera_params_wild_moge(path, moge, device=self.device, mesh_scale=mesh_scale,
                                                    extend_pixel=extend_pixel, image_resolution=image_resolution)
        del moge
        gm.maybe_empty_cache(self.device)
        return params

    def generate(self, image, output: os.PathLike | str, *, seed: int = 42, texture_size: int = 2048,
                 fov: Optional[float] = None, steps: Optional[int] = None, max_num_tokens: int = 49152,
                 no_texture: bool = False, export: Optional[ResolvedExport] = None,
                 handover: Optional[os.PathLike | str] = None) -> dict:
        """One image (a PIL image or a path) → a GLB at ``output``, as the port's ``main()``.

        ``export``: the export levers (``stageload.pixal3d.export``; None: the port's own).
        ``handover``: instead of exporting, release every model and write the decoded asset
        there with the port's own mesh checkpoint (``export.save_asset``; ``.npz``, must not
        exist) for an export process (``export.export_handover``); no ``export`` stage is
        entered here and the result gets ``"handover"`` (a port without ``HANDOVER_NAMES``
        exports here instead, with a warning, and the result has no ``"handover"``).

        ``output`` must not exist (``FileExistsError``; the runner decides about overwriting and
        passes a temporary name). Returns ``{"output", "vertices", "faces", "resolution",
        "seconds", "resident_bytes", "kept", "latents": [keys], "fingerprint": folder|None}``.
        Raises ``EmptyMeshError`` when the decoder produced an empty mesh (the port stops there),
        ``KnobRefused`` for a value the port's parser rejects, ``RuntimeError`` when the port's
        export wrote no GLB.
        """
        from PIL import Image
        output = Path(output)
        if output.exists():
            raise FileExistsError(f"{output} exists; the adapter never overwrites a file")
        settings = export or ResolvedExport()
        args = self._namespace(output=str(output), seed=seed, texture_size=texture_size, fov=fov, steps=steps,
                               max_num_tokens=max_num_tokens, no_texture=no_texture,
                               extra=tuple(self.port_args) + tuple(port_argv(settings)))
        if not isinstance(image, Image.Image):
            image = Image.open(image)
        start = time.perf_counter()
        self.last_latents, self.resident_bytes = {}, {}
        self._recorder = self._new_recorder()
        asset = self._image_to_asset(image, output, args)
        if self._recorder is not None:
            self._recorder.record("mesh", asset.mesh)
        if handover is not None and not self.can_hand_over:
            log.warning("this port cannot write the hand-over (%s): exporting in this process",
                        ", ".join(n for n in HANDOVER_NAMES if not hasattr(self.gm, n)))
            handover = None
        if handover is not None:
            if self.models is not None:
                self.models.close()  # the process exits next: nothing stays loaded meanwhile
            save_asset(self.gm, asset, handover)
        else:
            self._export(asset, output, args, settings)
        fingerprint = None
        if self._recorder is not None:
            fingerprint = str(self._recorder.close({"seed": seed, "load": self.load_mode,
                                                    "pipeline_type": self.pipeline_type,
                                                    "preserve_rng": self.preserve_rng,
                                                    "resolution": int(asset.resolution)}).parent)
            self._recorder = None
        result = {"output": str(output), "vertices": int(len(asset.vertices)), "faces": int(len(asset.faces)),
                  "resolution": int(asset.resolution), "seconds": time.perf_counter() - start,
                  "resident_bytes": dict(self.resident_bytes), "kept": dict(self.kept),
                  "latents": list(self.last_latents), "fingerprint": fingerprint}
        if handover is not None:
            result["handover"] = str(handover)
        return result

    def _export(self, asset, output: Path, args, settings: ResolvedExport) -> None:
        """The ``export`` stage in this process: release every model, then the port's
        ``asset_to_glb`` with the levers and the sub-step events (``export.run_export``)."""
        self.enter("export")
        if self.models is not None:
            self.models.close()  # pinned ones too: export needs no weights
        if self.entry_points:
            try:
                run_export(self.gm, asset, output, args, settings,
                           lambda event: self._events(event) if self._events is not None else None, self.device)
            except SystemExit as exc:
                raise RuntimeError(f"the port's asset_to_glb wrote no GLB at {output}: {exc.code}") from None
        else:
            self._legacy_export(asset, output, args)
        if not output.is_file() or output.stat().st_size == 0:
            raise RuntimeError(f"the port's export wrote no GLB at {output}")
        self.resident_bytes["export"] = self._resident()

    def _new_recorder(self) -> Optional[FingerprintRecorder]:
        if self.fingerprint_dir is None:
            return None
        folder = self.fingerprint_dir
        if (folder / "fingerprint.json").exists():
            n = 1
            while (folder.parent / f"{folder.name}_{n}" / "fingerprint.json").exists():
                n += 1
            folder = folder.parent / f"{folder.name}_{n}"
        return FingerprintRecorder(folder)

    def _image_to_asset(self, image, output: Path, args):
        """The port's ``image_to_asset`` (its ``load_moge_model`` answered by the staged or
        timed camera estimator), then ``save_mesh_checkpoint`` when ``--save-mesh`` is given, as
        ``main()`` does; ports without it: the same steps as their ``main()`` inlines them.
        An exit with status 2 (the port's empty-mesh stop) becomes ``EmptyMeshError``."""
        gm = self.gm
        if not self.entry_points:
            return self._legacy_image_to_asset(image, args)
        try:
            with patched(gm, "load_moge_model", self._moge_for_port):
                asset = gm.image_to_asset(self.pipeline, image, args, self.device, tmp_dir=output.parent)
        except SystemExit as exc:
            raise self._port_exit(exc, "image_to_asset") from None
        if getattr(args, "save_mesh", None):
            gm.save_mesh_checkpoint(args.save_mesh, asset.mesh, asset.vertices, asset.faces, asset.resolution)
        return asset

    def _port_exit(self, exc: SystemExit, where: str) -> Exception:
        if exc.code == 2:
            advice = getattr(self.gm, "watchdog_help_message", lambda: "")().strip()
            return EmptyMeshError("Pixal3D's decoder produced an empty mesh; the port stops here "
                                  f"(its {where} exited with status 2).",
                                  advice or "Retry with --steps 1 to check the model and export paths.")
        return RuntimeError(f"the port's {where} exited with status {exc.code!r}")

    def _moge_for_port(self, device, *args, **kwargs):
        """``load_moge_model`` while the port's ``image_to_asset`` runs: the staged camera
        estimator (loaded in ``camera``), or (eager) the port's own, timed as a ``load``."""
        if self.models is not None:
            return self.models["camera_estimator"]
        start = time.perf_counter()
        moge = self._real_load_moge(device, *args, **kwargs)
        self._emit("load", model="camera_estimator", stage=self.stage, bytes=module_bytes(moge),
                   seconds=time.perf_counter() - start, outside_stage=False)
        return moge

    def _legacy_export(self, asset, output: Path, args) -> None:
        """0578f857's ``main()`` export: geometry only / native o_voxel / fallback baker."""
        gm = self.gm
        if args.no_texture or not asset.has_voxels:
            gm.export_geometry_only(asset.vertices, asset.faces, output)
        elif not gm.try_export_native_o_voxel_glb(asset.mesh, asset.resolution, asset.vertices, asset.faces,
                                                  output, args):
            gm.export_fallback_texture_glb(asset.mesh, asset.vertices, asset.faces, output, args)

    def _legacy_image_to_asset(self, image, args):
        """0578f857's ``main()`` between ``init_pipeline`` and the export, step for step."""
        preprocessed = self.pipeline.preprocess_image(image)
        camera = self.camera_params(preprocessed, fov=args.fov, mesh_scale=args.mesh_scale,
                                    extend_pixel=args.extend_pixel, image_resolution=args.image_resolution)
        torch.manual_seed(args.seed)
        meshes, (_shape, _tex, resolution) = self.pipeline.run(
            preprocessed, camera_params=camera, seed=args.seed,
            sparse_structure_sampler_params=self.gm.sampler_overrides(args, "ss"),
            shape_slat_sampler_params=self.gm.sampler_overrides(args, "shape"),
            tex_slat_sampler_params=self.gm.sampler_overrides(args, "tex"), preprocess_image=False,
            return_latent=True, pipeline_type=self.pipeline_type, max_num_tokens=args.max_num_tokens)
        mesh = meshes[0]
        return _Asset(mesh, mesh.vertices.detach().cpu().numpy(), mesh.faces.detach().cpu().numpy(),
                      int(resolution), getattr(mesh, "attrs", None) is not None and getattr(mesh, "coords", None)
                      is not None)

    def close(self) -> None:
        """Release every model and remove the hooks. The object cannot run afterwards."""
        if self.models is not None:
            self.models.close()
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


@dataclass
class _Asset:
    """What 0578f857's ``main()`` hands from generation to export (0be9e69a: its
    ``Pixal3DAsset``)."""
    mesh: Any
    vertices: Any
    faces: Any
    resolution: int
    has_voxels: bool
