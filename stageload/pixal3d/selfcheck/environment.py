"""What the port runs with on this machine: the sparse back ends it chose and the Metal
packages found, and what a missing one changes.

On a Mac the port picks its back ends when it starts (``generate_mps.py`` at 0be9e69a, about
lines 557–586): sparse attention ``flash_attn`` when the mtlflashattn package's ``flash_attn``
shim imports, else ``naive`` (fp32 matmul and softmax over 2,048-query chunks); sparse
convolution ``flex_gemm`` when mtlgemm's ``flex_gemm`` imports, else ``none`` (pure PyTorch).
What runs is what the port's ``pixal3d.modules.sparse.config`` holds in this process
(``ATTN``; ``CONV`` where the port has it) — read here, with the environment variables that set
them. Packages are looked up with ``importlib.util.find_spec`` only: nothing is imported (a
Metal extension must not be loaded on a machine that cannot run it).
"""
from __future__ import annotations

import importlib.util
import os

CONFIG_MODULE = "pixal3d.modules.sparse.config"
ENV = ("SPARSE_ATTN_BACKEND", "ATTN_BACKEND", "SPARSE_CONV_BACKEND")

#: import name → (its package, what its absence changes).
METAL_PACKAGES = {
    "mtlflashattn": ("mtlflashattn", "the port's sparse attention runs naive (fp32 score "
                     "matrices over 2,048-query chunks: slower; lean slices them) and "
                     "--flash-sdpa is unavailable"),
    "flex_gemm": ("mtlgemm", "sparse convolution runs none (pure PyTorch, several times "
                  "slower) and o_voxel's grid sample builds a dense volume (the port's export; "
                  "the bounded export does not need it)"),
    "cumesh": ("mtlmesh", "the port's export cleans the mesh with its pure-Python port "
               "(pixal3d/utils/cumesh_port); the bounded export does not need it"),
    "mtlbvh": ("mtlbvh", "mtlmesh's BVH is missing: the port's export falls back as above"),
    "mtldiffrast": ("mtldiffrast", "the port's export bakes without Metal rasterisation; the "
                    "bounded export does not need it"),
}


def backends() -> dict:
    """``{"attention", "convolution"}`` as the port's sparse config holds them now (None where
    it has no such name, or cannot be imported: then ``"why"``), and ``"environment"``: the
    switches of :data:`ENV` that are set."""
    out = {"attention": None, "convolution": None,
           "environment": {k: os.environ[k] for k in ENV if k in os.environ}}
    try:
        from pixal3d.modules.sparse import config  # CONFIG_MODULE, the port's own
    except ImportError as exc:
        out["why"] = f"{CONFIG_MODULE} cannot be imported ({exc})"
        return out
    out["attention"] = getattr(config, "ATTN", None)
    out["convolution"] = getattr(config, "CONV", None)
    return out


def metal_packages() -> list[dict]:
    """Each of :data:`METAL_PACKAGES`: ``{"module", "package", "found", "effect"}`` (``effect``:
    what its absence changes; None when found)."""
    out = []
    for module, (package, effect) in METAL_PACKAGES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        out.append({"module": module, "package": package, "found": found,
                    "effect": None if found else effect})
    return out
