"""The stand-in's *modelled* port export at real sizes: what the port's o_voxel ``to_glb``
would hold, step by step, for an input mesh, a decimation target and a texture size — from the
stand-in's model (``standin/port/o_voxel/_memory.py``: bytes per element, fitted so that the
port's defaults give SPEC §1's 69.6–70.2 GB; only that total is a measurement, made on a Mac)
and the order in which the stand-in's ``to_glb`` (``standin/port/o_voxel/postprocess.py``)
creates and drops its blocks. A model, labelled as one wherever it is shown: nothing here is
measured.

Steps and what each holds (``B`` = ``_memory.BYTES``; ``F`` input faces, ``R`` remeshed faces,
``T`` the decimation target, ``X`` texels):

- always: the caller's input tensors ``B["mesh"]·F``; the mesh backend's own copy of its
  current mesh ``B["mesh"]`` per face;
- ``fill_holes``: ``B["fill_holes"]·F``; then the BVH over the full mesh ``B["bvh"]·F``, kept
  until the bake ends;
- remesh on (the port's default): ``remesh`` ``B["remesh"]·R`` with ``R`` =
  ``REMESH_FACES_1024`` × (grid / 1024)² (the model's ≈17 M faces at 1024); ``cleanup`` and
  the first ``simplify`` ``B["cleanup"]·R`` each;
- remesh off: ``simplify(3T)`` ``B["cleanup"]·F``, then cleanups and ``simplify(T)`` on ``3T``;
- ``uv_unwrap`` ``B["uv"]·T``; ``bake`` ``B["texel"]·X`` (flex_gemm present, as the port's
  default install on a Mac has it; without it a dense 6 × grid³ float32 volume is added).

``RUNTIME_BYTES`` (the export process's interpreter, torch and port: 2.9 GB, the figure the
model was fitted above) is added to give a modelled process peak.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from standin import PORT_DIR

#: the model's remeshed faces at the 1024 grid (``_memory``'s docstring: ≈17 M).
REMESH_FACES_1024 = 17_000_000
#: the export process's runtime the model was fitted above (``_memory``: 2.9 GB).
RUNTIME_BYTES = int(2.9e9)


def _memory_module():
    """The stand-in's ``o_voxel/_memory.py`` (loaded by path: it needs no torch)."""
    name = "standin_o_voxel_memory"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(PORT_DIR) / "o_voxel" /
                                                      "_memory.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def port_export(faces: int, target: int = 1_000_000, texture: int = 2048, grid: int = 1024,
                remesh: bool = True, flex_gemm: bool = True) -> dict:
    """The modelled port export: ``{"steps": {step: bytes held at its height}, "peak"
    (working bytes, the largest step), "process_peak" (+ RUNTIME_BYTES), "remeshed_faces",
    "model": "…"}`` — bytes, a model (see the module docstring)."""
    b = _memory_module().BYTES
    f, t, x = int(faces), int(min(target, faces)), int(texture) ** 2
    base = b["mesh"] * f  # the caller's tensors, alive throughout
    steps = {"fill_holes": base + b["mesh"] * f + b["fill_holes"] * f}
    bvh = b["bvh"] * f
    if remesh:
        r = int(REMESH_FACES_1024 * (grid / 1024) ** 2)
        steps["remesh"] = base + b["mesh"] * f + bvh + b["remesh"] * r
        steps["cleanup"] = base + bvh + b["mesh"] * r + b["cleanup"] * r
        steps["simplify"] = steps["cleanup"]
    else:
        r = 0
        steps["simplify"] = base + bvh + b["mesh"] * f + b["cleanup"] * f
        steps["cleanup"] = base + bvh + b["mesh"] * 3 * t + b["cleanup"] * 3 * t
    steps["uv_unwrap"] = base + bvh + b["mesh"] * t + b["uv"] * t
    dense = 0 if flex_gemm else 4 * 6 * grid ** 3
    steps["bake"] = base + bvh + b["mesh"] * t + b["texel"] * x + dense
    peak = max(steps.values())
    return {"steps": steps, "peak": peak, "process_peak": peak + RUNTIME_BYTES,
            "remeshed_faces": r, "model": "stand-in model of the port's o_voxel to_glb "
            "(standin/port/o_voxel/_memory.py), not a measurement"}
