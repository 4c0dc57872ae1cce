"""``python -m bench.pixal3d.flow_steps``: one step of each sparse flow model (shape 512, shape
1024, texture 1024) at its real token count and real widths, the port's attention path and the
lean one, each case in its own process (``bench.own_peak``; peak = the kernel's high-water mark
over the footprint once the case's inputs exist).

The models are the stand-in's real-architecture classes at the released widths
(``standin/port/flow_configs.py`` ``REAL``: ``ElasticSLatFlowModel``, 1536 wide, 12 heads × 128,
MLP 8,192, blocks bf16) with ``--blocks`` of their 30 blocks: under ``no_grad`` a block's
temporaries are freed before the next block runs, so a step's working memory does not grow
with depth (the time does, per block). Tokens: a character at 1024 (SPEC §1's run and the
conditioning bench): 21,500 active voxels of the 64³ grid for ``shape_1024`` and ``texture``,
4,000 of the 32³ grid for ``shape_512`` (``--tokens-1024``, ``--tokens-512``). Inputs: the
noisy latent's tokens (fp32), ``t``, the conditioning as ``get_proj_cond_shape`` returns it (5
global tokens of 1,024 and the projected ``[N, 2,048]`` features, fp32), for the texture flow
the shape latent (``concat_cond``). Paths: ``naive`` — the port's sparse attention with no
mtlflashattn (2,048-query fp32 chunks); ``lean`` — the same with
``stageload.pixal3d.lean.models.lean_attention`` in its place (query slices from a 1 GiB
budget) and each block's feed-forward by token ranges
(``stageload.pixal3d.lean.feedforward.lean_feedforward``, 2,048 tokens), as the product installs
them; ``lean_256m`` — the same at a 256 MiB budget; ``lean_attn`` / ``lean_256m_attn`` — the
attention slices alone (lean before the feed-forward ranges), for comparison in one run;
``flash_attn`` — the stand-in of mtlflashattn's shim (tiles, no score matrix), for what lean
leaves alone; ``lean_flash_attn`` — that back end with lean's feed-forward ranges at the
product's default budget (what ``--working-memory lean`` runs where the shim imports).

Writes ``OUT_DIR/<--out-name, default flow_steps>.json`` and ``.md``. The naive path holds
~7.7 GiB at 21,500 tokens: run it under ``flock /tmp/bigmem.lock``. A 1024 case takes
minutes a block on two cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]
ATTENTION_BUDGET = GIB
#: lean paths -> their attention budget: 1 GiB and a quarter of it, 256 MiB (the product's default,
#: ``stageload.pixal3d.lean.models.DEFAULT_BUDGET``)
LEAN_BUDGETS = {"lean": ATTENTION_BUDGET, "lean_256m": ATTENTION_BUDGET // 4,
                "lean_attn": ATTENTION_BUDGET, "lean_256m_attn": ATTENTION_BUDGET // 4}
#: lean paths without the feed-forward ranges (the attention slices alone)
ATTENTION_ONLY = ("lean_attn", "lean_256m_attn")
#: the port's flash_attn back end (nothing for lean to slice) with lean's feed-forward ranges at
#: the product's default budget: what ``--working-memory lean`` runs where mtlflashattn imports
LEAN_FLASH = "lean_flash_attn"
PATHS = ("naive", *LEAN_BUDGETS, "flash_attn", LEAN_FLASH)
#: model -> grid resolution of its tokens
MODELS = {"shape_slat_flow_model_512": 32, "shape_slat_flow_model_1024": 64,
          "tex_slat_flow_model_1024": 64}
GLOBAL_TOKENS, COND_CHANNELS, PROJ_CHANNELS = 5, 1024, 2048


def _port_path() -> None:
    from standin import PORT_DIR
    if str(PORT_DIR) not in sys.path:
        sys.path.insert(0, str(PORT_DIR))


def _coords(tokens: int, resolution: int, gen):
    """``[tokens, 4]`` int32 distinct cells of one batch, sorted (batch, x, y, z)."""
    import torch
    cells = torch.randperm(resolution ** 3, generator=gen)[:tokens].sort().values
    xyz = torch.stack([cells // resolution ** 2, cells // resolution % resolution,
                       cells % resolution], dim=1)
    return torch.cat([torch.zeros(tokens, 1, dtype=torch.long), xyz], dim=1).int()


def _install(path: str, events: list) -> None:
    import pixal3d.modules.sparse.attention.modules as attn_modules
    from pixal3d.modules.sparse import config
    config.ATTN = "flash_attn" if path in ("flash_attn", LEAN_FLASH) else "naive"
    if path in LEAN_BUDGETS:
        from stageload.pixal3d.lean.models import lean_attention
        fn, _handle = lean_attention(attn_modules.sparse_scaled_dot_product_attention, config,
                                     LEAN_BUDGETS[path], sink=events.append)
        attn_modules.sparse_scaled_dot_product_attention = fn
    if path in LEAN_BUDGETS and path not in ATTENTION_ONLY:
        from stageload.pixal3d.lean.feedforward import lean_feedforward
        lean_feedforward(LEAN_BUDGETS[path], sink=events.append)
    if path == LEAN_FLASH:
        from stageload.pixal3d.lean.feedforward import lean_feedforward
        from stageload.pixal3d.lean.models import DEFAULT_BUDGET
        lean_feedforward(DEFAULT_BUDGET, sink=events.append)


def step_case(model: str, tokens: int, blocks: int, path: str) -> dict:
    """One forward of ``model`` at ``tokens`` tokens with ``blocks`` blocks on ``path``."""
    import torch
    _port_path()
    import flow_configs
    import pixal3d.models as models
    from pixal3d.modules.sparse import SparseTensor

    from stageload.meter import footprint, high_water_mark, reset_high_water_mark
    cls, args = flow_configs.REAL[model]
    args = dict(args, num_blocks=blocks)
    torch.manual_seed(0)
    net = getattr(models, cls)(**args).eval()
    # the out layer the real initialisation zeroes, made non-zero (the stand-in's written
    # weights do the same) so that the checksums compare the paths' outputs
    flow_configs.standin_weights(net, torch.Generator().manual_seed(1))
    events: list = []
    _install(path, events)
    gen = torch.Generator().manual_seed(0)
    coords = _coords(tokens, MODELS[model], gen)
    concat = model.startswith("tex_")
    x_channels = args["in_channels"] // 2 if concat else args["in_channels"]
    x = SparseTensor(torch.randn(tokens, x_channels, generator=gen), coords)
    cond = {"global": torch.randn(1, GLOBAL_TOKENS, COND_CHANNELS, generator=gen),
            "proj": SparseTensor(torch.randn(tokens, PROJ_CHANNELS, generator=gen), coords)}
    extra = ({"concat_cond": SparseTensor(torch.randn(tokens, x_channels, generator=gen),
                                          coords)} if concat else {})
    with torch.no_grad():
        reset_high_water_mark(os.getpid())
        base = footprint(os.getpid(), tree=False)
        start = time.perf_counter(), time.process_time()
        out = net(x, torch.tensor([500.0]), cond, **extra)
        peak = high_water_mark(os.getpid())
    return {"base": base, "peak": peak, "over_inputs": peak - base,
            "seconds": round(time.perf_counter() - start[0], 2),
            "cpu_seconds": round(time.process_time() - start[1], 2),
            "weight_bytes": sum(t.numel() * t.element_size() for t in net.state_dict().values()),
            "checksum": float(out.feats.double().sum()),
            "sha256": hashlib.sha256(out.feats.contiguous().numpy().tobytes()).hexdigest(),
            "finite": bool(
                torch.isfinite(out.feats).all()),
            "events": [e for e in events if e.get("event") in ("working_memory", "warning")][:6]}


def _measure(model: str, tokens: int, blocks: int, path: str, scratch: Path) -> dict:
    tag = f"{model}-{tokens}-{blocks}-{path}"
    peak_file, result = scratch / f"{tag}.peak.json", scratch / f"{tag}.json"
    cmd = [sys.executable, "-m", "bench.own_peak", str(peak_file), "-m", "bench.pixal3d.flow_steps",
           "--case", model, "--tokens", str(tokens), "--blocks", str(blocks), "--path", path,
           "--result", str(result)]
    print("[flow_steps]", tag, flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    figures = json.loads(result.read_text())
    figures["peak_at_exit"] = json.loads(peak_file.read_text())["peak_bytes"]
    return {"model": model, "tokens": tokens, "blocks": blocks, "path": path, **figures}


def markdown(report: dict) -> str:
    rows = [f"| {c['model']} | {c['tokens']:,} | {c['path']} | "
            f"{c['over_inputs'] / GIB:.2f} GiB | {c['cpu_seconds']} | {c['finite']} | "
            f"{c.get('sha256', '')[:12]} |"
            for c in report["cases"]]
    return "\n".join([
        "# One flow step at real tokens and widths (CPU; blocks bf16)", "",
        f"Measured {report['when']} ({report['machine']}); {report['blocks']} of 30 blocks "
        "(a step's working memory does not grow with depth: each block's temporaries are freed "
        "before the next); peak over the case's inputs, each case its own process.", "",
        "| model | tokens | path | step over inputs | CPU s | finite | output sha256 |",
        "|---|---|---|---|---|---|---|", *rows, ""])


def main(argv=None) -> int:
    import datetime
    import platform
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case")
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--path", default="naive", choices=PATHS)
    parser.add_argument("--result", type=Path)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--tokens-1024", type=int, default=21_500)
    parser.add_argument("--tokens-512", type=int, default=4_000)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--paths", nargs="*", default=["naive", "lean", "lean_256m", "flash_attn"])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results" / "2026-12-06")
    parser.add_argument("--out-name", default="flow_steps",
                        help="file name of the results (.json and .md) in --out-dir")
    ns = parser.parse_args(argv)
    if ns.case:
        ns.result.write_text(json.dumps(step_case(ns.case, ns.tokens, ns.blocks, ns.path)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = [_measure(m, ns.tokens_512 if MODELS[m] == 32 else ns.tokens_1024, ns.blocks, p,
                          Path(tmp)) for m in ns.models for p in ns.paths]
    report = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
              "blocks": ns.blocks, "attention_budget": ATTENTION_BUDGET, "cases": cases}
    ns.out_dir.mkdir(parents=True, exist_ok=True)
    (ns.out_dir / f"{ns.out_name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (ns.out_dir / f"{ns.out_name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
