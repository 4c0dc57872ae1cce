"""``python -m bench.pixal3d.structure_memory``: what holds the structure stage, measured part by
part on the real layout at real shapes on this machine's CPU, each part in its own process
(``bench.pixal3d.structure_case``, under ``bench.own_peak``).

Parts: the structure flow's and decoder's weights as the product's loader (``direct``) and the
port's own ``from_pretrained`` (``port``) load them (resident bytes, and the load's peak in
copies of those bytes); one forward of the flow at 4,096 tokens and real widths with ``--blocks``
blocks, under the dense attention back ends ``sdpa`` (the port's choice on a Mac) and ``naive``;
the decoder's forward from the 16³ latent to the 64³ occupancy. The structure stage's
conditioning (DINOv3 ViT-L at 512², projected onto 16³) is given from its tensors, labelled so:
its weights are SPEC §1's 1.2 GB and its outputs a few MiB.

The flow cases build the real-architecture flow models (``standin/port/flow_configs.py``, the
stand-in's DiTs with the projection conditioning). Writes ``OUT_DIR/structure_memory.json`` and
``.md``. Needs about 9 GiB at its most (the port's
loader builds the flow's 1.34 B parameters in fp32 before casting the blocks to bf16): run it
under ``flock /tmp/bigmem.lock``. About 5 minutes on two cores at 2 blocks.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]
#: SPEC §1: the port's runtime on the Mac (setup, nothing loaded) and DINOv3 ViT-L fp32 weights
MAC_RUNTIME = 2.9e9
DINOV3_BYTES = 1.2e9
#: 16³ grid; the structure conditioning's projected tokens and global tokens, 1,024 channels
TOKENS, GLOBAL_TOKENS, COND_CHANNELS = 16 ** 3, 5, 1024


def _case(case: str, work: Path, scratch: Path, extra: list[str]) -> dict:
    tag = "-".join([case, *[a.lstrip("-") for a in extra]])
    peak_file, result = scratch / f"{tag}.peak.json", scratch / f"{tag}.json"
    cmd = [sys.executable, "-m", "bench.own_peak", str(peak_file), "-m",
           "bench.pixal3d.structure_case", case, "--work", str(work), "--result", str(result),
           *extra]
    print("[structure]", " ".join(cmd[4:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    figures = json.loads(result.read_text())
    figures["peak_at_exit"] = json.loads(peak_file.read_text())["peak_bytes"]
    if "peak" in figures:
        figures["over_inputs"] = figures["peak"] - figures["base"]
        figures["stays"] = figures["after"] - figures["base"]
    return {"case": case, "args": extra, **figures}


def conditioning_from_tensors() -> dict:
    """The structure conditioning's outputs that the sampler keeps (``cond`` and ``neg_cond``:
    5 global + 4,096 projected tokens of 1,024 channels each, fp32) and DINOv3 ViT-L's largest
    activations at 512² (1,029 tokens: 16 heads' scores and the MLP's 4,096-wide rows, fp32),
    bytes — from tensors, not measured."""
    kept = 2 * (GLOBAL_TOKENS + TOKENS) * COND_CHANNELS * 4
    vit_tokens = 32 * 32 + 5
    scores = 16 * vit_tokens ** 2 * 4 * 2  # scores and their softmax
    mlp = vit_tokens * 4096 * 4 * 2
    return {"kept_features": kept, "backbone_transient": scores + mlp,
            "backbone_weights": int(DINOV3_BYTES), "source": "from tensors (not measured)"}


def measure(work: Path, blocks: int) -> list[dict]:
    """Every case in its own process (module docstring)."""
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        cases = []
        for name, case in (("sparse_structure_flow_model", "flow_write"),
                           ("sparse_structure_decoder", "decoder_write"),
                           ("shape_slat_decoder", "shape_decoder_write")):
            if not (work / f"{name}.safetensors").is_file():
                cases.append(_case(case, work, scratch, []))
        for case in ("flow_load_direct", "flow_load_port", "decoder_load_direct",
                     "decoder_load_port", "shape_decoder_load_direct",
                     "shape_decoder_load_port", "decoder_step"):
            cases.append(_case(case, work, scratch, []))
        for backend in ("sdpa", "naive"):
            for n in sorted({1, blocks}):
                cases.append(_case("flow_step", work, scratch,
                                   ["--blocks", str(n), "--backend", backend]))
    return cases


def summarise(cases: list[dict], blocks: int) -> dict:
    """The parts (bytes) and the structure stage built from them (module docstring)."""
    by = {(c["case"], tuple(c["args"])): c for c in cases}

    def get(case, *args):
        return by[(case, tuple(args))]

    flow_w = get("flow_load_direct")["weight_bytes"]
    dec_w = get("decoder_load_direct")["weight_bytes"]
    steps = {b: get("flow_step", "--blocks", str(blocks), "--backend", b)["over_inputs"]
             for b in ("sdpa", "naive")}
    one = {b: get("flow_step", "--blocks", "1", "--backend", b) for b in ("sdpa", "naive")}
    per_block = {b: (get("flow_step", "--blocks", str(blocks), "--backend", b)["cpu_seconds"]
                     - one[b]["cpu_seconds"]) / max(1, blocks - 1) for b in ("sdpa", "naive")}
    cond = conditioning_from_tensors()
    dec_step = get("decoder_step")["over_inputs"]
    flow_phase = {b: flow_w + cond["backbone_weights"] + cond["kept_features"] + steps[b]
                  for b in steps}
    decode_phase = flow_w + dec_w + cond["backbone_weights"] + dec_step
    return {
        "flow_weights": flow_w, "decoder_weights": dec_w,
        "flow_load_copies": {k: get(f"flow_load_{k}")["over_inputs"] / flow_w
                             for k in ("direct", "port")},
        "decoder_load_copies": {k: get(f"decoder_load_{k}")["over_inputs"] / dec_w
                                for k in ("direct", "port")},
        "flow_load_peak": {k: get(f"flow_load_{k}")["over_inputs"] for k in ("direct", "port")},
        "shape_decoder_weights": get("shape_decoder_load_direct")["weight_bytes"],
        "shape_decoder_load_copies": {
            k: get(f"shape_decoder_load_{k}")["over_inputs"]
            / get("shape_decoder_load_direct")["weight_bytes"] for k in ("direct", "port")},
        "flow_step_transient": steps,
        "flow_step_transient_one_block": {b: one[b]["over_inputs"] for b in one},
        "flow_cpu_seconds_per_block": per_block, "decoder_step_transient": dec_step,
        "conditioning": cond,
        "stage_over_runtime": {"flow_phase": flow_phase, "decode_phase": decode_phase},
        "mac_runtime": MAC_RUNTIME,
        "projected_mac": {k: MAC_RUNTIME + v for k, v in flow_phase.items()},
        "projected_mac_decode_phase": MAC_RUNTIME + decode_phase,
    }


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def markdown(r: dict) -> str:
    s = r["summary"]
    rows = [f"| `{c['case']}` {' '.join(c['args'])} | {_gib(c['over_inputs'])} | "
            f"{_gib(c['stays'])} | {c.get('seconds', '–')} |"
            for c in r["cases"] if "over_inputs" in c]
    cond = s["conditioning"]
    return "\n".join([
        "# The structure stage's parts (CPU, real widths and token counts)", "",
        f"Measured {r['when']} ({r['machine']}); each case its own process, peak = the kernel's "
        "high-water mark over the footprint once the case's inputs exist.", "",
        "| case | peak over inputs | stays | seconds |", "|---|---|---|---|", *rows, "",
        f"- structure flow weights (as loaded, blocks bf16): {_gib(s['flow_weights'])}; load "
        f"peak direct {s['flow_load_copies']['direct']:.2f}× / port's from_pretrained "
        f"{s['flow_load_copies']['port']:.2f}× its bytes",
        f"- structure decoder weights (fp16 torso): {_gib(s['decoder_weights'])}; load peak "
        f"direct {s['decoder_load_copies']['direct']:.2f}× / port "
        f"{s['decoder_load_copies']['port']:.2f}×",
        f"- shape decoder weights (fp16 torso, loaded in shape_512 and decode): "
        f"{_gib(s['shape_decoder_weights'])}; load peak direct "
        f"{s['shape_decoder_load_copies']['direct']:.2f}× / port "
        f"{s['shape_decoder_load_copies']['port']:.2f}×",
        f"- one flow step at 4,096 tokens over its inputs: sdpa "
        f"{_gib(s['flow_step_transient']['sdpa'])}, naive "
        f"{_gib(s['flow_step_transient']['naive'])} ({r['blocks']} blocks; 1 block: sdpa "
        f"{_gib(s['flow_step_transient_one_block']['sdpa'])}, naive "
        f"{_gib(s['flow_step_transient_one_block']['naive'])})",
        f"- decoder 16³ → 64³ over its inputs: {_gib(s['decoder_step_transient'])}",
        f"- conditioning ({cond['source']}): DINOv3 weights {_gib(cond['backbone_weights'])}, "
        f"kept features {_gib(cond['kept_features'])}, backbone transient "
        f"{_gib(cond['backbone_transient'])}",
        f"- projected on the Mac (runtime {s['mac_runtime'] / 1e9:.1f} GB + parts), flow phase: "
        f"sdpa {s['projected_mac']['sdpa'] / 1e9:.2f} GB, naive "
        f"{s['projected_mac']['naive'] / 1e9:.2f} GB; decode phase "
        f"{s['projected_mac_decode_phase'] / 1e9:.2f} GB", ""])


def main(argv=None) -> int:
    import datetime
    import os
    import platform
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/structure_memory"))
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results" / "2026-12-06")
    ns = parser.parse_args(argv)
    cases = measure(ns.work, ns.blocks)
    report = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
              "blocks": ns.blocks, "cases": cases, "summary": summarise(cases, ns.blocks)}
    ns.out_dir.mkdir(parents=True, exist_ok=True)
    (ns.out_dir / "structure_memory.json").write_text(json.dumps(report, indent=1) + "\n")
    (ns.out_dir / "structure_memory.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
