"""Run one benchmark worker under the guard, sampled from outside, into one JSONL trace.

``run_traced`` starts ``python -m stageload guard [guard options] -- python -m bench.pixal3d.worker
...`` (from the repository root) in its own process, reads the worker's events from the guard's
stdout (the guard passes its command's stdout through), and when the worker announces its pid
(``bench_hello``) starts a ``stageload.meter.Sampler`` on that pid from this process. Samples and
events go to one trace file, one JSON object a line, flushed per line (``stageload.trace``'s format,
docs/ARCHITECTURE.md "Trace").
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from stageload.meter import Sampler
from stageload.trace import TraceWriter

REPO = Path(__file__).resolve().parents[2]
WORKER = "bench.pixal3d.worker"  # run with -m from REPO


def run_traced(worker_args: list[str], trace_path: Path, *, guard_args: list[str],
               interval: float, log_path: Path, timeout: float) -> dict:
    """Run one worker under the guard; write its trace; return what happened.

    Arguments: ``worker_args`` (the worker's own options), ``trace_path`` (JSONL written here,
    replaced if present: it is the benchmark's own output), ``guard_args`` (options before
    ``--``), ``interval`` (sampling period, seconds; 0.05 = 20 Hz), ``log_path`` (stderr of the
    guard and worker), ``timeout`` (seconds before the guard is stopped with SIGTERM).

    Returns ``{"rc": int, "pid": worker pid or None, "samples": int, "events": int,
    "wall_seconds": float, "guard_events": [...], "sampler_error": str | None, "command":
    [argv], "loadavg": [1-minute load average at start, at end]}`` (the load average says how
    busy the machine's CPUs were: timings on a shared machine vary with it). rc 3 means the
    guard stopped the worker (budget), 4 admission timed out, 127 could not start.
    """
    Path(trace_path).unlink(missing_ok=True)
    trace = TraceWriter(trace_path)
    cmd = [sys.executable, "-m", "stageload", "guard", *guard_args, "--",
           sys.executable, "-m", WORKER, *worker_args]
    state = {"pid": None, "events": 0, "sampler": None, "guard": []}
    load_start = os.getloadavg()[0]
    t0 = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True,
                                bufsize=1)

        def read() -> None:
            for line in proc.stdout:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    log.write(f"[stdout, not JSON] {line}\n")
                    continue
                if not isinstance(record, dict) or "event" not in record:
                    continue
                if record["event"] == "bench_hello" and state["sampler"] is None:
                    state["pid"] = int(record["pid"])
                    state["sampler"] = Sampler(state["pid"], _with_rss_split(trace, state["pid"]),
                                               interval=interval).start()
                if record["event"] == "guard":
                    state["guard"].append(record)
                state["events"] += 1
                trace(record)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the guard stops its command's process group first
            rc = proc.wait()
        reader.join(timeout=10)
    sampler = state["sampler"]
    samples = 0
    error = None
    if sampler is not None:
        sampler.stop(final=False)
        samples = sampler.count
        error = repr(sampler.error) if sampler.error else None
    trace.close()
    guard_log = _guard_log(guard_args)
    if guard_log:
        state["guard"] += guard_log
    return {"rc": rc, "pid": state["pid"], "samples": samples, "events": state["events"],
            "wall_seconds": time.time() - t0, "guard_events": state["guard"],
            "sampler_error": error, "command": cmd,
            "loadavg": [load_start, os.getloadavg()[0]]}


def _guard_log(guard_args: list[str]) -> list[dict]:
    """The guard's decisions from its ``--log FILE`` (JSON lines), if that option was given."""
    if "--log" not in guard_args:
        return []
    path = Path(guard_args[guard_args.index("--log") + 1])
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def rss_split(pid: int) -> dict:
    """``{"rss_anon": bytes, "rss_file": bytes}`` of ``pid`` from ``/proc/PID/status``
    (``RssAnon``: private memory such as tensors; ``RssFile``: mapped file pages such as a
    memory-mapped safetensors file being read), or both None where unreadable (not Linux, the
    process gone). Read by hand: psutil exposes neither figure without walking smaps."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as fh:
            data = fh.read()
    except OSError:
        return {"rss_anon": None, "rss_file": None}
    out = {"rss_anon": None, "rss_file": None}
    for line in data.splitlines():
        if line.startswith(b"RssAnon:"):
            out["rss_anon"] = int(line.split()[1]) * 1024
        elif line.startswith(b"RssFile:"):
            out["rss_file"] = int(line.split()[1]) * 1024
    return out


def _with_rss_split(sink, pid: int):
    """A sample sink that adds ``rss_anon``/``rss_file`` (bytes) to each sample, then passes
    it on (extra fields are allowed in a trace line; the meter's own fields are untouched)."""
    def add(sample: dict) -> None:
        sink({**sample, **rss_split(pid)})
    return add
