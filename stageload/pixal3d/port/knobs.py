"""Which of the port's options and environment switches a run honours, and which it refuses
before anything loads (torch-free; one table, read by ``Pixal3DRun`` and documented in
docs/pixal3d.md). Sources: Pixal3D-mac ``generate_mps.py`` at 0be9e69a (``parse_args``,
``main``, ``init_pipeline``, ``image_to_asset``, ``asset_to_glb``).

Options (``--port-arg``, parsed by the port's own ``parse_args``): every option is handed to
the port's ``load_pipeline`` / ``image_to_asset`` / ``asset_to_glb`` unchanged and so honoured
there (export switches, ``--low-vram``, ``--tex-recalib``, the FDG flags through
``_configure_fdg_environment``, ``--save-mesh`` through ``save_mesh_checkpoint`` as ``main()``
calls it) — except :data:`MAIN_ONLY` (branches of ``main()`` the adapter does not run) and
:data:`OWNED` (set by the adapter's own options).

Environment: :data:`ENV_REFUSED` names the switches refused and in which modes; the others the
port reads where it runs them (:data:`ENV_HONOURED`).
"""
from __future__ import annotations

from typing import Iterable, Mapping

#: argparse dest -> option: branches of the port's main() outside load/image_to_asset/asset_to_glb.
MAIN_ONLY = {
    "flash_sdpa": ("--flash-sdpa",
                   "main() installs the mtlflashattn SDPA patch itself before loading; "
                   "run generate_mps.py for it"),
    "load_mesh": ("--load-mesh",
                  "resumes export from a mesh checkpoint (another branch of main())"),
    "load_fixture_07": ("--load-fixture-07",
                        "replays a stage-07 fixture (another branch of main())"),
    "reextract_mesh_from_fdg": ("--reextract-mesh-from-fdg", "only applies with --load-mesh"),
    "free_spent_models": ("--free-spent-models",
                          "frees models the port's way; staged loading does this"),
}
#: argparse dest -> the adapter's own option that sets it.
OWNED = {
    "image": "IMAGE", "output": "-o/--output", "model_path": "--model-path", "device": "--device",
    "seed": "--seed", "fov": "--fov", "pipeline_type": "--pipeline-type",
    "texture_size": "--texture-size",
    "steps": "--steps", "max_num_tokens": "--max-num-tokens", "no_texture": "no_texture=",
}
#: variable -> (modes in which it is refused, why).
ENV_REFUSED = {
    "PIXAL3D_FP32_MODELS": (("staged",),
                            "init_pipeline upcasts loaded models; staged loading replaces "
                            "init_pipeline"),
    "PIXAL3D_CPU_MODELS": (("staged",),
                           "init_pipeline pins loaded models to the CPU; staged loading "
                           "replaces init_pipeline"),
    "PIXAL3D_NAF_ANE_REPLACE": (("staged",), "init_pipeline swaps NAF layers after loading it"),
    "PIXAL3D_NAF_ANE_WHOLE": (("staged",), "init_pipeline swaps NAF submodules after loading it"),
    "PIXAL3D_NAF_METAL": (("staged",), "init_pipeline swaps NAF kernels after loading it"),
    "PIXAL3D_DUMP_FIXTURES": (("staged",), "the fixture hooks wrap the extractors before staged "
                              "loading has built them"),
    "PIXAL3D_CUDA_SUBSTITUTE": (("staged", "eager"), "replaces stage outputs with CUDA captures "
                                "(a diagnostic harness of generate_mps.py)"),
    "PIXAL3D_HR_SLAT_INJECT": (("staged", "eager"), "replaces the sampler the adapter hooks"),
    "PIXAL3D_STOP_AFTER": (("staged", "eager"), "exits the process in the middle of a run"),
}
#: variables the port reads where the adapter runs its code, honoured as they are.
ENV_HONOURED = {
    "PIXAL3D_SDPA_BACKEND": "image_to_asset pins the attention kernel",
    "PIXAL3D_NATIVE_SUBPROCESS": "try_export_native_o_voxel_glb: separate interpreter instead of "
                                 "in-process",
    "PIXAL3D_PRECLEAN_NME": "asset_to_glb repairs non-manifold edges first",
    "PIXAL3D_KEEP_NATIVE_O_VOXEL_INPUT": "try_export_native_o_voxel_glb keeps its .npz",
    "O_VOXEL_PYTHON": "the native export's interpreter (with PIXAL3D_NATIVE_SUBPROCESS=1)",
    "SPARSE_CONV_BACKEND": "read by the port's sparse modules",
    "SPARSE_ATTN_BACKEND": "read by the port's sparse modules",
    "PIXAL3D_NAF_DEVICE": "the extractors' _load_naf pins NAF to that device; with "
                          "--working-memory lean NAF's whole output is then computed in bands "
                          "(the port moves it), a warning says so",
    "PIXAL3D_PROJ_GRID_DEVICE": "the extractors sample NAF's output on that device; with "
                                "--working-memory lean NAF's whole output is then computed in "
                                "bands (the port moves it), a warning says so",
}
_OFF = ("", "0", "false", "off", "no")


def env_active(environ: Mapping[str, str], name: str) -> bool:
    """Whether ``name`` is set to something the port treats as on (not empty/0/false/off/no)."""
    return str(environ.get(name, "")).strip().lower() not in _OFF


def refusals(given: Iterable[str], environ: Mapping[str, str], load: str) -> list:
    """``[(name, why)]`` for every refused option (``given``: argparse dests the user set) and
    environment variable in mode ``load`` (``"staged"`` or ``"eager"``); empty: all honoured."""
    out = []
    for dest in given:
        if dest in MAIN_ONLY:
            out.append(MAIN_ONLY[dest])
        elif dest in OWNED:
            out.append((f"--{dest.replace('_', '-')}",
                        f"set it with the adapter's own {OWNED[dest]}"))
    for name, (modes, why) in ENV_REFUSED.items():
        if load in modes and env_active(environ, name):
            out.append((name, why))
    return out
