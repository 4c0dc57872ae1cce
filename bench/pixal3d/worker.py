"""One benchmark process: ``alone`` (working memory only), ``compute`` (the stand-in's own
computations, every model loaded up front), ``eager``, ``staged`` or ``budget``.

Started as ``python -m bench.pixal3d.worker`` by ``python -m bench.pixal3d`` under
``python -m stageload guard``; never run by hand
except for debugging. Writes one JSON object per line on stdout (flushed per line): first
``{"event": "bench_hello", "pid": ..., "mode": ...}`` so the parent can start sampling this
process from outside, then every stageload event (``stage``, ``ready``, ``load``, ``reload``,
``release``) and the benchmark's own ``bench_*`` events. Human messages go to stderr.

Exit codes: 0 done, 2 bad arguments (argparse), 1 anything else (message on stderr).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _emit(event: dict) -> None:
    """Write one event as a JSON line on stdout and flush it (the parent reads it at once)."""
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _hello(mode: str) -> None:
    """First line: this process's pid, so the parent can sample it from outside."""
    _emit({"event": "bench_hello", "t": time.time(), "pid": os.getpid(), "mode": mode})


def run_alone(args, working) -> None:
    """Every stage's working memory alone: ``stage``, a ``--hold`` wait (the baseline window),
    ``ready``, allocate, hold, free — no weights, no pipeline."""
    from stageload.events import make_event

    stages = list(working.sizes)
    for index, stage in enumerate(stages):
        _emit(make_event("stage", stage=stage, index=index, count=len(stages)))
        t0 = time.perf_counter()
        time.sleep(args.hold)  # baseline window: nothing of this stage allocated yet
        _emit(make_event("ready", stage=stage, seconds=time.perf_counter() - t0, released_bytes=0))
        working.allocate(stage)
        working.finish()
    _emit(make_event("bench_done", mode="alone"))


def main(argv=None) -> int:
    """Parse the options, announce this pid, run the mode; returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m bench.pixal3d.worker",
                                description=__doc__.splitlines()[0])
    p.add_argument("--mode", required=True, choices=["alone", "compute", "eager", "staged",
                                                             "budget"])
    p.add_argument("--weights", help="folder the stand-in's weights were written to")
    p.add_argument("--scale", type=float, required=True, help="size factor, e.g. 0.125")
    p.add_argument("--hold", type=float, default=1.0, help="seconds each stage holds its peak")
    p.add_argument("--budget", type=int, default=0,
                   help="keep-resident budget, bytes (budget mode)")
    p.add_argument("--image", help="input image for the pipeline modes")
    p.add_argument("--steps", type=int, default=None,
                   help="sampler steps (default: the port's own, from pipeline.json)")
    p.add_argument("--prefetch", choices=["on", "off"], default="on",
                   help="staged modes: read the next stage's files ahead (stageload.prefetch)")
    p.add_argument("--load-pause", type=float, default=0.0,
                   help="seconds to wait after each load the load check judges (>= 32 MiB), "
                        "so the outside sampler reads what the load left before the stage "
                        "computes (default 0)")
    p.add_argument("--working-scale", type=float, default=None,
                   help="size factor of the working memory (default: --scale)")
    args = p.parse_args(argv)
    _hello(args.mode)

    from . import pipeline, sizes
    from .modes import EXPORT_ENGINE
    from .working import WorkingMemory

    scale = args.working_scale if args.working_scale is not None else args.scale
    working = WorkingMemory(sizes.scaled_working_bytes(scale, EXPORT_ENGINE[args.mode]),
                            args.hold)
    if args.mode == "alone":
        runtime = pipeline.open_port_only(args)  # same imports and setup as staged
        from stageload.events import make_event
        _emit(make_event("bench_runtime", **runtime))
        run_alone(args, working)
        return 0

    pipeline.run(args, working, _emit)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
