"""Staged Pixal3D: the Pixal3D-mac adapter (the only part of stageload that knows Pixal3D).

Use::

    from stageload.pixal3d import Pixal3DRun
    run = Pixal3DRun("/path/to/Pixal3D-mac", device="mps", events=print)
    run.generate("character.png", "character.glb", seed=42, texture_size=2048)

or ``python -m stageload.pixal3d run IMAGE -o OUT.glb --pixal3d-dir DIR [--load eager]
[--keep-resident BYTES] [--fingerprint FOLDER] [--trace FILE]``, ``python -m stageload.pixal3d
check [--pixal3d-dir DIR]`` and ``python -m stageload.pixal3d compare A B``. User notes:
docs/pixal3d.md.

What the adapter relies on in the port
======================================

Read from ``pawel-mazurkiewicz/Pixal3D-mac`` (``generate_mps.py`` at 0be9e69a — the newest
read — and at 0578f857; pipeline at commit 12b42371, image_conditioned_proj.py and BiRefNet.py
at 70abb20b, PIPELINE_MAP.md at 809cf5f5, INVESTIGATION_FACTS.md at e5fbf2d5) and
``TencentARC/Pixal3D`` (pipelines/base.py at 0660b18a; ``pixal3d/models/__init__.py`` is not
in the Pixal3D-mac index, so its ``from_pretrained`` was read in the upstream-derived fork
``wowo0709/Pixal3D`` at 463378f7). The relied-on functions, signatures and call orders are
data in ``known.py`` (one table per commit), checked from the sources by ``static.py``
(``check --static``, ``ast`` only) before the port is imported, then by name after import
(``port.open_port()``); both stop with a ``PortError`` subclass naming what differs before
anything is loaded.

``generate_mps.py`` (the port's entry script, imported as a module from the port folder):

- ``load_runtime_deps()`` — must run first (it binds the module's torch/np/Image globals and
  the pipeline class).
- 0be9e69a: ``main()`` = ``parse_args`` → ``_configure_fdg_environment(args)`` →
  ``load_runtime_deps`` → ``resolve_device`` → ``load_pipeline(args, device)`` (``init_pipeline``
  + the optional texture recalibration) → ``image_to_asset(pipeline, image, args, device,
  tmp_dir=)`` (preprocess → camera: ``load_moge_model`` + ``get_camera_params_wild_moge`` or
  ``--fov`` → ``torch.manual_seed`` → ``pipeline.run(...)`` → exit status 2 with
  ``watchdog_help_message()`` on an empty mesh) → ``save_mesh_checkpoint`` (``--save-mesh``) →
  ``asset_to_glb(asset, glb_path, args)`` (pre-clean, geometry only / native o_voxel
  in-process unless ``PIXAL3D_NATIVE_SUBPROCESS=1`` / fallback baker). The adapter calls the
  same functions in the same order; staged mode differs only inside hooks: ``init_pipeline``
  replaced for the call to ``load_pipeline`` by the deferred construction, ``load_moge_model``
  answered by the staged camera estimator during ``image_to_asset``, and the stage hooks below.
- 0578f857: ``main()`` inlines ``init_pipeline`` → ``preprocess_image`` → camera →
  ``torch.manual_seed(seed)`` → ``pipeline.run(...)`` → export (``export_geometry_only`` /
  ``try_export_native_o_voxel_glb`` / ``export_fallback_texture_glb``); the adapter repeats
  those steps for a port without the entry points.
- ``MODEL_PATH``, ``IMAGE_COND_CONFIGS`` with keys ``ss``, ``shape_512``, ``shape_1024``,
  ``tex_1024``, ``build_image_cond_model(config, device)``, ``parse_args(argv=None)`` (its
  defaults are the run's: see ``portargs.py``), ``sampler_overrides(args, stage)``.

``pixal3d/pipelines/base.py`` ``Pipeline.from_pretrained(path)``: reads ``pipeline.json``
(local, else ``hf_hub_download``), calls ``models.from_pretrained(f"{path}/{ckpt}")`` and on
any exception ``models.from_pretrained(ckpt)`` for each name in ``model_names_to_load``, looked
up through the module object ``pixal3d.models`` at call time (so replacing
``pixal3d.models.from_pretrained`` for the duration of the constructor defers every read);
``Pipeline.__init__`` calls ``.eval()`` on each model.

``pixal3d/pipelines/pixal3d_image_to_3d.py``:

- ``Pixal3DImageTo3DPipeline.from_pretrained`` builds the samplers from the module global
  ``samplers`` and the background remover with ``getattr(rembg, name)(**args)`` on the module
  global ``rembg`` (replaced during construction so the remover is recorded, not loaded), sets
  the four ``image_cond_model_*`` to None, ``low_vram = args.get('low_vram', True)``.
- ``to(device)`` sets ``_device`` and moves models only when ``low_vram`` is off.
- ``models`` is used as a mapping: ``self.models['name']`` and ``'name' in self.models``
  (``run()`` asserts three names with ``in``: ``StagedModels`` answers without loading).
- Entry points hooked per instance: ``preprocess_image``, ``get_proj_cond_ss``,
  ``get_proj_cond_shape(image_cond_model, image, coords, ..., grid_resolution_override=)`` and
  ``decode_latent(shape_slat, tex_slat, resolution)``.
- ``run()`` for both cascades: ``torch.manual_seed(seed)`` → ``get_proj_cond_ss`` (reads
  ``self.image_cond_model_ss`` inside) → ``sample_sparse_structure`` (structure flow + decoder)
  → ``get_proj_cond_shape(self.image_cond_model_shape_512, ...)`` → ``sample_shape_slat``
  (shape flow 512) → inline ``models['shape_slat_decoder'].upsample(lr_slat, upsample_times=4)``
  and the token-budget loop → ``get_proj_cond_shape(self.image_cond_model_shape_1024, ...,
  grid_resolution_override=)`` → inline HR sampling with ``models['shape_slat_flow_model_1024']``
  (reads ``.in_channels``) → ``get_proj_cond_shape(self.image_cond_model_tex_1024, ...)`` →
  ``sample_tex_slat`` (texture flow) → ``decode_latent`` (shape decoder, texture decoder).
  Each pass reads the extractor attribute at call time, so the hook tells the three
  ``get_proj_cond_shape`` passes apart by identity of the extractor passed.
- Noise: ``torch.randn(...)`` on the default (CPU) generator, then ``.to(device)``; the
  samplers (``*.sample(...).samples``) draw nothing. The fingerprint hooks each sampler
  instance's ``sample``.

``pixal3d/models/__init__.py`` ``from_pretrained(path, *, strict=False, **kwargs)``: local
``{path}.json`` + ``{path}.safetensors``, else ``ORG/REPO/sub/path`` through
``huggingface_hub.hf_hub_download``; the JSON is ``{"name": class, "args": kwargs}``; builds
``config['name']`` (looked up through the module's lazy ``__getattr__``) with its random
initialisation, then ``load_state_dict(load_file(model_file), strict=strict)``. Staged mode
reads the same files and builds the same class itself (``direct.py``) and uses this function
only as the per-model fallback and for ``--no-direct-load``.

Model internals the direct loader must survive (read in ``microsoft/TRELLIS.2`` at 68343cff and
its forks, from which Pixal3D's models derive; ``yuyangYan-17/Pixal3D-exp``
``structured_latent_flow.py``): ``SparseRotaryPositionEmbedder`` keeps ``freqs`` as a plain
tensor attribute computed in ``__init__`` (not a buffer, in no checkpoint);
``SparseStructureFlowModel`` registers a computed persistent buffer ``pos_emb`` (ape) or
``rope_phases`` (rope) from ``torch.arange(..., device=self.device)``; the models convert their
blocks' dtype in ``__init__`` (``convert_to``).

``pixal3d/trainers/flow_matching/mixins/image_conditioned_proj.py``
``DinoV3ProjFeatureExtractor``: ``__init__`` loads its backbone with the module global
``DINOv3ViTModel.from_pretrained(model_name)`` into ``.model``; ``_load_naf()`` (when
``use_naf_upsample``) sets ``.naf_model = torch.hub.load("valeoai/NAF", "naf", pretrained=True,
device=..., trust_repo=True)`` only if it is None, and ``forward`` calls ``_load_naf()``
lazily; ``grid_resolution``/``proj_grid`` are plain attributes ``get_proj_cond_shape`` swaps
per call (hence: one shared backbone and NAF, four separate extractor objects).

``pixal3d/pipelines/rembg/BiRefNet.py``: a plain class (not an ``nn.Module``) holding the
network in ``.model``, callable on a PIL image; ``to``/``cpu`` move ``.model``.

Where this differs from SPEC §2.5
=================================

- Stage order: in the port, ``preprocess_image`` runs in ``generate_mps.main()`` *before* the
  camera stage and ``run()`` is called with ``preprocess_image=False``; the plan follows that
  (setup → preprocess → camera → structure …), as SPEC does.
- The backbone is not loaded in ``setup``: staged mode builds the four extractors when
  ``structure`` first needs the backbone, and the NAF when ``shape_512`` first needs it (the
  port loads both eagerly in ``init_pipeline``; PIPELINE_MAP.md says NAF is lazy, but
  ``init_pipeline`` pre-loads it with ``_load_naf()``).
- The background remover is loaded in ``preprocess`` (the port builds it in
  ``from_pretrained``), and only when the image has no usable alpha (the port skips it then).
- ``1536_cascade`` uses the same entry points and the same seven models in the same order (the
  only differences are the target resolution and the resulting ``grid_resolution_override``,
  which mutates the 1024 and texture extractors during their pass), so it gets the same plan.
- ``tex_slat_flow_model_512`` is in ``model_names_to_load`` (eager mode loads it, eight models);
  no stage lists it, so staged mode never reads it.
- Staged mode turns ``low_vram`` off; eager mode leaves the port's value (True by default).

Not verified here (no Mac, no MPS, no real weights): see docs/pixal3d.md.
"""
from __future__ import annotations

from .._lazy import lazy_exports

#: submodule -> the public names it defines (imported on first use)
_EXPORTS = {
    "stageload.pixal3d.adapter": ("Pixal3DRun",),
    "stageload.pixal3d.staged_build": ("StagedRembg",),
    "stageload.pixal3d.port": ("open_port", "check_port", "static_report", "locate_port", "Port"),
    "stageload.pixal3d.errors": ("PortError", "PortMissing", "PortVersionError", "KnobRefused",
                                 "EmptyMeshError"),
    "stageload.pixal3d.static": ("check_static",),
    "stageload.pixal3d.plan": ("STAGES", "plan_for", "keep_across_gap"),
    "stageload.pixal3d.fingerprint": ("compare", "FingerprintRecorder"),
}

__all__ = sorted(name for names in _EXPORTS.values() for name in names)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
