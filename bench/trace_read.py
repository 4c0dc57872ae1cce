"""Benchmark: time and peak memory of reading a large trace (a trace is input of any size).

Writes a synthetic runner-like trace of each size (samples at 10 Hz with ``hwm``/``hwm_since``,
a stage and ready event every 50 000 lines) to a temporary folder, then runs
``python -m stageload summary --json`` and ``python -m stageload guard --need-from`` (which
reads the same file) on it, each in its own process, and records the wall time and the peak
resident set size of that process (its own ``VmHWM`` through ``bench.own_peak``, which says
why not ``ru_maxrss``). The
ratio that matters is peak RSS against file size: a reader that holds the events grows with
the file, a streaming one stays flat.

    python -m bench.trace_read [--sizes-mb 100 1000] [--out bench/results/trace_read_bench.json]

Takes about a minute per GB of trace on a 2-core machine; needs twice the largest size free in
the temporary folder (the file; the guard run writes nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_trace(path: Path, size_bytes: int) -> int:
    """Write about ``size_bytes`` of trace lines to ``path``; return the number of lines."""
    t, lines, written = 1.7e9, 0, 0
    stages = ["setup", "structure", "texture", "export"]
    with path.open("w") as f:
        while written < size_bytes:
            if lines % 50_000 == 0:
                name = stages[(lines // 50_000) % len(stages)]
                text = (json.dumps({"event": "stage", "t": t, "stage": name}) + "\n"
                        + json.dumps({"event": "ready", "t": t + 0.01, "stage": name,
                                      "seconds": 0.01, "released_bytes": 0}) + "\n")
                t += 0.02
            else:
                text = json.dumps({"event": "sample", "t": t, "pid": 4242,
                                   "footprint": 10**9 + lines, "hwm": 10**9 + lines + 7,
                                   "hwm_since": t - 0.1, "available": 9 * 10**9,
                                   "total": 25 * 10**9, "swap": 0, "pressure": None}) + "\n"
                t += 0.1
            f.write(text)
            written += len(text)
            lines += 1
    return lines


def measure(argv: list[str]) -> dict:
    """Run ``python -m ...`` ``argv`` (stdout discarded) under ``bench.own_peak``; wall seconds,
    the process's own peak RSS in bytes and exit status."""
    assert argv[:2] == [sys.executable, "-m"], argv
    with tempfile.TemporaryDirectory(prefix="trace_read_peak_") as tmp:
        report = Path(tmp) / "peak.json"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "bench.own_peak", str(report), *argv[1:]],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seconds = time.perf_counter() - start
        peak = json.loads(report.read_text())["peak_bytes"]
    err = proc.stderr.decode(errors="replace")[-500:]
    return {"seconds": round(seconds, 2), "max_rss_bytes": peak,
            "exit": proc.returncode, "stderr_tail": err}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_read",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/trace_read_bench.json")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in args.sizes_mb:
            trace = Path(tmp) / f"trace_{mb:g}MB.jsonl"
            lines = write_trace(trace, int(mb * 1e6))
            size = trace.stat().st_size
            row = {"file_bytes": size, "lines": lines,
                   "summary": measure([sys.executable, "-m", "stageload", "summary", "--json",
                                       str(trace)]),
                   "need_from": measure([sys.executable, "-m", "stageload", "guard",
                                         "--need-from", str(trace), "--kill-free", "off",
                                         "--start-timeout", "0", "--", "true"])}
            for key in ("summary", "need_from"):
                row[key]["rss_over_file"] = round(row[key]["max_rss_bytes"] / size, 4)
            runs.append(row)
            trace.unlink()
            print(json.dumps(row), flush=True)
    result = {"measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "machine": f"{platform.platform()} ({os.cpu_count()} CPUs)",
              "python": platform.python_version(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
