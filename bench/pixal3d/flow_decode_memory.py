"""Flow attention: the port's working memory against the lean one, measured
from outside at the real shapes (``python -m bench.pixal3d.flow_decode_memory``).

Cases, each in a fresh process (``bench.own_peak``: the kernel's ``VmHWM`` of that process):

- ``attention_port`` / ``attention_lean`` — the stand-in's mirror of the port's sparse
  attention (``pixal3d.modules.sparse.attention.full_attn``, ``naive``: 2,048 queries at a
  time, fp32, q/k/v padded copies) against ``stageload.pixal3d.lean.models.lean_attention``
  (query slices sized from a 1 GiB budget), at N = 21,500 tokens, 12 heads × 128 channels,
  fp32, in the ``(q, k, v)`` form. Only the first ``--queries`` queries (2,048: one port
  chunk) are computed, against all 21,500 keys: a step's transient is one chunk's, so it is the
  full call's; the time is per query, so the ratio holds for the full call (on this 2-core CPU
  a full call takes minutes).
The decoder-rows cases this bench had (``LayerNorm32`` + ConvNeXt MLP at C = 64 over 6.3 M
rows) are withdrawn: the real decoder has no ConvNeXt block at its finest level. The decode
stage is measured on the real layout by ``bench.pixal3d.decode_memory``.

Each case reports ``transient_bytes``: the process's kernel high-water mark (``VmHWM``) read
right after the measured call, minus its footprint once its inputs exist (the high-water mark
is reset there), i.e. the working memory over the inputs, the output included; and ``seconds``
and ``cpu_seconds`` of the measured call (the ratios compare CPU seconds). ``bench.own_peak``'s
figure at the process's exit is kept as ``peak_at_exit_bytes`` (the checksum after the call is
taken in row blocks so as not to raise it). Results go to
``bench/results/<date>/flow_decode_memory.json`` and ``.md``. Run it under the guard::

    nice -n 10 python -m stageload guard --wait-free 8G -- \\
        python -m bench.pixal3d.flow_decode_memory
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENS = 21_500
HEADS = 12
HEAD_CHANNELS = 128
GIB = 1 << 30
ATTENTION_BUDGET = GIB
ROOT = Path(__file__).resolve().parents[2]


def _port_path() -> None:
    from standin import PORT_DIR
    if str(PORT_DIR) not in sys.path:
        sys.path.insert(0, str(PORT_DIR))


def _baseline() -> int:
    from stageload.meter import footprint, reset_high_water_mark
    reset_high_water_mark(os.getpid())
    return footprint(os.getpid(), tree=False)


def _start() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _after(base: int, start: tuple[float, float]) -> dict:
    """Wall and CPU seconds since ``start`` and the kernel's high-water mark now (``VmHWM``,
    bytes), read right after the measured call so that what the case does afterwards cannot
    raise it. CPU seconds are the ones compared: on a machine shared by other jobs, wall time
    depends on the share of the cores each case got."""
    from stageload.meter import high_water_mark
    return {"base": base, "seconds": time.perf_counter() - start[0],
            "cpu_seconds": time.process_time() - start[1],
            "peak_after_call": high_water_mark(os.getpid())}


def _checksum(t) -> float:
    """Sum in float64, 65,536 rows at a time (a whole float64 copy would be the case's peak)."""
    flat = t.reshape(t.shape[0], -1)
    return float(sum(float(flat[i:i + 65536].double().sum()) for i in range(0, len(flat), 65536)))


def _attention_case(lean: bool, queries: int) -> dict:
    import torch
    _port_path()
    import pixal3d.modules.sparse.attention.full_attn as full_attn
    from pixal3d.modules.sparse import SparseTensor, config

    from stageload.pixal3d.lean.models import lean_attention
    config.set_attn_backend("naive")
    gen = torch.Generator().manual_seed(0)
    coords = torch.zeros(TOKENS, 4, dtype=torch.int32)
    k = SparseTensor(torch.randn(TOKENS, HEADS, HEAD_CHANNELS, generator=gen), coords)
    v = SparseTensor(torch.randn(TOKENS, HEADS, HEAD_CHANNELS, generator=gen), coords)
    q = SparseTensor(torch.randn(queries, HEADS, HEAD_CHANNELS, generator=gen), coords[:queries])
    events: list[dict] = []
    fn = full_attn.sparse_scaled_dot_product_attention
    if lean:
        fn, _handle = lean_attention(fn, config, ATTENTION_BUDGET, sink=events.append)
    with torch.no_grad():
        base = _baseline()
        start = _start()
        out = fn(q, k, v)
        figures = _after(base, start)
    return {**figures, "checksum": _checksum(out.feats), "events": events}


def run_case(name: str, size: int, result: Path) -> None:
    """Run one case in this process and write its figures to ``result``."""
    lean = name.endswith("_lean")
    out = _attention_case(lean, size)
    result.write_text(json.dumps(out))


def _measure(name: str, size: int, scratch: Path) -> dict:
    peak_file, result = scratch / f"{name}-{size}.peak.json", scratch / f"{name}-{size}.json"
    cmd = [sys.executable, "-m", "bench.own_peak", str(peak_file), "-m",
           "bench.pixal3d.flow_decode_memory", "--case", name, "--size", str(size),
           "--result", str(result)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    peak = json.loads(peak_file.read_text())["peak_bytes"]
    figures = json.loads(result.read_text())
    return {"case": name, "size": size, "peak_at_exit_bytes": peak,
            "peak_after_call_bytes": figures["peak_after_call"],
            "transient_bytes": figures["peak_after_call"] - figures["base"],
            "seconds": round(figures["seconds"], 2),
            "cpu_seconds": round(figures["cpu_seconds"], 2),
            "checksum": figures["checksum"], "events": figures["events"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case")
    parser.add_argument("--size", type=int)
    parser.add_argument("--result", type=Path)
    parser.add_argument("--queries", type=int, default=2048)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results" / "2026-12-04")
    ns = parser.parse_args(argv)
    if ns.case:
        run_case(ns.case, ns.size, ns.result)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        cases = [_measure(name, size, scratch) for name, size in (
            ("attention_port", ns.queries), ("attention_lean", ns.queries))]
    report = _report(cases, ns)
    ns.out_dir.mkdir(parents=True, exist_ok=True)
    (ns.out_dir / "flow_decode_memory.json").write_text(json.dumps(report, indent=1) + "\n")
    (ns.out_dir / "flow_decode_memory.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


def _report(cases: list[dict], ns) -> dict:
    by = {(c["case"], c["size"]): c for c in cases}
    att_port, att_lean = by[("attention_port", ns.queries)], by[("attention_lean", ns.queries)]
    output = ns.queries * HEADS * HEAD_CHANNELS * 4  # the call's result, fp32, in both paths
    return {
        "machine": f"{os.cpu_count()} CPUs, Linux, torch CPU fp32",
        "shapes": {"tokens": TOKENS, "heads": HEADS, "head_channels": HEAD_CHANNELS,
                   "queries_computed": ns.queries, "attention_budget": ATTENTION_BUDGET},
        "cases": cases,
        "attention": {
            "port_transient": att_port["transient_bytes"],
            "lean_transient": att_lean["transient_bytes"],
            "output_bytes": output,
            "port_step_transient": att_port["transient_bytes"] - output,
            "lean_step_transient": att_lean["transient_bytes"] - output,
            "lean_target": GIB, "lean_meets_target": att_lean["transient_bytes"] - output <= GIB,
            "time_ratio": round(att_lean["cpu_seconds"] / att_port["cpu_seconds"], 3),
            "wall_time_ratio": round(att_lean["seconds"] / att_port["seconds"], 3),
            "same_result": att_lean["checksum"] == att_port["checksum"]},
    }


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _markdown(r: dict) -> str:
    a, s = r["attention"], r["shapes"]
    return "\n".join([
        "# Flow attention: port vs lean (CPU, fp32, peak from outside)", "",
        f"Attention: N = {s['tokens']:,} tokens, {s['heads']} heads × {s['head_channels']}, "
        f"first {s['queries_computed']:,} queries against all keys; lean budget "
        f"{_gib(s['attention_budget'])}.", "",
        "| what | port | lean | lean ÷ port | CPU time lean ÷ port | same result |",
        "|---|---|---|---|---|---|",
        f"| flow attention over its inputs | {_gib(a['port_transient'])} | "
        f"{_gib(a['lean_transient'])} | {a['lean_transient'] / a['port_transient']:.3f} | "
        f"{a['time_ratio']} | {a['same_result']} |",
        f"| flow attention per step (less the {a['output_bytes'] / 2 ** 20:.1f} MiB result "
        f"both hold) | {_gib(a['port_step_transient'])} | {_gib(a['lean_step_transient'])} | "
        f"{a['lean_step_transient'] / a['port_step_transient']:.3f} | – | – |",
        ""])


if __name__ == "__main__":
    raise SystemExit(main())
