"""``python -m bench.builtin``: the built-in backend (silhouette inflation) on a 720 px image.

Usage (from the repository root)::

    .venv/bin/python -m bench.builtin                       # 3 runs, examples/goblin.png
    .venv/bin/python -m bench.builtin --runs 5 --image some.png --out /tmp/b.json

Each run is a fresh Python process (``--child``) that imports the backend, reads the image,
scales it so its longer side is ``--size`` px (720 by default; Lanczos), and calls
``generate()`` once, writing a real GLB to a temporary folder. Measured per run:

- ``generate_seconds``: wall seconds of ``generate()`` alone (time.perf_counter in the child);
- ``generate_cpu_seconds``: CPU seconds of the same call (time.process_time): on a shared, busy
  machine wall time grows with the load, CPU time much less (the load average at the start of
  each run is recorded as ``load_average``);
- ``process_seconds``: wall seconds of the whole child process, imports included (parent's clock);
- ``peak_bytes``: the child's kernel high-water mark of resident memory
  (``stageload.meter.high_water_mark``: Linux's ``VmHWM``, macOS's lifetime footprint
  maximum), imports included; not ``ru_maxrss``, which on Linux also holds the parent's peak
  (``bench/own_peak.py`` says why);
- ``sampled_peak_bytes``: the largest resident + swap size the parent saw sampling the child with
  psutil every 20 ms (a cross-check of the high-water mark, which catches what sampling misses).

The result (machine, image, every run, medians, the targets ≤ 5 s and ≤ 1 GB and whether they
were met) is written as JSON to ``--out`` (default ``bench/results/builtin_bench.json``).
Exit code 0 when every run succeeded (targets are reported, not enforced), 1 when a run failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_IMAGE = REPO / "examples" / "goblin.png"  # = tests/data/images/typical_humanoid_goblin.png
DEFAULT_OUT = HERE / "results" / "builtin_bench.json"
TARGET_SECONDS = 5.0
TARGET_BYTES = 1 << 30  # 1 GiB


def child(image_path: str, size: int, output: str) -> int:
    """Run the backend once in this (fresh) process; print one JSON line with the figures."""
    from PIL import Image

    from runner.backends.builtin import generate

    with Image.open(image_path) as im:
        had_alpha = "A" in im.getbands() or "transparency" in im.info
        image = im.convert("RGBA")
    scale = size / max(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)),
                         Image.Resampling.LANCZOS)
    start, cpu_start = time.perf_counter(), time.process_time()
    result = generate(image, output, had_alpha=had_alpha)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    from stageload.meter import high_water_mark
    peak = high_water_mark(os.getpid())
    print(json.dumps({"generate_seconds": seconds, "generate_cpu_seconds": cpu_seconds,
                      "peak_bytes": peak, "input_size": list(image.size),
                      "result": result}))
    return 0


def run_once(image: Path, size: int) -> dict:
    """One fresh child process, sampled with psutil from here. Raises RuntimeError on failure."""
    import psutil

    with tempfile.TemporaryDirectory(prefix="builtin_bench_") as tmp:
        output = os.path.join(tmp, "out.glb")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        argv = [sys.executable, "-m", "bench.builtin", "--child", str(image), str(size), output]
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO)
        sampled = 0
        watched = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                info = (watched.memory_full_info() if sys.platform != "darwin"
                        else watched.memory_info())
                sampled = max(sampled, info.rss + getattr(info, "swap", 0))
            except psutil.Error:
                pass
            time.sleep(0.02)
        out, err = proc.communicate()
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"child failed with exit code {proc.returncode}:\n{err}")
        figures = json.loads(out.strip().splitlines()[-1])
        figures["glb_bytes_on_disk"] = os.path.getsize(output)
    figures["process_seconds"] = wall
    figures["load_average"] = load
    figures["sampled_peak_bytes"] = sampled
    return figures


def machine() -> dict:
    import psutil

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "memory_available_bytes_at_start": psutil.virtual_memory().available,
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        return child(argv[1], int(argv[2]), argv[3])
    parser = argparse.ArgumentParser(prog="python -m bench.builtin",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", type=Path, default=DEFAULT_IMAGE)
    parser.add_argument("--size", type=int, default=720,
                        help="longer side of the input, px (default 720)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.image.is_file():
        print(f"error: no image at {args.image}; pass --image PATH", file=sys.stderr)
        return 2
    runs = []
    for i in range(args.runs):
        try:
            runs.append(run_once(args.image, args.size))
        except RuntimeError as exc:
            print(f"run {i + 1} failed: {exc}", file=sys.stderr)
            return 1
        r = runs[-1]
        print(f"run {i + 1}: generate {r['generate_seconds']:.2f} s "
              f"({r['generate_cpu_seconds']:.2f} CPU s, "
              f"load {r['load_average']}), process {r['process_seconds']:.2f} s, "
              f"peak {r['peak_bytes'] / 2**20:.0f} MiB (sampled "
              f"{r['sampled_peak_bytes'] / 2**20:.0f} MiB)",
              file=sys.stderr)
    seconds = statistics.median(r["generate_seconds"] for r in runs)
    peak = max(max(r["peak_bytes"], r["sampled_peak_bytes"]) for r in runs)
    summary = {
        "benchmark": "built-in backend (Silhouette inflation), one image per fresh process",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "image": {"path": str(args.image), "scaled_to": runs[0]["input_size"]},
        "median_generate_seconds": seconds,
        "median_generate_cpu_seconds": statistics.median(r["generate_cpu_seconds"] for r in runs),
        "median_process_seconds": statistics.median(r["process_seconds"] for r in runs),
        "peak_bytes": peak,
        "targets": {"seconds": TARGET_SECONDS, "bytes": TARGET_BYTES,
                    "seconds_met": seconds <= TARGET_SECONDS, "bytes_met": peak <= TARGET_BYTES},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"median generate {seconds:.2f} s (target {TARGET_SECONDS:.0f} s), peak "
          f"{peak / 2**20:.0f} MiB "
          f"(target {TARGET_BYTES / 2**20:.0f} MiB) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
