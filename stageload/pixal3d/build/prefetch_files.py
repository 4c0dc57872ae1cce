"""The files each model of a Pixal3D plan reads, for the staged models' prefetch.

``stageload.staged.StagedModels(files=...)`` reads ahead, after each stage's ``ready``, the files
of the next stage's models (``stageload.prefetch``). Which files those are is what
``weights.plan_files`` already knows (the pipeline's ``ckpts/X.json`` + ``X.safetensors``, the
background remover's and the DINOv3 backbone's ``config.json`` + ``model.safetensors`` in the
Hugging Face cache), so it is asked here, once, when the staged pipeline is built. A model whose
files are not listed (NAF, through ``torch.hub``) is left out, and its prefetch event says so
("no files known"); MoGe-2, which ``weights`` checks only as a repository, gets every regular
file of its snapshot folder (the repository holds its one checkpoint and small text files).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from stageload.pixal3d.errors import PortError
from stageload.pixal3d.build.weights import plan_files

log = logging.getLogger(__name__)


def model_files(root: os.PathLike | str, pipeline_type: str,
                model_path: Optional[str] = None) -> dict[str, list[str]]:
    """Plan model name → paths of its files that exist as regular files, in plan order.

    ``root``: the port folder; ``model_path``: the port's ``--model-path``. Never raises for
    missing or damaged weights (the precheck reports those; loading them fails on its own):
    then the mapping is empty or partial and the reason is logged."""
    try:
        entries = plan_files(root, pipeline_type, model_path)
    except (PortError, OSError, ValueError, SyntaxError) as exc:
        log.info("prefetch: no file list (%s)", exc)
        return {}
    files: dict[str, list[str]] = {}
    for entry in entries:
        if entry.model == "pipeline" or entry.problem is not None:
            continue
        if os.path.isfile(entry.path):
            files.setdefault(entry.model, []).append(entry.path)
        elif os.path.isdir(entry.path):  # a repository checked as a whole (MoGe-2)
            found = sorted(str(p) for p in Path(entry.path).rglob("*") if p.is_file())
            files.setdefault(entry.model, []).extend(found)
    return files
