"""Find a Pixal3D-mac checkout, import it, and check every name the adapter relies on.

Nothing here loads a model: importing the port imports torch and the port's Python modules
(and, in the real port, ``transformers``), but no weights are read. ``check_port()`` is what
``python -m runner check --backend pixal3d`` and ``python -m stageload.pixal3d check`` run.

Where the port comes from (first that applies):

1. an explicit folder (``--pixal3d-dir``, the ``port_dir`` argument);
2. the environment variable ``PIXAL3D_DIR``;
3. the interpreter's own checkout: a ``pixal3d`` package importable as is (installed or on
   ``sys.path``) whose parent folder holds ``generate_mps.py``.

A folder is a port when it holds ``generate_mps.py`` and the package folder ``pixal3d/``.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Optional

from stageload.pixal3d.errors import PortError, PortMissing, PortVersionError  # noqa: F401  (PortError re-exported)
from stageload.pixal3d.port.static import check_static, require_static

ENV_VAR = "PIXAL3D_DIR"

#: The module names the adapter imports from the port folder (and purges from ``sys.modules``
#: when a different folder was imported before in the same process).
PORT_MODULES = ("generate_mps", "pixal3d")
#: Packages a port folder may vendor at its top (the stand-in does; the real port installs them):
#: purged like ``PORT_MODULES`` only when the folder holds them.
VENDORED_MODULES = ("o_voxel", "flex_gemm")

#: The API this adapter was written against: Pixal3D-mac's ``generate_mps.py`` +
#: ``pixal3d/pipelines/pixal3d_image_to_3d.py`` as read on 2026-11-30 (see the package
#: docstring for the files and commits).
API = "pixal3d-mac/generate_mps+proj-pipeline (read 2026-11-30)"

#: generate_mps.py: module-level names.
GENERATE_MPS_NAMES = (
    "MODEL_PATH", "IMAGE_COND_CONFIGS", "load_runtime_deps", "build_image_cond_model",
    "init_pipeline", "load_moge_model", "get_camera_params_wild_moge", "distance_from_fov",
    "maybe_empty_cache", "sampler_overrides", "parse_args", "export_geometry_only",
    "try_export_native_o_voxel_glb", "export_fallback_texture_glb",
)
#: generate_mps.py names the export in a process of its own needs (the asset, the port's mesh
#: checkpoint as the hand-over file, its export): optional — without them (older ports) the
#: export runs in the model process (``Pixal3DRun.can_hand_over``).
HANDOVER_NAMES = ("Pixal3DAsset", "_mesh_has_voxels", "asset_to_glb", "save_mesh_checkpoint",
                  "load_mesh_checkpoint")
#: generate_mps.py names a port of the entry-point kind (0be9e69a, ``known`` ``runs ==
#: "entry_points"``) must also have: the run's drivers.
ENTRY_POINT_NAMES = ("_configure_fdg_environment", "load_pipeline", "image_to_asset",
                     "asset_to_glb")
#: IMAGE_COND_CONFIGS keys, in the order of the four pipeline attributes.
EXTRACTOR_KEYS = {"ss": "image_cond_model_ss", "shape_512": "image_cond_model_shape_512",
                  "shape_1024": "image_cond_model_shape_1024",
                  "tex_1024": "image_cond_model_tex_1024"}
#: Pixal3DImageTo3DPipeline methods the adapter hooks or the run calls.
PIPELINE_METHODS = (
    "from_pretrained", "to", "preprocess_image", "get_proj_cond_ss", "get_proj_cond_shape",
    "sample_sparse_structure", "sample_shape_slat", "sample_tex_slat", "decode_latent", "run",
)
#: Parameters that must exist (name → method), so a changed signature is caught up front.
PIPELINE_PARAMETERS = {
    "get_proj_cond_shape": ("image_cond_model", "image", "coords", "grid_resolution_override"),
    "run": ("image", "camera_params", "seed", "preprocess_image", "return_latent", "pipeline_type",
            "max_num_tokens"),
    "decode_latent": ("shape_slat", "tex_slat", "resolution"),
}
#: The eight names in ``Pixal3DImageTo3DPipeline.model_names_to_load``; 1024_cascade uses seven.
MODEL_NAMES = (
    "sparse_structure_flow_model", "sparse_structure_decoder", "shape_slat_flow_model_512",
    "shape_slat_flow_model_1024", "shape_slat_decoder", "tex_slat_flow_model_512",
    "tex_slat_flow_model_1024", "tex_slat_decoder",
)


@dataclass
class Port:
    """An imported, checked port. ``root``: the folder; ``gm``: its ``generate_mps`` module;
    ``models``: ``pixal3d.models``; ``pipeline_module``: ``pixal3d.pipelines.pixal3d_image_to_3d``;
    ``pipeline_cls``; ``icp``: ``pixal3d.trainers.flow_matching.mixins.image_conditioned_proj``;
    ``version``: dict (``pixal3d`` package ``__version__`` or None, ``git`` commit or None,
    ``api``)."""

    root: Path
    gm: ModuleType
    models: ModuleType
    pipeline_module: ModuleType
    pipeline_cls: type
    icp: ModuleType
    version: dict = field(default_factory=dict)


def locate_port(port_dir: Optional[os.PathLike | str] = None) -> Path:
    """The port folder (see the module docstring for the order). Raises ``PortError``
    (``pixal3d_missing``) naming where it looked when none is found or the folder is not a port."""
    candidates = []
    if port_dir is not None and str(port_dir) != "":
        candidates.append(("--pixal3d-dir", Path(port_dir)))
    elif os.environ.get(ENV_VAR):
        candidates.append((f"${ENV_VAR}", Path(os.environ[ENV_VAR])))
    else:
        try:
            spec = importlib.util.find_spec("pixal3d")
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            candidates.append(("this interpreter's pixal3d package",
                               Path(list(spec.submodule_search_locations)[0]).parent))
    if not candidates:
        raise PortMissing("No Pixal3D-mac folder given: no --pixal3d-dir, no "
                        f"${ENV_VAR}, and this interpreter has no importable pixal3d package.",
                        f"Pass --pixal3d-dir /path/to/Pixal3D-mac (or set {ENV_VAR}).")
    source, folder = candidates[0]
    folder = folder.expanduser()
    if folder.exists() and not folder.is_dir():
        raise PortMissing(f"{folder} ({source}) is a file, not a folder.",
                          "Give the Pixal3D-mac checkout's folder (the one that holds "
                          "generate_mps.py and pixal3d/), not a file in it.")
    if not folder.is_dir():
        raise PortMissing(f"The Pixal3D-mac folder {folder} ({source}) does not exist.",
                        "Check the path; it must be the folder of a Pixal3D-mac checkout.")
    lacking = [name for name in ("generate_mps.py", "pixal3d/__init__.py", "pixal3d/pipelines",
                                 "pixal3d/models")
               if not (folder / name).exists()]
    if lacking:
        raise PortMissing(f"{folder} ({source}) is not a Pixal3D-mac checkout: it has no "
                        f"{', '.join(lacking)}.",
                        "Point --pixal3d-dir at the folder that holds generate_mps.py and "
                        "pixal3d/.",
                        tuple(lacking))
    return folder.resolve()


def _purge_other_port(root: Path) -> None:
    """Drop earlier imports of the port's modules from another folder (one port per process
    at a time; tests switch between copies)."""
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top not in PORT_MODULES and not (top in VENDORED_MODULES and (root / top).is_dir()):
            continue
        origin = getattr(sys.modules[name], "__file__", None)
        if origin is None or not Path(origin).resolve().is_relative_to(root):
            del sys.modules[name]


def _git_commit(root: Path) -> Optional[str]:
    """The checked-out commit read from ``.git`` (no ``git`` process), or None."""
    head = root / ".git" / "HEAD"
    try:
        text = head.read_text().strip()
        if text.startswith("ref: "):
            ref = root / ".git" / text[5:]
            if ref.is_file():
                return ref.read_text().strip()
            packed = root / ".git" / "packed-refs"
            for line in packed.read_text().splitlines() if packed.is_file() else []:
                if line.endswith(" " + text[5:]):
                    return line.split(" ", 1)[0]
            return None
        return text or None
    except OSError:
        return None


def import_port(root: Path) -> tuple[ModuleType, ModuleType, ModuleType, ModuleType]:
    """Import ``generate_mps``, ``pixal3d.models``, the pipeline module and the extractor module
    from ``root`` (put first on ``sys.path``). Raises ``PortError`` (``pixal3d_missing``) with the
    import error when one fails (a missing dependency of the port, a syntax error)."""
    _purge_other_port(root)
    if str(root) in sys.path:
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    names = ("generate_mps", "pixal3d.models", "pixal3d.pipelines.pixal3d_image_to_3d",
             "pixal3d.trainers.flow_matching.mixins.image_conditioned_proj")
    modules = []
    for name in names:
        try:
            # the port's modules from the folder just put first on sys.path (known at run time);
            # each import may exit or fail, and is said so by name
            modules.append(importlib.import_module(name))
        except SystemExit as exc:  # e.g. a module-level parse_args() refusing our argv
            raise PortMissing(f"Importing {name} from {root} exits the process (SystemExit "
                              f"{exc.code!r}): the module runs code at import, such as "
                              "argparse's parse_args() at module level.",
                              f"Move that code under `if __name__ == \"__main__\":` in {root}, "
                              "or use a checkout of a supported commit.", (name,)) from None
        except Exception as exc:
            raise PortMissing(f"Cannot import {name} from {root}: {type(exc).__name__}: {exc}",
                            "Run the port's own setup (its README) with this interpreter, or point "
                            "the "
                            "runner at the interpreter of the port's environment.",
                            (name,)) from exc
    gm, models, pipeline_module, icp = modules
    try:
        gm.load_runtime_deps()  # sets generate_mps's globals (torch, np, Image, the pipeline class)
    except Exception as exc:
        raise PortMissing(f"generate_mps.load_runtime_deps() failed in {root}: "
                        f"{type(exc).__name__}: {exc}",
                        "Run the port's own setup with this interpreter.",
                        ("generate_mps.load_runtime_deps",)) from exc
    return gm, models, pipeline_module, icp


def missing_names(gm: ModuleType, models: ModuleType, pipeline_module: ModuleType, icp: ModuleType,
                  entry_points: bool = True) -> list[str]:
    """Every checked name the imported port lacks, as ``module.name`` strings (empty: all there).
    ``entry_points``: the port is of the entry-point kind (also check ``ENTRY_POINT_NAMES``)."""
    names = GENERATE_MPS_NAMES + (ENTRY_POINT_NAMES if entry_points else ())
    missing = [f"generate_mps.{n}" for n in names if not hasattr(gm, n)]
    configs = getattr(gm, "IMAGE_COND_CONFIGS", None)
    if isinstance(configs, dict):
        missing += [f"generate_mps.IMAGE_COND_CONFIGS[{k!r}]" for k in EXTRACTOR_KEYS
                    if k not in configs]
    if not callable(getattr(models, "from_pretrained", None)):
        missing.append("pixal3d.models.from_pretrained")
    cls = getattr(pipeline_module, "Pixal3DImageTo3DPipeline", None)
    if cls is None:
        missing.append("pixal3d.pipelines.pixal3d_image_to_3d.Pixal3DImageTo3DPipeline")
    else:
        missing += [f"Pixal3DImageTo3DPipeline.{m}" for m in PIPELINE_METHODS
                    if not callable(getattr(cls, m, None))]
        for method, params in PIPELINE_PARAMETERS.items():
            fn = getattr(cls, method, None)
            if fn is None:
                continue
            try:
                have = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            missing += [f"Pixal3DImageTo3DPipeline.{method}({p}=)" for p in params if p not in have]
        listed = getattr(cls, "model_names_to_load", None)
        if listed is None:
            missing.append("Pixal3DImageTo3DPipeline.model_names_to_load")
        else:
            missing += [f"Pixal3DImageTo3DPipeline.model_names_to_load[{n!r}]"
                        for n in MODEL_NAMES[:5] + MODEL_NAMES[6:] if n not in listed]
    for name in ("rembg", "samplers"):
        if not hasattr(pipeline_module, name):
            missing.append(f"pixal3d.pipelines.pixal3d_image_to_3d.{name}")
    extractor = getattr(icp, "DinoV3ProjFeatureExtractor", None)
    if extractor is None:
        missing.append("image_conditioned_proj.DinoV3ProjFeatureExtractor")
    elif not callable(getattr(extractor, "_load_naf", None)):
        missing.append("DinoV3ProjFeatureExtractor._load_naf")
    backbone = getattr(icp, "DINOv3ViTModel", None)
    if backbone is None or not callable(getattr(backbone, "from_pretrained", None)):
        missing.append("image_conditioned_proj.DINOv3ViTModel.from_pretrained")
    import torch.hub
    if not callable(getattr(torch.hub, "load", None)):
        missing.append("torch.hub.load")
    return missing


def open_port(port_dir: Optional[os.PathLike | str] = None) -> Port:
    """Locate, import and check a port. Loads no weights.

    Raises ``PortError``: ``pixal3d_missing`` (not found, not a port, import failed) or
    ``pixal3d_version`` (a checked name or parameter is missing; ``missing`` lists them all and
    the message names them).
    """
    root = locate_port(port_dir)
    static = require_static(root, _git_commit(root))  # sources first: nothing imported on drift
    gm, models, pipeline_module, icp = import_port(root)
    missing = missing_names(gm, models, pipeline_module, icp,
                            entry_points=static["runs"] == "entry_points")
    if missing:
        raise PortVersionError(f"The Pixal3D-mac folder {root} lacks what the staged adapter "
                               f"relies on: "
                        f"{', '.join(missing)}. Nothing was loaded.",
                        "Use a Pixal3D-mac version with these names (see docs/pixal3d.md), or run "
                        "with --load eager to use the port's own loading only if it runs at all.",
                        tuple(missing))
    pkg = sys.modules.get("pixal3d")
    version = {"pixal3d": getattr(pkg, "__version__", None), "git": static["commit"], "api": API,
               "known_commit": static["known_commit"], "matches": static["matches"],
               "runs": static["runs"]}
    return Port(root=root, gm=gm, models=models, pipeline_module=pipeline_module,
                pipeline_cls=pipeline_module.Pixal3DImageTo3DPipeline, icp=icp, version=version)


def static_report(port_dir: Optional[os.PathLike | str] = None) -> dict:
    """``check --static``: locate the folder and compare its sources with the known commits
    (``static.check_static``: ``ast`` only, no imports, no torch), and the names the lean
    conditioning relies on in them and in NAF's cached hub source (``"working_memory"``:
    ``lean_static.lean_report``). Returns that report plus
    ``"error"`` (None, or the ``PortError`` subclass name when the folder is missing or its
    sources drifted), ``"reason"`` and ``"hint"``. Never raises for a bad port."""
    from stageload.pixal3d.lean.static import lean_report

    try:
        root = locate_port(port_dir)
        report = check_static(root, _git_commit(root))
        report["working_memory"] = lean_report(root)
    except PortError as err:
        return {"ok": False, "error": type(err).__name__, "reason": err.message, "hint": err.hint,
                "missing": list(err.missing), "drift": [], "root": None, "commit": None}
    if report["ok"]:
        return {**report, "error": None, "reason": None, "hint": None, "missing": []}
    try:
        require_static(root, report["commit"])
    except PortVersionError as err:
        return {**report, "error": type(err).__name__, "reason": err.message, "hint": err.hint,
                "missing": list(err.missing)}
    raise AssertionError("check_static and require_static disagree")  # pragma: no cover


def check_port(port_dir: Optional[os.PathLike | str] = None) -> dict:
    """``{"ok": bool, "reason", "hint", "error", "missing", "root", "version", "static"}`` for a
    port folder: the static check, then the port imported and every relied-on name checked.
    ``error``: None, or the ``PortError`` subclass name (``PortMissing``, ``PortVersionError``)
    that a run would raise (callers map it to their own kinds). Never raises for a bad port.
    Loads no weights."""
    static = static_report(port_dir)
    if not static["ok"]:
        return {"ok": False, "reason": static["reason"], "hint": static["hint"],
                "error": static["error"],
                "missing": static["missing"], "root": static["root"], "version": None,
                "static": static}
    try:
        port = open_port(port_dir)
    except PortError as err:
        return {"ok": False, "reason": err.message, "hint": err.hint, "error": type(err).__name__,
                "missing": list(err.missing), "root": None, "version": None, "static": static}
    return {"ok": True, "reason": None, "hint": None, "error": None, "missing": [],
            "root": str(port.root), "version": port.version, "static": static}
