"""One case of the structure stage's memory, run in its own process
(``python -m bench.pixal3d.structure_case CASE --work DIR --result FILE [...]``; the parent is
``bench.pixal3d.structure_memory``).

The structure stage (``stageload.pixal3d.plan``: ``image_cond_backbone``,
``sparse_structure_flow_model``, ``sparse_structure_decoder``) runs, in the port's order
(``Pixal3DImageTo3DPipeline.get_proj_cond_ss`` then ``sample_sparse_structure``): DINOv3 on the
512² image with its projection onto the flow's 16³ grid, the structure flow's sampler steps
(each one or two forwards of the DiT: classifier-free guidance calls it for ``cond`` and then
``neg_cond``), and the decoder from the 16³ latent to the 64³ occupancy. Cases:

- ``flow_write`` / ``decoder_write``: write the real-width checkpoint of the structure flow
  (``flow_configs.REAL``: 1536 wide, 30 blocks, blocks bf16) / decoder
  (``make_weights.decoder_configs("real")``) into ``--work`` once. The flow's block weights are
  random (N(0, 0.02²), in the block dtype); its other tensors, the RoPE phase table included,
  come from the same class built for real with one block. Only the sizes and layout matter
  here: nothing computes with these weights.
- ``flow_load_direct`` / ``decoder_load_direct``: the product's loader
  (``stageload.pixal3d.build.direct.load_port_model``), as a staged run loads.
- ``shape_decoder_write`` / ``shape_decoder_load_direct`` / ``shape_decoder_load_port``: the
  same for the real-width shape decoder (0.95 GB; not a structure part, measured alongside).
- ``flow_load_port`` / ``decoder_load_port``: the port's own ``pixal3d.models.from_pretrained``
  (the stand-in mirrors it: build with random initialisation, then ``load_state_dict`` of the
  file read with ``safetensors.torch.load_file``).
- ``flow_step``: one forward of the structure flow at its real token count (16³ = 4,096) and
  widths, with ``--blocks`` of its 30 blocks (a block's activations are freed before the next
  one runs, so a step's transient does not grow with depth; the time per block scales), the
  dense attention back end ``--backend`` (the port sets ``sdpa`` on a Mac; ``naive`` is the
  real module's whole-score-matrix fallback), the conditioning of the real shapes (5 global
  tokens and 4,096 projected tokens of 1,024 channels, fp32 as the extractor returns them).
- ``decoder_step``: the decoder's forward at real widths, 16³ latent → 64³ occupancy, its torso
  in fp32 (the real one runs it in fp16: its activations are half these; fp16 ``conv3d`` on
  this CPU did not finish one pass in 20 minutes).

Figures: ``base`` = the footprint (RSS + swap) once the case's inputs exist, the kernel's
high-water mark reset there; ``peak`` = the high-water mark right after the measured call;
``after`` = the footprint then. So ``peak - base`` is what the call took over its inputs at its
most (for a load: the weights and any transient copy), ``after - base`` what stays.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

FLOW = "sparse_structure_flow_model"
DECODER = "sparse_structure_decoder"
#: loaded in shape_512 and decode; its load is measured here too (the default bench's decoders
#: are test-width, below its 32 MiB floor)
SHAPE_DECODER = "shape_slat_decoder"
#: the structure flow's conditioning as ``get_proj_cond_ss`` returns it: DINOv3 ViT-L's CLS and
#: 4 register tokens, and its 1,024-channel patch features projected onto the 16³ grid
GLOBAL_TOKENS = 5
COND_CHANNELS = 1024


def _port_path() -> None:
    from standin import PORT_DIR
    if str(PORT_DIR) not in sys.path:
        sys.path.insert(0, str(PORT_DIR))


def _baseline() -> int:
    from stageload.meter import footprint, reset_high_water_mark
    reset_high_water_mark(os.getpid())
    return footprint(os.getpid(), tree=False)


def _figures(base: int, start: tuple[float, float]) -> dict:
    from stageload.meter import footprint, high_water_mark
    return {"base": base, "peak": high_water_mark(os.getpid()),
            "after": footprint(os.getpid(), tree=False),
            "seconds": round(time.perf_counter() - start[0], 3),
            "cpu_seconds": round(time.process_time() - start[1], 3)}


def _start() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _state_bytes(module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def flow_args(blocks: int | None = None) -> tuple[str, dict]:
    """``(class name, constructor args)`` of the real structure flow (``flow_configs.REAL``),
    with ``blocks`` blocks when given."""
    _port_path()
    import flow_configs
    cls, args = flow_configs.REAL[FLOW]
    return cls, (dict(args, num_blocks=blocks) if blocks else dict(args))


def decoder_args(name: str = DECODER) -> tuple[str, dict]:
    """``(class name, constructor args)`` of the real-width decoder ``name`` (default the
    structure decoder)."""
    from standin import weights_module
    return weights_module().decoder_configs("real")[name]


def _write(folder: Path, name: str, cls: str, args: dict, state: dict) -> dict:
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"name": cls, "args": args}))
    save_file(state, str(folder / f"{name}.safetensors"))
    return {"bytes": sum(t.numel() * t.element_size() for t in state.values()),
            "tensors": len(state)}


def write_flow(folder: Path) -> dict:
    """The real-width structure flow's checkpoint (module docstring)."""
    import torch
    _port_path()
    import pixal3d.models as models
    cls, args = flow_args()
    with torch.device("meta"):
        layout = getattr(models, cls)(**args).state_dict()
    small = getattr(models, cls)(**dict(args, num_blocks=1)).state_dict()
    gen = torch.Generator().manual_seed(0)
    state = {}
    for key, meta in layout.items():
        if not key.startswith("blocks."):
            state[key] = small[key].contiguous()
            continue
        values = torch.empty(meta.shape, dtype=torch.float32).normal_(0, 0.02, generator=gen)
        state[key] = values.to(meta.dtype)
    return _write(folder, FLOW, cls, args, state)


def write_decoder(folder: Path, name: str = DECODER) -> dict:
    """The real-width decoder ``name``'s checkpoint (its initialisation; fp16 torso)."""
    import torch
    _port_path()
    import pixal3d.models as models
    cls, args = decoder_args(name)
    torch.manual_seed(0)
    state = {k: v.contiguous() for k, v in getattr(models, cls)(**args).state_dict().items()}
    return _write(folder, name, cls, args, state)


def load_case(folder: Path, name: str, direct: bool) -> dict:
    """Load ``folder/name`` with the product's loader or the port's own; figures + bytes."""
    _port_path()
    import pixal3d.models as models

    from stageload.pixal3d.build.direct import load_port_model, prepare_meta_runtime
    prepare_meta_runtime()  # the runtime's one-time cost, paid in setup by a staged run
    path = str(folder / name)
    base = _baseline()
    start = _start()
    if direct:
        module, note = load_port_model(models, path, "cpu",
                                       lambda: models.from_pretrained(path))
        method = note.method
    else:
        module, method = models.from_pretrained(path), "port_from_pretrained"
    figures = _figures(base, start)
    dtypes: dict[str, int] = {}
    for t in module.state_dict().values():
        key = str(t.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + t.numel() * t.element_size()
    return {**figures, "method": method, "weight_bytes": _state_bytes(module),
            "bytes_by_dtype": dtypes}


def flow_step_case(blocks: int, backend: str) -> dict:
    """One forward of the real-width structure flow with ``blocks`` blocks (module docstring)."""
    import torch
    _port_path()
    import pixal3d.models as models
    from pixal3d.modules.attention import config
    config.set_backend(backend)
    cls, args = flow_args(blocks)
    torch.manual_seed(0)
    model = getattr(models, cls)(**args).eval()
    res, cin = args["resolution"], args["in_channels"]
    x = torch.randn(1, cin, res, res, res)
    t = torch.tensor([500.0])
    cond = {"global": torch.randn(1, GLOBAL_TOKENS, COND_CHANNELS),
            "proj": torch.randn(1, res ** 3, args.get("proj_in_channels") or COND_CHANNELS)}
    with torch.no_grad():
        base = _baseline()
        start = _start()
        out = model(x, t, cond)
        figures = _figures(base, start)
    return {**figures, "tokens": res ** 3, "blocks": blocks, "backend": backend,
            "weight_bytes": _state_bytes(model), "finite": bool(torch.isfinite(out).all()),
            "out_shape": list(out.shape)}


def decoder_step_case() -> dict:
    """The real-width structure decoder on a 16³ latent (module docstring)."""
    import torch
    _port_path()
    import pixal3d.models as models
    cls, args = decoder_args()
    torch.manual_seed(0)
    model = getattr(models, cls)(**args).eval()
    model.convert_to_fp32()  # fp16 conv3d on this CPU: > 20 minutes for one pass (measured)
    z = torch.randn(1, args["latent_channels"], 16, 16, 16)
    with torch.no_grad():
        base = _baseline()
        start = _start()
        out = model(z)
        figures = _figures(base, start)
    return {**figures, "weight_bytes": _state_bytes(model), "out_shape": list(out.shape),
            "occupied": int((out > 0).sum())}


def run(case: str, work: Path, blocks: int, backend: str) -> dict:
    """The figures of ``case`` (module docstring). Raises ValueError for an unknown case."""
    cases = {
        "flow_write": lambda: write_flow(work), "decoder_write": lambda: write_decoder(work),
        "flow_load_direct": lambda: load_case(work, FLOW, True),
        "flow_load_port": lambda: load_case(work, FLOW, False),
        "decoder_load_direct": lambda: load_case(work, DECODER, True),
        "decoder_load_port": lambda: load_case(work, DECODER, False),
        "shape_decoder_write": lambda: write_decoder(work, SHAPE_DECODER),
        "shape_decoder_load_direct": lambda: load_case(work, SHAPE_DECODER, True),
        "shape_decoder_load_port": lambda: load_case(work, SHAPE_DECODER, False),
        "flow_step": lambda: flow_step_case(blocks, backend),
        "decoder_step": decoder_step_case,
    }
    if case not in cases:
        raise ValueError(f"unknown case {case!r}; known: {', '.join(cases)}")
    return cases[case]()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--backend", default="sdpa")
    ns = parser.parse_args(argv)
    ns.result.write_text(json.dumps(run(ns.case, ns.work, ns.blocks, ns.backend)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
