"""Prefetch on and off on the stand-in, the page cache of the weight files dropped before each
run.

``python -m bench.pixal3d.prefetching [--scale 0.25] [--rounds 1]`` writes the stand-in's
weights at ``--scale`` of the real sizes (at 0.25 the texture flow model is 0.6 GiB, the shape
models 0.1–0.4 GiB each), then runs the staged mode with ``--prefetch off`` and ``on``,
alternating, ``--rounds`` times each, each run a worker under the guard sampled from outside
(``bench.pixal3d.run.run_traced``, 20 Hz plus the kernel high-water mark), each after the weight
files were evicted from the page cache (``disk.evict``: ``fsync`` + ``POSIX_FADV_DONTNEED`` per
file, verified with ``fincore``). Writing ``/proc/sys/vm/drop_caches`` would empty the whole
machine's cache, which other jobs on this shared machine use; whether it is writable is
recorded (``drop_caches_writable``), per-file eviction is what is done.

Working memory is allocated at ``--working-scale`` (default 0.02), not ``--scale``, so weights of
hundreds of MB fit beside other jobs; each stage holds for ``--hold`` seconds (the time in which
a prefetch can read ahead: the stand-in's models do almost no compute).

Figures, per run, from the trace (events as the product writes them): ``load_seconds_after_first``
— the ``load``/``reload`` seconds of every stage after the first (``setup``), and after the first
stage that loads (``preprocess``); per-stage peaks (``analysis.stage_peaks``); the prefetch
events; the latents' and GLB's SHA-256. Summary: on ÷ off of the load seconds (target ≤ 0.3),
each stage's peak on ÷ off (target within 2 %), and whether the digests are equal. Writes
``bench/results/<UTC date>/prefetch/prefetch.json`` and the traces beside it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from bench.compress_traces import compress_folder
from stageload.trace import iter_lines

from . import analysis, disk, pipeline, sizes
from .cli import flattened_example, guard_args
from .run import run_traced

REPO = Path(__file__).resolve().parents[2]


def load_seconds(events: list[dict], skip: int) -> float:
    """Load/reload seconds of the loads in stages after the first ``skip`` stages."""
    stage_index, total = None, 0.0
    for e in events:
        if e.get("event") == "stage" and e.get("parent") is None:
            stage_index = e.get("index")
        elif (e.get("event") in ("load", "reload") and stage_index is not None
              and stage_index >= skip):
            total += float(e.get("seconds") or 0)
    return total


def run_figures(records: list[dict]) -> dict:
    """The figures of one run's trace records."""
    _, events = analysis.split(records)
    loading = [e for e in events if e.get("event") in ("load", "reload")]
    first_loading = min((e for e in events if e.get("event") == "stage" and e.get("parent") is None
                         and any(x.get("stage") == e["stage"] for x in loading)),
                        key=lambda e: e["index"], default={"index": 0})["index"]
    done = [e for e in events if e.get("event") == "bench_done"]
    return {
        "load_seconds": sum(float(e.get("seconds") or 0) for e in loading),
        "load_seconds_after_first": load_seconds(events, 1),
        "load_seconds_after_first_loading": load_seconds(events, first_loading + 1),
        "loads": [{k: e.get(k) for k in ("model", "stage", "bytes", "seconds", "prefetched")}
                  for e in loading],
        "prefetch": [{k: e.get(k) for k in ("model", "stage", "for_stage", "bytes", "seconds",
                                            "state", "reason")}
                     for e in events if e.get("event") == "prefetch"],
        "stage_peaks": {s: v["peak"] for s, v in analysis.stage_peaks(records).items()},
        "latents_sha256": done[-1].get("latents_sha256") if done else None,
        "glb_sha256": done[-1].get("glb_sha256") if done else None,
    }


def _read(trace: Path) -> list[dict]:  # every line as written, plain or compressed
    return [json.loads(line) for line in iter_lines(trace) if line.strip()]


def compare(runs: list[dict]) -> dict:
    """on ÷ off figures over the runs (each with ``prefetch`` and ``figures``)."""
    on = [r["figures"] for r in runs if r["prefetch"] == "on"]
    off = [r["figures"] for r in runs if r["prefetch"] == "off"]
    ratio = [a["load_seconds_after_first"] / b["load_seconds_after_first"]
             for a, b in zip(on, off, strict=False) if b["load_seconds_after_first"] > 0]
    peaks = {}
    for a, b in zip(on, off, strict=False):
        for stage, value in a["stage_peaks"].items():
            other = b["stage_peaks"].get(stage)
            if value and other:
                peaks.setdefault(stage, []).append(value / other)
    digests = {(r["latents_sha256"], r["glb_sha256"]) for r in on + off}
    return {"load_after_first_on_over_off": ratio,
            "load_after_first_loading_on_over_off": [
                a["load_seconds_after_first_loading"] / b["load_seconds_after_first_loading"]
                for a, b in zip(on, off, strict=False)
                if b["load_seconds_after_first_loading"] > 0],
            "stage_peak_on_over_off": peaks,
            "worst_peak_deviation": max((abs(v - 1) for vs in peaks.values() for v in vs),
                                        default=None),
            "identical_results": len(digests) == 1 and None not in next(iter(digests))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pixal3d.prefetching",
                                description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--working-scale", type=float, default=0.02)
    p.add_argument("--hold", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--work", type=Path, default=Path("/tmp/pixal3d_bench"))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--guard-arg", action="append", default=[])
    args = p.parse_args(argv)
    out = args.out or REPO / "bench" / "results" / dt.datetime.now(dt.timezone.utc).strftime(
        "%Y-%m-%d") / "prefetch"
    out.mkdir(parents=True, exist_ok=True)
    image = flattened_example(args.work)
    weights = pipeline.write_weights(args.work, args.scale)
    working = sizes.scaled_working_bytes(args.working_scale)
    need = int(sum(weights["model_bytes"].values()) + max(working.values()))
    common = ["--mode", "staged", "--scale", str(args.scale), "--working-scale",
              str(args.working_scale), "--hold", str(args.hold), "--weights",
              str(weights["root"]), "--image", str(image)]
    if args.steps is not None:
        common += ["--steps", str(args.steps)]
    runs = []
    for rnd in range(args.rounds):
        for mode in ("off", "on"):
            eviction = disk.evict(weights["files"])
            trace = out / f"prefetch_{mode}_{rnd}.jsonl"
            glog = out / f"prefetch_{mode}_{rnd}.guard.jsonl"
            glog.unlink(missing_ok=True)
            print(f"[prefetch bench] {mode} run {rnd} ...", file=sys.stderr, flush=True)
            res = run_traced([*common, "--prefetch", mode], trace,
                             guard_args=guard_args(args, need, glog), interval=args.interval,
                             log_path=out / f"prefetch_{mode}_{rnd}.log", timeout=1800)
            runs.append({"prefetch": mode, "round": rnd, "rc": res["rc"],
                         "wall_seconds": res["wall_seconds"], "loadavg": res["loadavg"],
                         "eviction": eviction.as_dict(), "figures": run_figures(_read(trace))})
            if res["rc"] != 0:
                print(f"[prefetch bench] {mode} run {rnd} exited {res['rc']}", file=sys.stderr)
                return 1
    result = {"measured": dt.datetime.now(dt.timezone.utc).isoformat(), "scale": args.scale,
              "working_scale": args.working_scale, "hold": args.hold,
              "model_bytes": weights["model_bytes"], "cpus": os.cpu_count(),
              "drop_caches_writable": disk.drop_caches_allowed(),
              "eviction": "per file: fsync + posix_fadvise(POSIX_FADV_DONTNEED), verified by "
                          "fincore",
              "runs": runs, "summary": compare(runs), "time": time.time()}
    (out / "prefetch.json").write_text(json.dumps(result, indent=1))
    compress_folder(out)  # the figures are taken: keep the traces compressed
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
