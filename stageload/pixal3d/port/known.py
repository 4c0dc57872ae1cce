"""The Pixal3D-mac commits this adapter was checked against, and what it relies on in each
(torch-free; the one place these facts live). ``static.check_static`` compares a port folder's
sources with these tables; ``tests/pixal3d/test_static_check.py`` checks that the stand-in port
(``standin/port``) has exactly the newest table.

Where the figures come from: ``generate_mps.py`` read with the project's search tools at each
commit (``pawel-mazurkiewicz/Pixal3D-mac``); ``pixal3d/pipelines/pixal3d_image_to_3d.py`` read
at 12b42371 (the only version of that file the index holds; its entry points are taken to be
the same at both commits — a drift there is what the check reports). A signature is the list
of parameter names in order, ``name=`` for one with a default, ``*`` before keyword-only ones,
``*args``/``**kwargs`` as written; annotations and default values are not compared.

How to add a commit (after reading its sources):

1. Copy the newest ``PortApi`` below, change what differs (names, signatures, the relied-on call
   orders), and add a ``KNOWN_COMMITS`` entry with the full 40-hex sha, a label and
   ``runs=`` the driver the adapter uses for it (``"entry_points"``: ``load_pipeline`` →
   ``image_to_asset`` → ``asset_to_glb``; ``"main_inline"``: the older ``main()`` that calls
   ``init_pipeline`` and the export functions itself).
2. If it becomes the newest, point ``NEWEST`` at it and refresh the stand-in port to it
   (``test_static_check.py`` fails until the stand-in's sources have the same table).
3. Run ``python -m stageload.pixal3d check --static --pixal3d-dir <a checkout at that commit>``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

GENERATE = "generate_mps.py"
PIPELINE = "pixal3d/pipelines/pixal3d_image_to_3d.py"
#: Files whose absence fails the check (the adapter cannot work without them).
REQUIRED_FILES = (GENERATE, PIPELINE)
#: Other files the adapter imports from the port: listed "not checked" when absent.
OTHER_FILES = ("pixal3d/models/__init__.py", "pixal3d/pipelines/base.py",
               "pixal3d/trainers/flow_matching/mixins/image_conditioned_proj.py",
               "pixal3d/pipelines/rembg/BiRefNet.py")
PIPELINE_CLASS = "Pixal3DImageTo3DPipeline"


@dataclass(frozen=True)
class PortApi:
    """What the adapter relies on in one version of the port.

    ``generate``: ``generate_mps.py`` function name → signature (tuple of str);
    ``generate_names``: other module-level names that must be assigned there;
    ``pipeline``: ``Pixal3DImageTo3DPipeline`` method → signature;
    ``orders``: ``"file:function"`` → call names that must occur in this order inside it (other
    calls may come between)."""
    generate: dict
    generate_names: tuple
    pipeline: dict
    orders: dict = field(default_factory=dict)


#: Pixal3DImageTo3DPipeline as read at 12b42371.
_PIPELINE = {
    "from_pretrained": ("cls", "path", "config_file="),
    "to": ("self", "device"),
    "preprocess_image": ("self", "input", "bg_color="),
    "get_proj_cond_ss": ("self", "image", "camera_angle_x=", "distance=", "mesh_scale="),
    "get_proj_cond_shape": ("self", "image_cond_model", "image", "coords", "camera_angle_x=",
                            "distance=",
                            "mesh_scale=", "grid_resolution_override="),
    "sample_sparse_structure": ("self", "cond", "resolution", "num_samples=", "sampler_params="),
    "sample_shape_slat": ("self", "cond", "flow_model", "coords", "sampler_params="),
    "sample_tex_slat": ("self", "cond", "flow_model", "shape_slat", "sampler_params="),
    "decode_shape_slat": ("self", "slat", "resolution"),
    "decode_tex_slat": ("self", "slat", "subs"),
    "decode_latent": ("self", "shape_slat", "tex_slat", "resolution"),
    "run": ("self", "image", "camera_params", "num_samples=", "seed=",
            "sparse_structure_sampler_params=",
            "shape_slat_sampler_params=", "tex_slat_sampler_params=", "preprocess_image=",
            "return_latent=",
            "pipeline_type=", "max_num_tokens="),
}
#: The order of calls inside run() that the stage hooks depend on (both cascades).
_RUN_ORDER = ("get_proj_cond_ss", "sample_sparse_structure", "get_proj_cond_shape",
              "sample_shape_slat",
              "upsample", "get_proj_cond_shape", "sample", "get_proj_cond_shape", "sample_tex_slat",
              "decode_latent")
_COMMON = {
    "load_runtime_deps": (),
    "resolve_device": ("requested",),
    "maybe_empty_cache": ("device",),
    "build_image_cond_model": ("config", "device"),
    "load_moge_model": ("device", "model_name="),
    "init_pipeline": ("model_path", "device"),
    "distance_from_fov": ("camera_angle_x", "grid_point", "target_point", "mesh_scale",
                          "image_resolution"),
    "get_camera_params_wild_moge": ("image_path", "moge_model", "device", "mesh_scale=",
                                    "extend_pixel=",
                                    "image_resolution="),
    "sampler_overrides": ("args", "stage"),
    "output_glb_path": ("output",),
    "try_export_native_o_voxel_glb": ("mesh", "resolution", "vertices", "faces", "glb_path",
                                      "args"),
    "export_fallback_texture_glb": ("mesh", "vertices", "faces", "glb_path", "args"),
    "main": (),
}

#: 0be9e69a: main() runs load_pipeline -> image_to_asset -> asset_to_glb.
API_0BE9E69A = PortApi(
    generate={**_COMMON,
              "parse_args": ("argv=",),
              "_configure_fdg_environment": ("args",),
              "load_pipeline": ("args", "device="),
              "image_to_asset": ("pipeline", "image", "args", "device=", "*", "tmp_dir="),
              "asset_to_glb": ("asset", "glb_path", "args"),
              "save_mesh_checkpoint": ("path", "mesh", "vertices", "faces", "resolution"),
              "watchdog_help_message": ()},
    generate_names=("MODEL_PATH", "IMAGE_COND_CONFIGS", "Pixal3DAsset"),
    pipeline=_PIPELINE,
    orders={
        f"{GENERATE}:main": ("parse_args", "_configure_fdg_environment", "load_runtime_deps",
                             "resolve_device",
                             "load_pipeline", "image_to_asset", "save_mesh_checkpoint",
                             "asset_to_glb"),
        f"{GENERATE}:load_pipeline": ("init_pipeline",),
        f"{GENERATE}:init_pipeline": ("from_pretrained", "to", "build_image_cond_model",
                                      "_load_naf"),
        f"{GENERATE}:image_to_asset": ("preprocess_image", "load_moge_model",
                                       "get_camera_params_wild_moge",
                                       "manual_seed", "run", "watchdog_help_message", "exit"),
        f"{GENERATE}:asset_to_glb": ("try_export_native_o_voxel_glb",
                                     "export_fallback_texture_glb"),
        f"{PIPELINE}:run": _RUN_ORDER,
    })

#: 0578f857: main() calls init_pipeline, the camera and run() and the export functions inline.
API_0578F857 = PortApi(
    generate={**_COMMON, "parse_args": (),
              "export_geometry_only": ("vertices", "faces", "glb_path")},
    generate_names=("MODEL_PATH", "IMAGE_COND_CONFIGS"),
    pipeline=_PIPELINE,
    orders={
        f"{GENERATE}:main": ("parse_args", "load_runtime_deps", "resolve_device", "init_pipeline",
                             "preprocess_image", "manual_seed", "run",
                             "try_export_native_o_voxel_glb",
                             "export_fallback_texture_glb"),
        f"{GENERATE}:init_pipeline": ("from_pretrained", "to", "build_image_cond_model",
                                      "_load_naf"),
        f"{PIPELINE}:run": _RUN_ORDER,
    })


@dataclass(frozen=True)
class KnownCommit:
    """One checked commit: ``label``, ``api`` (:class:`PortApi`), ``runs`` (the driver the
    adapter uses: ``"entry_points"`` or ``"main_inline"``), ``read`` (what was read, where)."""
    label: str
    api: PortApi
    runs: str
    read: str


NEWEST = "0be9e69a729432323dfb60a418801e5e9e7a1437"
KNOWN_COMMITS = {
    NEWEST: KnownCommit("0be9e69a", API_0BE9E69A, "entry_points",
                        "generate_mps.py at 0be9e69a; pipeline at 12b42371"),
    "0578f8579e01c715a39a92de701efe5986f47f0b": KnownCommit(
        "0578f857", API_0578F857, "main_inline",
        "generate_mps.py at 0578f857 (names as the first adapter relied on them); pipeline at "
        "12b42371"),
}


#: What the lean conditioning (``lean.py``) relies on in NAF's sources, read in ``valeoai/NAF``
#: at f63aadff (``hubconf.py``, ``src/model/naf.py``, ``src/layers/attentions.py``) and in the
#: port's ``image_conditioned_proj.py`` at 809cf5f5. Per file: ``functions`` (name ->
#: signature, as above), ``classes`` (name -> {"methods": name -> signature, "attributes":
#: names set on ``self`` or registered as buffers}), ``strings`` ("Class.method" -> string
#: constants that must appear in it), ``calls`` ("Class.method" -> call names in this order).
#: A drifted item does not stop a run: the lean path checks the live objects too and falls back
#: to the port's computation with a warning.
LEAN_NAF = {
    "hubconf.py": {"functions": {"naf": ("pretrained=", "device=")}},
    "src/model/naf.py": {"classes": {
        "NAF": {"methods": {"forward": ("self", "image", "features", "output_size",
                                        "return_weights=", "*args", "**kwargs")},
                "attributes": ("image_encoder", "query_encoder", "key_encoder", "upsampler")},
        "ImageEncoder": {"methods": {"forward": ("self", "x", "output_size"),
                                     "forward_encoder": ("self", "x", "output_size")},
                         "attributes": ("out_channels", "use_encoder", "encoder", "sem_encoder",
                                        "rope")},
        "KeyEncoder": {"methods": {"forward": ("self", "x", "features")}},
    }, "calls": {"NAF.forward": ("image_encoder", "query_encoder", "key_encoder")}},
    "src/layers/convolutions.py": {
        "functions": {"encoder": ("in_dim", "hidden_dim", "kernel_size=", "ks_res=",
                                  "num_layers=", "bias=", "num_groups=", "residual=")},
        "classes": {"EncBlock": {"methods": {"forward": ("self", "x")},
                                 "attributes": ("norm1", "conv1", "norm2", "conv2",
                                                "activation_fn", "residual",
                                                "use_conv_shortcut")}},
        "calls": {"EncBlock.forward": ("norm1", "activation_fn", "conv1", "norm2",
                                       "activation_fn", "conv2")}},
    "src/layers/rope.py": {"classes": {
        "RoPE": {"methods": {"rotate": ("self", "x", "coords"),
                             "create_coordinate": ("self", "*", "H", "W")},
                 "attributes": ("num_heads",)}}},
    "src/layers/attentions.py": {"classes": {
        "CrossAttention": {"methods": {"forward": ("self", "q", "k", "v", "image=",
                                                   "return_weights=", "**kwargs"),
                                       "_resize": ("self", "x", "size", "dtype")},
                           "attributes": ("num_heads", "kernel_size", "dilation")},
    }, "strings": {"CrossAttention._resize": ("nearest-exact",)},
        "calls": {"CrossAttention.forward": ("_resize", "_resize")}},
}
#: The port's projection module, as the lean pass uses it (same format as ``LEAN_NAF``).
LEAN_PROJECTION = {
    "pixal3d/trainers/flow_matching/mixins/image_conditioned_proj.py": {
        "functions": {"sample_features": ("fmap", "queries_ndc")},
        "classes": {
            "ProjGrid": {"methods": {"__init__": ("self", "grid_resolution=",
                                                  "image_resolution="),
                                     "forward": ("self", "features_map", "camera_angle_x",
                                                 "distance", "mesh_scale", "transform_matrix=",
                                                 "BHWC=")},
                         "attributes": ("grid_points", "image_resolution")},
            "DinoV3ProjFeatureExtractor": {
                "methods": {"_load_naf": ("self",)},
                "attributes": ("naf_model", "proj_grid", "naf_target_size", "patch_number",
                               "grid_resolution", "use_naf_upsample", "embed_dim")},
        },
        "calls": {"ProjGrid.forward": ("sample_features",)}},
}
#: torch.hub's cache folder names for ``valeoai/NAF`` (``OWNER_NAME_REF`` under
#: ``$TORCH_HOME/hub``), newest reference first.
NAF_HUB_FOLDERS = ("valeoai_NAF_main", "valeoai_NAF_master")
