"""Fingerprints of a run: a hash and a copy of every sampler output (latent), and a compare.

A fingerprint folder holds ``fingerprint.json`` (``{"entries": {key: {"sha256", "tensors":
{part: {"shape", "dtype", "sha256"}}}}, "meta": {...}}``) and one ``<key>.safetensors`` per
entry with its tensors (a dense latent is ``samples``; a sparse one is ``feats`` and
``coords``; the final mesh is ``vertices``, ``faces``, ``attrs``, ``coords``). Keys are
``sparse_structure``, ``shape_512``, ``shape_1024``, ``texture`` (the four sampler calls of a
cascade, named by the stage they ran in) and ``mesh``. Hashes are SHA-256 over dtype, shape
and the raw bytes (CPU, contiguous), so equal hashes mean bit-identical tensors.

``python -m stageload.pixal3d compare A B`` prints, per key, equal or the largest absolute
difference, and exits 0 when every entry is identical, 1 otherwise, 2 when a folder is unusable.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

INDEX = "fingerprint.json"


def tensor_parts(value: Any) -> dict:
    """The tensors of a sampler output or mesh: a tensor → ``{"samples": t}``; an object with
    ``feats``/``coords`` (a sparse tensor) → both; a mesh → its ``vertices``, ``faces`` and, when
    present, ``attrs``/``coords``. Raises ``TypeError`` for anything else."""
    import torch
    if isinstance(value, torch.Tensor):
        return {"samples": value}
    parts = {}
    for name in ("feats", "coords", "vertices", "faces", "attrs"):
        part = getattr(value, name, None)
        if isinstance(part, torch.Tensor):
            parts[name] = part
    if not parts:
        raise TypeError(f"cannot fingerprint a {type(value).__name__}: no tensor, feats/coords or "
                        f"vertices/faces")
    return parts


def tensor_sha256(t) -> str:
    """SHA-256 of dtype, shape and bytes of the torch tensor ``t`` (moved to the CPU, made
    contiguous)."""
    import torch
    t = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class FingerprintRecorder:
    """Writes a fingerprint folder. ``record(key, value)`` hashes and copies one output (a key
    seen before gets ``_1``, ``_2``… appended); ``close(meta)`` writes the index.

    ``folder`` is created; an existing ``fingerprint.json`` there raises ``FileExistsError``
    (a fingerprint is never overwritten; choose a new folder).
    """

    def __init__(self, folder: os.PathLike | str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        if (self.folder / INDEX).exists():
            raise FileExistsError(f"{self.folder / INDEX} exists; give --fingerprint a new folder")
        self.entries: dict[str, dict] = {}

    def record(self, key: str, value: Any) -> str:
        name, n = key, 1
        while name in self.entries:
            name, n = f"{key}_{n}", n + 1
        from safetensors.torch import save_file
        parts = {k: v.detach().to("cpu").contiguous() for k, v in tensor_parts(value).items()}
        save_file(parts, str(self.folder / f"{name}.safetensors"))
        info = {k: {"shape": list(v.shape), "dtype": str(v.dtype),
                    "sha256": tensor_sha256(v)} for k, v in parts.items()}
        joined = "".join(f"{k}:{info[k]['sha256']}" for k in sorted(info))
        whole = hashlib.sha256(joined.encode()).hexdigest()
        self.entries[name] = {"sha256": whole, "tensors": info}
        return name

    def close(self, meta: Optional[dict] = None) -> Path:
        path = self.folder / INDEX
        path.write_text(json.dumps({"entries": self.entries, "meta": meta or {}}, indent=1,
                                   default=str))
        return path


def read_fingerprint(folder: os.PathLike | str) -> dict:
    """The index of a fingerprint folder. Raises ``FileNotFoundError`` / ``ValueError`` with a
    message naming the folder when it is not one."""
    path = Path(folder) / INDEX
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a fingerprint folder (no {INDEX}); make one with "
                                f"--fingerprint")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc


def compare(a: os.PathLike | str, b: os.PathLike | str) -> dict:
    """Compare two fingerprint folders. Returns ``{"identical": bool, "entries": {key:
    {"equal": bool, "max_abs_diff": float|None, "note": str|None}}}``; a key in only one folder
    counts as different. ``max_abs_diff`` is computed from the stored copies when shapes match
    (read with ``safetensors.numpy``, so comparing needs no torch)."""
    import numpy as np
    from safetensors.numpy import load_file
    ia, ib = read_fingerprint(a), read_fingerprint(b)
    out = {}
    for key in sorted(set(ia["entries"]) | set(ib["entries"])):
        ea, eb = ia["entries"].get(key), ib["entries"].get(key)
        if ea is None or eb is None:
            out[key] = {"equal": False, "max_abs_diff": None,
                        "note": f"only in {'B' if ea is None else 'A'}"}
            continue
        if ea["sha256"] == eb["sha256"]:
            out[key] = {"equal": True, "max_abs_diff": 0.0, "note": None}
            continue
        ta = load_file(str(Path(a) / f"{key}.safetensors"))
        tb = load_file(str(Path(b) / f"{key}.safetensors"))
        diff, note = 0.0, None
        for part in sorted(set(ta) | set(tb)):
            x, y = ta.get(part), tb.get(part)
            if x is None or y is None or x.shape != y.shape:
                shapes = [None if t is None else tuple(t.shape) for t in (x, y)]
                note = f"{part}: shapes differ ({shapes[0]} vs {shapes[1]})"
                diff = None
                break
            delta = np.abs(x.astype(np.float64) - y.astype(np.float64))
            diff = max(diff, float(delta.max()) if x.size else 0.0)
        out[key] = {"equal": False, "max_abs_diff": diff, "note": note}
    return {"identical": all(e["equal"] for e in out.values()) and bool(out), "entries": out}
