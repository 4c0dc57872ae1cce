"""Load throughput of the aligned read against a cold read of the same file.

``python -m bench.pixal3d.loadspeed [--rounds 3] [--out FILE]`` writes a 1 GiB model (16 ×
``nn.Linear(4096, 4096)``, fp32, seed 0) as safetensors under ``--work`` (reused), then, for
each round, in this order, each after evicting the file from the page cache
(``bench.pixal3d.disk.evict``: ``fsync`` + ``POSIX_FADV_DONTNEED``, verified with ``fincore``):

- ``cold_read``: the file read once sequentially (16 MiB ``read()`` calls into one buffer);
- ``aligned``: ``stageload.loading.read_state(path, fresh_cpu_memory=True)`` — the direct
  loader's path (``stageload.aligned_read``) — then every weight touched (summed);
- ``aligned_keep_cache``: the same with ``drop_behind=False`` (the page cache kept);
- ``mapped``: ``stageload.load_module`` on the mapped file (``safetensors.load_file``), then
  every weight touched (the disk read happens at the touch).

Then what a prefetch can and cannot remove from a load, each in the same round:

- ``prefetch_advise`` / ``prefetch_read``: the file evicted, then read ahead by
  ``stageload.prefetch.Prefetcher`` with that method; ``resident`` is the fraction of the file
  in the page cache (``fincore``) once the reader is done and again ``settle`` seconds later
  (``advise`` only asks the kernel, whose reads may finish later: or never);
- ``aligned_cached``: the aligned read with the whole file in the page cache (read ahead just
  before): the load as a complete prefetch leaves it; ``over_aligned`` is its seconds ÷ the
  cold ``aligned`` seconds, the best on ÷ off a prefetch can give for this model;
- ``fault_only``: ``torch.empty`` of the file's bytes, every page written once (``fill_``):
  the cost of faulting in fresh anonymous memory, which every aligned load pays and no
  prefetch removes; ``share_of_cached`` is its seconds ÷ ``aligned_cached``'s;
- ``cached_prefaulted``: the cached file read again into that already-faulted memory (the
  copy alone).

Per variant: ``seconds`` (load alone; for ``mapped`` the touch is where the read happens, so
``seconds_with_touch`` is its figure), ``throughput`` (bytes / seconds), ``peak_ratio`` (the
kernel high-water mark's rise over the file's bytes: ``VmHWM`` reset before the load), and
``over_cold`` (throughput ÷ the same round's cold read). Ratios are taken within one round, on
a machine shared with other jobs (the load average is recorded). Writes JSON to ``--out``
(default ``bench/results/<UTC date>/loadspeed.json``).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path

import torch
from torch import nn

from .disk import cold_read, evict, resident_bytes

REPO = Path(__file__).resolve().parents[2]


def _model() -> nn.Module:
    return nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(16)])


def write_model(work: Path) -> Path:
    """The 1 GiB checkpoint (written once, reused)."""
    from safetensors.torch import save_file
    path = work / "linear16x4096.safetensors"
    if not path.is_file():
        work.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        with torch.no_grad():
            save_file(_model().state_dict(), str(path))
    return path


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM")


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _touch(tensors) -> float:
    """Read every weight (a sum per tensor: no copy, so the peak stays the weights')."""
    return float(sum(float(t.sum()) for t in tensors))


def _measure(path: Path, variant: str) -> dict:
    from stageload.loading import load_module, read_state
    size = path.stat().st_size
    eviction = evict([path])
    _reset_hwm()
    before = _hwm()
    t0 = time.perf_counter()
    if variant == "mapped":
        module = load_module(_model, path)
        tensors = list(module.state_dict().values())
    else:
        state = read_state(path, fresh_cpu_memory=True, drop_behind=variant == "aligned")
        tensors = list(state.values())
    loaded = time.perf_counter() - t0
    _touch(tensors)
    touched = time.perf_counter() - t0
    peak = _hwm() - before
    del tensors
    return {"seconds": loaded, "seconds_with_touch": touched, "bytes": size,
            "throughput": size / (touched if variant == "mapped" else loaded),
            "peak_ratio": peak / size, "evicted": eviction.verified}


def _prefetch(path: Path, method: str, settle: float) -> dict:
    from stageload.prefetch import Prefetcher
    size = path.stat().st_size
    eviction = evict([path])
    pre = Prefetcher(floor=0, method=method)
    t0 = time.perf_counter()
    pre.start(None, "bench", [("model", [path])])
    pre.wait()
    seconds = time.perf_counter() - t0
    done = (resident_bytes([path]) or 0) / size
    time.sleep(settle)
    return {"seconds": seconds, "resident": done,
            "resident_after_settle": (resident_bytes([path]) or 0) / size,
            "settle": settle, "evicted": eviction.verified}


def _decompose(path: Path, aligned_seconds: float, settle: float) -> dict:
    """The prefetch rows of one round (module docstring)."""
    from stageload.loading import read_state
    size = path.stat().st_size
    rows = {f"prefetch_{m}": _prefetch(path, m, settle) for m in ("advise", "read")}
    _prefetch(path, "read", 0)  # the whole file in the cache again
    t0 = time.perf_counter()
    state = read_state(path, fresh_cpu_memory=True)
    cached = time.perf_counter() - t0
    del state
    rows["aligned_cached"] = {"seconds": cached, "throughput": size / cached,
                              "over_aligned": cached / aligned_seconds}
    t0 = time.perf_counter()
    fresh = torch.empty(size, dtype=torch.uint8)
    fresh.fill_(0)
    fault = time.perf_counter() - t0
    _prefetch(path, "read", 0)
    view, t0 = memoryview(fresh.numpy()), time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        done = 0
        while done < size:
            done += f.readinto(view[done:done + (64 << 20)])
    copy = time.perf_counter() - t0
    del view, fresh
    rows["fault_only"] = {"seconds": fault, "share_of_cached": fault / cached}
    rows["cached_prefaulted"] = {"seconds": copy, "share_of_cached": copy / cached}
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pixal3d.loadspeed",
                                description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path("/tmp/pixal3d_bench_loadspeed"))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds to wait after an advise-only prefetch before reading residency")
    args = p.parse_args(argv)
    path = write_model(args.work)
    rounds = []
    for index in range(args.rounds):
        row = {"round": index, "loadavg_start": os.getloadavg()[0]}
        cold = cold_read([path])
        row["cold_read"] = {k: cold[k] for k in ("bytes", "seconds", "throughput")}
        row["cold_read"]["evicted"] = cold["eviction"]["verified"]
        for variant in ("aligned", "aligned_keep_cache", "mapped"):
            row[variant] = _measure(path, variant)
            row[variant]["over_cold"] = row[variant]["throughput"] / cold["throughput"]
        row.update(_decompose(path, row["aligned"]["seconds"], args.settle))
        row["loadavg_end"] = os.getloadavg()[0]
        rounds.append(row)
        print(json.dumps({k: (v["over_cold"] if isinstance(v, dict) and "over_cold" in v else v)
                          for k, v in row.items() if k != "cold_read"}, default=str), flush=True)
    out = args.out or REPO / "bench" / "results" / dt.datetime.now(dt.timezone.utc).strftime(
        "%Y-%m-%d") / "loadspeed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {v: {"over_cold": [r[v]["over_cold"] for r in rounds],
                   "peak_ratio": [r[v]["peak_ratio"] for r in rounds]}
               for v in ("aligned", "aligned_keep_cache", "mapped")}
    summary["prefetch_resident"] = {m: [r[f"prefetch_{m}"]["resident_after_settle"]
                                        for r in rounds] for m in ("advise", "read")}
    summary["aligned_cached_over_aligned"] = [r["aligned_cached"]["over_aligned"] for r in rounds]
    summary["fault_share_of_cached"] = [r["fault_only"]["share_of_cached"] for r in rounds]
    out.write_text(json.dumps({"measured": dt.datetime.now(dt.timezone.utc).isoformat(),
                               "file": str(path), "bytes": path.stat().st_size,
                               "torch": torch.__version__, "cpus": os.cpu_count(),
                               "rounds": rounds, "summary": summary}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
