"""A child process for the meter tests: runs stages that allocate real memory and writes its
own ``stage`` / ``ready`` / ``progress`` events into a trace (``TraceWriter(append=True)``),
while the test samples it from outside.

usage: python stage_child.py TRACE MODE [INTERVAL]
  stages  idle 0.8 s; "alloc300" holds 300 MB; "free" frees it (before ready); "alloc100" holds
          100 MB; 0.8 s each.
  spike   idle 1.5 INTERVAL; "spike": 200 MB allocated and freed at once, 1.2 INTERVAL after its
          ready; prints {"spike_seconds": s} 2.2 INTERVAL later. INTERVAL: the test's sample
          interval in seconds (default 1.0).
  flood   "flood": writes progress events as fast as it can, growing memory, until killed.
  tree    starts a grandchild (tree mode "hold") that holds 100 MB; prints its pid; sleeps.
  hold    holds 100 MB and sleeps (the grandchild of "tree").
Memory is touched page by page (numpy.ones writes every byte), so it is resident.
"""
import json
import subprocess
import sys
import time

import numpy as np

from stageload.trace import TraceWriter

MB = 10**6


def touch(nbytes: int) -> np.ndarray:
    return np.ones(nbytes, dtype=np.uint8)


def main(trace: str, mode: str, interval: float = 1.0) -> None:
    sink = TraceWriter(trace, append=True)
    count = 3 if mode == "stages" else 1

    def stage(name: str, index: int) -> None:
        sink({"event": "stage", "t": time.time(), "stage": name, "index": index, "count": count})

    def ready(name: str, seconds: float = 0.0, released: int = 0) -> None:
        sink({"event": "ready", "t": time.time(), "stage": name, "seconds": seconds,
              "released_bytes": released})

    touch(1)  # numpy's own first-use allocations happen before the baseline
    if mode == "stages":
        time.sleep(0.8)
        stage("alloc300", 0)
        ready("alloc300")
        block = touch(300 * MB)
        time.sleep(0.8)
        t = time.time()
        stage("free", 1)
        del block
        ready("free", time.time() - t, 300 * MB)
        time.sleep(0.8)
        stage("alloc100", 2)
        ready("alloc100")
        block = touch(100 * MB)
        time.sleep(0.8)
    elif mode == "spike":
        del_me = touch(200 * MB)  # the first large allocation of a process is slow; warm up
        del del_me
        time.sleep(1.5 * interval)
        stage("spike", 0)
        ready("spike")
        time.sleep(1.2 * interval)  # more than one interval after ready: the mark's span is inside
        t = time.perf_counter()
        block = touch(200 * MB)
        del block
        spike = time.perf_counter() - t
        time.sleep(2.2 * interval)
        print(json.dumps({"spike_seconds": spike}), flush=True)
    elif mode == "flood":
        stage("flood", 0)
        ready("flood")
        keep = []
        i = 0
        while True:
            i += 1
            sink({"event": "progress", "t": time.time(), "stage": "flood",
                  "fraction": (i % 1000) / 1000, "note": "x" * (i % 700)})
            if i % 2000 == 0 and len(keep) < 40:
                keep.append(touch(5 * MB))
    elif mode == "tree":
        child = subprocess.Popen([sys.executable, __file__, trace, "hold"], stdout=subprocess.PIPE)
        print(child.stdout.readline().decode().strip(), flush=True)
        time.sleep(30)
    elif mode == "hold":
        block = touch(100 * MB)
        print(json.dumps({"pid": __import__("os").getpid()}), flush=True)
        time.sleep(30)
        del block
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(float(a) for a in sys.argv[3:4]))
