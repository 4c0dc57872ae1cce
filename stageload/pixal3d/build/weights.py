"""Which weight files a Pixal3D run will read, whether they are there and whole — without
loading them, without torch and without the port's imports (the runner's light precheck runs it
before admission; ``python -m runner check`` reports it).

Where the port finds its weights (read in ``pawel-mazurkiewicz/Pixal3D-mac`` at e5fbf2d5:
``generate_mps.py`` and the pipeline's ``from_pretrained``):

- ``MODEL_PATH`` (``TencentARC/Pixal3D``, or a local folder given as ``--model-path``):
  ``pipeline.json``, whose ``args.models`` maps each pipeline model to a checkpoint ``ckpts/X``
  read as ``X.json`` + ``X.safetensors``; its ``args.rembg_model.args.model_name`` is the
  background remover's Hugging Face repository.
- ``IMAGE_COND_CONFIGS[…]["model_name"]``: the DINOv3 backbone's repository.
- Both ``transformers`` models are read as ``config.json`` + ``model.safetensors``.
- ``MOGE_MODEL_NAME``: the camera estimator's repository; its file names are MoGe's own
  business, so only the repository's presence in the cache is checked.
- The NAF upsampler comes through ``torch.hub`` from its own repository: not checked here.

The Hugging Face cache is looked up by hand, as huggingface_hub's "Manage the cache" guide lays
it out (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``;
``models--ORG--NAME/refs/main`` names the revision, files are in ``snapshots/<revision>/``),
because the supervisor's interpreter need not have ``huggingface_hub``
(``try_to_load_from_cache`` answers the same question) and must never import the port.

A safetensors file is checked the way its format defines it (``huggingface/safetensors``
README, "Format"): 8 bytes little-endian header length N, N bytes of JSON (``dtype``,
``shape``, ``data_offsets`` per tensor), then the data; the file must be exactly as long as
the header says. :func:`safetensors_problem` reads only the header.
"""
from __future__ import annotations

import ast
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stageload.pixal3d.errors import BadWeights, WeightsMissing
from stageload.pixal3d.plan import plan_for

#: How the port's own README says the weights are obtained (Pixal3D-mac README.md at e5fbf2d5,
#: "Requirements" and "Usage": pulled from Hugging Face ``TencentARC/Pixal3D`` on first run).
DOWNLOAD = ("Pixal3D-mac pulls its weights from Hugging Face (TencentARC/Pixal3D and the models "
            "it names) on its first run: run the port once with internet access (in its folder: "
            "`.venv/bin/python generate_mps.py assets/images/0_img.png --output output_3d.glb`), "
            "or `huggingface-cli download REPO` (and each repository the check lists); keep "
            "HF_HOME pointing at that cache.")
REDOWNLOAD = ("Delete that file (or its repository folder in the Hugging Face cache) and download "
              "it again: run Pixal3D-mac once with internet access, or `huggingface-cli download "
              "REPO`.")
#: safetensors dtype code -> bytes per element (C64: a RoPE model's complex64 phase buffer,
#: TRELLIS.2's dense structure flow ``rope_phases``)
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
                "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
                "C64": 8}
_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit on the header (100 MB)


@dataclass(frozen=True)
class WeightFile:
    """One file a run reads. ``model``: the plan's model name (or ``pipeline``); ``repo``: the
    Hugging Face repository or local folder; ``name``: the file inside it (or ``""`` for a
    repository checked as a whole); ``path``: where it is, or where it is expected;
    ``problem``: None when usable, ``"missing"``, or what is wrong with it."""
    model: str
    repo: str
    name: str
    path: str
    problem: Optional[str] = None


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, from the variables huggingface_hub reads."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
    return Path(home).expanduser() / "hub"


def _snapshot(repo_id: str) -> Path:
    """The snapshot folder ``refs/main`` names (``snapshots/main`` shown when there is none)."""
    root = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    try:
        revision = (root / "refs" / "main").read_text().strip()
    except OSError:
        found = sorted(p for p in (root / "snapshots").glob("*") if p.is_dir()) \
            if (root / "snapshots").is_dir() else []
        return found[-1] if found else root / "snapshots" / "main"
    return root / "snapshots" / revision


def locate(source: str, name: str) -> Path:
    """Where ``name`` of ``source`` (a local folder, else a Hugging Face repository id) lies
    or would lie."""
    if os.path.isdir(source):
        return Path(source) / name
    return _snapshot(source) / name


def port_names(root: os.PathLike | str) -> dict:
    """``{"model_path", "moge", "backbones"}`` read from the port's ``generate_mps.py`` with
    ``ast`` (literal assignments only; a name the file does not assign is None / [])."""
    path = Path(root) / "generate_mps.py"
    values = {}
    for node in ast.parse(path.read_bytes(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    configs = values.get("IMAGE_COND_CONFIGS") or {}
    backbones = sorted({c["model_name"] for c in configs.values()
                        if isinstance(c, dict) and isinstance(c.get("model_name"), str)})
    return {"model_path": values.get("MODEL_PATH"), "moge": values.get("MOGE_MODEL_NAME"),
            "backbones": backbones}


def safetensors_problem(path: os.PathLike | str) -> Optional[str]:
    """What is wrong with a safetensors file, from its header alone (None when it is whole):
    not a regular file, unreadable, empty, a header length past the end, a header that is not
    the format's JSON, a tensor whose bytes do not match its shape or lie past the end of the
    file, or a file longer or shorter than its header says. The tensor is named when known."""
    path = Path(path)
    if not path.exists():
        return "missing"
    if not path.is_file():
        return "is a folder, not a file" if path.is_dir() else "is not a regular file"
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return "is empty (0 bytes)"
            if size < 8:
                return f"is {size} bytes long, shorter than the 8-byte header length"
            (length,) = struct.unpack("<Q", f.read(8))
            if length > min(_MAX_HEADER, size - 8):
                return (f"claims a header of {length} bytes; the file has only {size - 8} after "
                        "the header length")
            header = json.loads(f.read(length))
    except PermissionError:
        return "cannot be read (permission denied)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except (UnicodeDecodeError, ValueError):
        return "has a header that is not the format's JSON"
    return _data_problem(header, size - 8 - length)


def _data_problem(header, data_bytes: int) -> Optional[str]:
    """The tensors of a parsed header against the ``data_bytes`` that follow it."""
    if not isinstance(header, dict):
        return "has a header that is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(x) for x in entry["data_offsets"])
            count = 1
            for dim in entry["shape"]:
                count *= int(dim)
            need = count * _DTYPE_BYTES[entry["dtype"]]
        except (KeyError, TypeError, ValueError):
            return f"tensor {name}: its header entry is not dtype/shape/data_offsets"
        if stop - begin != need or begin < 0:
            return (f"tensor {name}: its data_offsets hold {stop - begin} bytes, its shape "
                    f"needs {need}")
        if stop > data_bytes:
            return (f"tensor {name}: the file ends before its data (needs {stop} bytes of data, "
                    f"the file has {data_bytes})")
        end = max(end, stop)
    if end != data_bytes:
        return f"is {data_bytes - end} bytes longer than its tensors (not a whole safetensors file)"
    return None


def _file(model: str, source: str, name: str, *, safetensors: bool = False) -> WeightFile:
    path = locate(source, name)
    if safetensors:
        problem = safetensors_problem(path)
    elif not path.exists():
        problem = "missing"
    elif not path.is_file():
        problem = "is a folder, not a file" if path.is_dir() else "is not a regular file"
    elif not os.access(path, os.R_OK):
        problem = "cannot be read (permission denied)"
    else:
        problem = None
    return WeightFile(model, source, name, str(path), problem)


def _pipeline_args(entry: WeightFile) -> dict:
    """``args`` of a readable ``pipeline.json``; raises BadWeights when it is not one."""
    try:
        args = json.loads(Path(entry.path).read_text(encoding="utf-8"))["args"]
        if not isinstance(args, dict) or not isinstance(args.get("models"), dict):
            raise TypeError("args.models is not a mapping")
        return args
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise BadWeights(f"{entry.path} is not the pipeline's pipeline.json ({exc}).",
                         REDOWNLOAD.replace("REPO", entry.repo), (), file=entry.path) from None


def plan_files(root: os.PathLike | str, pipeline_type: str = "1024_cascade",
               model_path: Optional[str] = None) -> list[WeightFile]:
    """Every file the plan of ``pipeline_type`` reads (see the module docstring), in run order
    of first use, each with its ``problem``. ``root``: the port folder; ``model_path``: the
    port's ``--model-path`` (default its ``MODEL_PATH``). When ``pipeline.json`` itself is
    missing, only it is listed (it names the rest). Raises ``BadWeights`` for a
    ``pipeline.json`` that cannot be parsed, ``ValueError`` for an unknown pipeline type."""
    names = port_names(root)
    source = model_path or names["model_path"] or "TencentARC/Pixal3D"
    pipeline = _file("pipeline", source, "pipeline.json")
    if pipeline.problem == "missing":  # the rest of the pipeline's files are named inside it
        return [pipeline] + [f for model in ("image_cond_backbone", "camera_estimator")
                             for f in _model_files(model, source, {"models": {}}, names)]
    if pipeline.problem:
        raise BadWeights(f"The weight file {pipeline.path} is damaged: it {pipeline.problem}.",
                         REDOWNLOAD.replace("REPO", source), (), file=pipeline.path)
    args = _pipeline_args(pipeline)
    files = [pipeline]
    seen = set()
    for models in plan_for(pipeline_type).values():
        for model in models:
            if model in seen:
                continue
            seen.add(model)
            files += _model_files(model, source, args, names)
    return files


def _model_files(model: str, source: str, args: dict, names: dict) -> list[WeightFile]:
    """The files of one plan model (empty for one not checked here: ``naf``)."""
    if model in args["models"]:
        ckpt = str(args["models"][model])
        return [_file(model, source, f"{ckpt}.json"),
                _file(model, source, f"{ckpt}.safetensors", safetensors=True)]
    if model == "rembg_model":
        repo = ((args.get("rembg_model") or {}).get("args") or {}).get("model_name")
        repos = [repo] if isinstance(repo, str) else []
    elif model == "image_cond_backbone":
        repos = names["backbones"]
    elif model == "camera_estimator" and names["moge"]:
        folder = _snapshot(names["moge"])
        return [WeightFile(model, names["moge"], "", str(folder),
                           None if folder.is_dir() and any(folder.iterdir()) else "missing")]
    else:
        return []
    return [f for repo in repos
            for f in (_file(model, repo, "config.json"),
                      _file(model, repo, "model.safetensors", safetensors=True))]


def require_weights(root: os.PathLike | str, pipeline_type: str = "1024_cascade",
                    model_path: Optional[str] = None) -> list[WeightFile]:
    """:func:`plan_files`, raising for the first file at fault: ``WeightsMissing`` (message: the
    file, its model and where it is expected, and how many others are missing; hint:
    :data:`DOWNLOAD`) or ``BadWeights`` (the file, the tensor when known, what is wrong; hint:
    delete it and download it again). Returns the files when all are usable."""
    files = plan_files(root, pipeline_type, model_path)
    missing = [f for f in files if f.problem == "missing"]
    if missing:
        first = missing[0]
        what = first.name or "the repository"
        role = "the pipeline's list of models" if first.model == "pipeline" else first.model
        more = f" ({len(missing) - 1} more are missing too)" if len(missing) > 1 else ""
        raise WeightsMissing(f"The Pixal3D weights are not there: {what} of {first.repo} ({role}) "
                             f"is expected at {first.path}{more}.",
                             DOWNLOAD.replace("REPO", first.repo), tuple(f.path for f in missing))
    for entry in files:
        if entry.problem:
            tensor = entry.problem.split(":", 1)[0][len("tensor "):] \
                if entry.problem.startswith("tensor ") else None
            said = entry.problem if tensor else f"it {entry.problem}"
            raise BadWeights(f"The weight file {entry.path} (of {entry.model}) is damaged: "
                             f"{said}.", REDOWNLOAD.replace("REPO", entry.repo),
                             (tensor,) if tensor else (), file=entry.path)
    return files
