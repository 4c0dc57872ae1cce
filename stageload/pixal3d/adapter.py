"""``Pixal3DRun``: build a Pixal3D-mac pipeline with staged (or the port's own eager) loading,
run one image after another through the port's own ``run()``, export the port's own GLB.

The run's parts, one module each:

- ``build/staged.py``: staged mode — the pipeline constructed as the port does with every load
  deferred, then a ``StagedModels`` whose loaders read each model straight to the device when
  a stage needs it (its docstring gives the steps);
- ``build/eager.py``: eager mode — ``generate_mps.init_pipeline`` (the port's own loading:
  every model, four backbones, three NAFs, ``low_vram`` as the port sets it), each load
  reported as a ``load`` event in ``setup``;
- ``pipeline_hooks.py``: the stage, progress and latent hooks on the pipeline instance
  (``stageload.on_call``), installed and removed as objects; before ``export`` everything is
  released;
- ``camera.py``: the ``camera`` stage (MoGe-2 or a manual field of view);
- ``export/handover.py``: the end of generation — the hand-over file for an export process,
  or the ``export`` stage here;
- ``export/legacy.py``: the 0578f857-shaped path (ports without ``load_pipeline`` /
  ``image_to_asset`` / ``asset_to_glb``);
- ``options.py``: the run's options (``RunOptions``), each default the product's one.

This module holds what ties them: the port's argument namespace, the stage transitions and the
keep-resident policy, and ``generate``.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn

from meshfacts.choices import PIPELINE_ADVICE, PIPELINE_ADVICE_SOURCE
from stageload.pixal3d.build.direct import LoadNote, RuntimeNote
from stageload.pixal3d.build.eager import build_eager
from stageload.pixal3d.build.staged import PendingExtractor, StagedBuild
from stageload.pixal3d.export.handover import hand_over_or_export
from stageload.pixal3d.export.legacy import legacy_image_to_asset
from stageload.pixal3d.export.run import port_argv
from stageload.pixal3d.lean.mps_limit import budget_from_memory
from stageload.pixal3d.lean.working import WorkingMemory
from stageload.pixal3d.lean.working import install as install_working_memory
from stageload.pixal3d.options import RunOptions
from stageload.pixal3d.port import knobs
from stageload.pixal3d.port.args import given_options, port_namespace
from stageload.pixal3d.port.open import EXTRACTOR_KEYS, HANDOVER_NAMES, Port, open_port

from ..errors import StageloadError
from ..events import EventSink, make_event
from ..gpu import with_gpu_events
from ..meter import system_memory
from ..patching import patched
from ..releasing import module_bytes
from ..staged import StagedModels
from .camera import camera_params, moge_for_port
from .errors import EmptyMeshError, KnobRefused
from .fingerprint import FingerprintRecorder
from .pipeline_hooks import Hooks, LatentRecorder, SamplerProgress, StageHooks
from .plan import STAGES, keep_across_gap, plan_for
from .releases import PlanReleases

log = logging.getLogger(__name__)

#: Pipeline types the port itself advises against, with its advice (warning event at start).
PIPELINE_WARNINGS, PIPELINE_WARNING_SOURCE = PIPELINE_ADVICE, PIPELINE_ADVICE_SOURCE

_ENTRY_POINTS = ("load_pipeline", "image_to_asset", "asset_to_glb")


class Pixal3DRun:
    """A Pixal3D-mac pipeline with staged (default) or eager loading, for many images.

    Args:
        port_dir: the Pixal3D-mac folder (None: ``$PIXAL3D_DIR`` or the interpreter's own).
        options: what the run does (``options.RunOptions``: pipeline type, staged or eager
            loading, keep-resident bytes, prefetch, working memory, seed, texture side, export
            levers); None: ``RunOptions()``, every option's default.
        device: ``"mps"``, ``"cuda"`` or ``"cpu"`` (default: mps when available, else cpu).
        model_path: the port's ``--model-path`` (default its ``MODEL_PATH``, a Hugging Face id).
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

    Runs the port's own entry points where it has them (0be9e69a: ``load_pipeline`` →
    ``image_to_asset`` → ``asset_to_glb``, with the environment set-up of its ``main()``);
    older ports (0578f857) through the ``main()`` steps they inline.

    Raises ``PortError`` subclasses before anything is loaded: ``PortMissing``,
    ``PortVersionError`` (the port lacks a name it relies on), ``KnobRefused`` (a port option
    or environment switch this mode cannot honour, named); ``options.RunOptions`` raises
    ``ValueError`` for an unknown ``load`` or ``working_memory``.
    Attributes after a run: ``load_notes`` (``pipeline.models`` name → ``direct.LoadNote``: how
    it was last loaded, and why it fell back if it did), ``runtime_note`` (``direct.RuntimeNote``:
    what setup paid for the meta-device runtime, staged with ``direct_to_device`` only; None
    otherwise), ``resident_bytes`` (stage → bytes of models loaded at the end of the
    stage), ``kept`` (stage → names kept across a gap), ``last_latents`` (key → sampler output),
    ``share_stats`` (``{"backbone": (calls, hits), "naf": (calls, hits)}``), ``releases``
    (staged: the ``releases.PlanReleases`` hook — the 512 flow after its sampler, and with
    ``--working-memory lean`` DINOv3 and NAF after each conditioning pass; eager: None).
    """

    def __init__(self, port_dir: Optional[os.PathLike | str] = None,
                 options: Optional[RunOptions] = None, *,
                 device: Optional[str] = None, model_path: Optional[str] = None,
                 events: Optional[EventSink] = None,
                 preserve_rng: bool = True, fingerprint: Optional[os.PathLike | str] = None,
                 port: Optional[Port] = None, direct_to_device: bool = True,
                 port_args: Sequence[str] = ()):
        self.options = options = options or RunOptions()
        load, pipeline_type = options.load, options.pipeline_type
        self.working_memory_mode = options.working_memory
        self.working_memory = WorkingMemory(self.working_memory_mode)
        self.plan = plan_for(pipeline_type)
        self.port = port or open_port(port_dir)  # PortError here: nothing loaded yet
        self.gm = self.port.gm
        self.device = torch.device(device or ("mps" if torch.backends.mps.is_available()
                                              else "cpu"))
        self.model_path = model_path or self.gm.MODEL_PATH
        self.load_mode = load
        self.pipeline_type = pipeline_type
        self.keep_resident = options.keep_resident
        self._events = events
        self._send = with_gpu_events(events, self.device)
        self.preserve_rng = preserve_rng
        self.fingerprint_dir = Path(fingerprint) if fingerprint else None
        self.direct_to_device = direct_to_device
        self.prefetch = options.prefetch
        self.resident_bytes: dict[str, int] = {}
        self.kept: dict[str, list[str]] = {}
        self.last_latents: dict[str, Any] = {}
        self.nonfinite: dict[str, str] = {}  # sampler key → what was not finite in its output
        self.share_stats: dict[str, tuple[int, int]] = {}
        self.load_notes: dict[str, LoadNote] = {}
        self.runtime_note: Optional[RuntimeNote] = None
        self.recorder: Optional[FingerprintRecorder] = None
        self.hooks = Hooks()
        self.models: Optional[StagedModels] = None
        self._kept_now: list[str] = []
        self._eager_stage: Optional[str] = None
        # KnobRefused here: nothing loaded yet
        self.port_args = self._check_knobs(tuple(port_args))
        self.port_load_moge = self.gm.load_moge_model  # the port's own, before any patch
        if pipeline_type in PIPELINE_WARNINGS:
            self.emit("warning", message=PIPELINE_WARNINGS[pipeline_type],
                      source=PIPELINE_WARNING_SOURCE)
        if load == "staged":
            StagedBuild(self).build()
        else:
            build_eager(self)
        # The working-memory parts first, the run's hooks around them: a lean part replaces a
        # method (get_proj_cond_shape) without calling the port's, so the stage hooks must be
        # outside it to see every pass (and load its models) before it runs.
        self._install_working_memory()
        # In-stage releases (staged only), outside the working-memory parts so a conditioning
        # model goes after the lean pass has returned; DINOv3 and NAF with lean only.
        self.releases = (PlanReleases(self, conditioning=self.working_memory_mode == "lean")
                         if self.models is not None else None)
        self.hooks = Hooks(StageHooks(self), SamplerProgress(self), LatentRecorder(self),
                           *([self.releases] if self.releases is not None else []))
        self.hooks.install(self.pipeline)

    def _install_working_memory(self) -> None:
        """``working.install`` with this run's mode, events and the MPS limit from the memory
        available now (``mps_limit.budget_from_memory``); a staged run's extractors, still
        placeholders, read None while it installs."""
        unbuilt = tuple(a for a in EXTRACTOR_KEYS.values()
                        if isinstance(getattr(self.pipeline, a, None), PendingExtractor))
        memory = system_memory()
        self.working_memory = install_working_memory(
            self.pipeline, self.relay, self.working_memory_mode,
            stage=lambda: self.stage, unbuilt=unbuilt,
            mps_limit_bytes=budget_from_memory(memory.total, memory.available))

    # ------------------------------------------------------------------ events and stages
    @property
    def events(self) -> Optional[EventSink]:
        """The event sink; assigning it also redirects the staged models' events."""
        return self._events

    @events.setter
    def events(self, sink: Optional[EventSink]) -> None:
        self._events = sink  # the staged models report through relay, which reads this
        self._send = with_gpu_events(sink, self.device)

    def relay(self, event: dict) -> None:
        """The staged models' sink: adds ``method`` (``"meta_assign"`` or
        ``"port_from_pretrained"``) and, when the direct path fell back, ``fallback`` (the
        reason) to the load/reload event of a ``pipeline.models`` entry, then passes it on; on
        an accelerator each ``stage`` (sub-steps too) and ``ready`` is followed by a ``gpu``
        event with the allocator's figures (``stageload.gpu``)."""
        if event.get("event") in ("load", "reload"):
            note = self.load_notes.get(event.get("model"))
            if note is not None:
                event["method"] = note.method
                if note.fallback:
                    event["fallback"] = note.fallback
        if self._send is not None:
            self._send(event)

    def emit(self, kind: str, **fields) -> None:
        """Send a ``kind`` event with ``fields`` (``stageload.events.make_event``) to the sink
        (through :meth:`relay`'s ``gpu`` figures)."""
        if self._send is not None:
            self._send(make_event(kind, **fields))

    @property
    def entry_points(self) -> bool:
        """Whether the port has ``load_pipeline``/``image_to_asset``/``asset_to_glb``
        (0be9e69a)."""
        return all(callable(getattr(self.gm, n, None)) for n in _ENTRY_POINTS)

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
            eager = ", or run with --load eager" if self.load_mode == "staged" else ""
            raise KnobRefused(
                f"{self.load_mode.capitalize()} Pixal3D cannot honour "
                + "; ".join(f"{name} ({why})" for name, why in refused) + ". Nothing was loaded.",
                f"Unset or leave these out{eager} (docs/pixal3d.md lists every option and "
                "switch).", tuple(name for name, _ in refused))
        self.args = self._namespace(extra=extra)
        configure = getattr(self.gm, "_configure_fdg_environment", None)
        if callable(configure):
            configure(self.args)
        return extra

    def _namespace(self, **values):
        """The port's argument namespace with the adapter's values (see ``port.args``)."""
        values.setdefault("extra", getattr(self, "port_args", ()))
        return port_namespace(self.gm, model_path=self.model_path,
                              pipeline_type=self.pipeline_type, seed=self.options.seed,
                              texture_size=self.options.texture_size, **values)

    @property
    def stage(self) -> Optional[str]:
        """The current stage (None before setup and after close)."""
        return self.models.stage if self.models is not None else self._eager_stage

    def enter(self, stage: str) -> None:
        """Begin ``stage``: note what the ending stage held, apply the keep-resident policy,
        then (staged) release what the stage does not need, or (eager) just announce it."""
        current = self.stage
        if current is not None:
            self.resident_bytes[current] = self.loaded_bytes()
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
            self.emit("stage", stage=stage, index=STAGES.index(stage), count=len(STAGES))
            self.emit("ready", stage=stage, seconds=time.perf_counter() - start,
                      released_bytes=0)

    def loaded_bytes(self) -> int:
        """Bytes of the models loaded now (staged: the ``StagedModels``; eager: every distinct
        tensor of the pipeline's modules that is not on ``meta``)."""
        if self.models is not None:
            return sum(module_bytes(m) for m in self.models.values())
        seen, total = set(), 0
        for module in self.eager_modules():
            for t in list(module.parameters()) + list(module.buffers()):
                if id(t) not in seen and t.device.type != "meta":
                    seen.add(id(t))
                    total += t.numel() * t.element_size()
        return total

    def eager_modules(self) -> list:
        """The ``nn.Module``s the port's pipeline holds when it loads eagerly: its models, its
        image-conditioning extractors and the background remover's model (may share tensors:
        the extractors share one backbone)."""
        p = self.pipeline
        out = [m for m in p.models.values() if isinstance(m, nn.Module)]
        out += [getattr(p, a) for a in EXTRACTOR_KEYS.values()
                if isinstance(getattr(p, a, None), nn.Module)]
        rembg = getattr(p, "rembg_model", None)
        if rembg is not None and isinstance(getattr(rembg, "model", None), nn.Module):
            out.append(rembg.model)
        return out

    # ------------------------------------------------------------------ running
    def camera_params(self, image, *, fov: Optional[float] = None, mesh_scale: float = 1.0,
                      extend_pixel: int = 0, image_resolution: int = 512) -> dict:
        """The ``camera`` stage as the port's ``main()`` does it: MoGe-2 on the preprocessed
        image, or the manual field of view ``fov`` (radians, > 0) without MoGe
        (``camera.camera_params``)."""
        return camera_params(self, image, fov=fov, mesh_scale=mesh_scale,
                             extend_pixel=extend_pixel, image_resolution=image_resolution)

    def generate(self, image, output: os.PathLike | str, *, fov: Optional[float] = None,
                 steps: Optional[int] = None, max_num_tokens: int = 49152,
                 no_texture: bool = False,
                 handover: Optional[os.PathLike | str] = None) -> dict:
        """One image (a PIL image or a path) → a GLB at ``output``, as the port's ``main()``,
        with the run's seed, texture side and export levers (:attr:`options`).

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
        settings = self.options.export
        args = self._namespace(output=str(output), fov=fov, steps=steps,
                               max_num_tokens=max_num_tokens, no_texture=no_texture,
                               extra=tuple(self.port_args) + tuple(port_argv(settings)))
        if not isinstance(image, Image.Image):
            image = Image.open(image)
        start = time.perf_counter()
        self.last_latents, self.resident_bytes, self.nonfinite = {}, {}, {}
        self.recorder = self._new_recorder()
        asset = self._image_to_asset(image, output, args)
        if self.recorder is not None:
            self.recorder.record("mesh", asset.mesh)
        handover = hand_over_or_export(self, asset, output, args, settings, handover)
        result = {"output": str(output), "vertices": int(len(asset.vertices)),
                  "faces": int(len(asset.faces)), "resolution": int(asset.resolution),
                  "seconds": time.perf_counter() - start,
                  "resident_bytes": dict(self.resident_bytes), "kept": dict(self.kept),
                  "latents": list(self.last_latents),
                  "fingerprint": self._close_recorder(self.options.seed, asset)}
        if handover is not None:
            result["handover"] = str(handover)
        return result

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

    def _close_recorder(self, seed: int, asset) -> Optional[str]:
        """Write this run's fingerprint; returns its folder (None without a recorder)."""
        if self.recorder is None:
            return None
        path = self.recorder.close({"seed": seed, "load": self.load_mode,
                                    "pipeline_type": self.pipeline_type,
                                    "preserve_rng": self.preserve_rng,
                                    "resolution": int(asset.resolution)})
        self.recorder = None
        return str(path.parent)

    def _image_to_asset(self, image, output: Path, args):
        """The port's ``image_to_asset`` (its ``load_moge_model`` answered by the staged or
        timed camera estimator), then ``save_mesh_checkpoint`` when ``--save-mesh`` is given, as
        ``main()`` does; ports without it: the same steps as their ``main()`` inlines them
        (``legacy.py``). An exit with status 2 (the port's empty-mesh stop) becomes
        ``EmptyMeshError``; so does any other failure of the port after a sampler's output was
        not finite (NaN latents decode to an empty structure, and the next flow model stops on
        its zero tokens before any mesh exists), naming that output."""
        gm = self.gm
        if not self.entry_points:
            return legacy_image_to_asset(self, image, args)
        try:
            with patched(gm, "load_moge_model", moge_for_port(self)):
                asset = gm.image_to_asset(self.pipeline, image, args, self.device,
                                          tmp_dir=output.parent)
        except SystemExit as exc:
            raise self._port_exit(exc, "image_to_asset") from None
        except Exception as exc:
            if isinstance(exc, StageloadError) or not self.nonfinite:
                raise
            raise self._nonfinite_error() from exc
        if getattr(args, "save_mesh", None):
            gm.save_mesh_checkpoint(args.save_mesh, asset.mesh, asset.vertices, asset.faces,
                                    asset.resolution)
        return asset

    def _nonfinite_error(self) -> EmptyMeshError:
        said = "; ".join(f"{key}: {what}" for key, what in self.nonfinite.items())
        return EmptyMeshError("Pixal3D's decoder produced an empty mesh because the "
                              f"sampler output was not finite ({said}).",
                              "NaN or infinite latents come from damaged weights or a "
                              "numerical failure, not the GPU watchdog: run `python -m "
                              "runner check --backend pixal3d`, delete and download the "
                              "weights again, or try --device cpu to rule out the GPU.")

    def _port_exit(self, exc: SystemExit, where: str) -> Exception:
        if exc.code == 2 and self.nonfinite:  # not the watchdog: there was no number to mesh
            return self._nonfinite_error()
        if exc.code == 2:
            advice = getattr(self.gm, "watchdog_help_message", lambda: "")().strip()
            return EmptyMeshError("Pixal3D's decoder produced an empty mesh; the port stops here "
                                  f"(its {where} exited with status 2).",
                                  advice or "Retry with --steps 1 to check the model and export "
                                  "paths.")
        return RuntimeError(f"the port's {where} exited with status {exc.code!r}")

    def close(self) -> None:
        """Release every model and remove the hooks. The object cannot run afterwards."""
        if self.models is not None:
            self.models.close()
        self.hooks.remove()
        self.working_memory.remove()
