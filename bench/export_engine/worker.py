"""``python -m bench.export_engine.worker ASSET OUT.glb --target N --texture PX [--budget
SIZE]``: the export engine (``bounded_export.export_asset``) in a process of its own,
for ``run.py``'s ``via="worker"`` — the same engine, its sub-step events as it emits them,
framed by the ``stage``/``ready`` events of an ``export`` stage as the runner frames them;
without the runner's supervisor (used when ``python -m runner export`` is not available).
Prints a ``bench_hello`` event with its pid first, then one event a line on stdout."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    from bounded_export.engine import ExportLevers, export_asset
    from meshfacts.units import parse_size

    p = argparse.ArgumentParser(prog="python -m bench.export_engine.worker")
    p.add_argument("asset")
    p.add_argument("output")
    p.add_argument("--target", type=int, required=True)
    p.add_argument("--texture", type=int, required=True)
    p.add_argument("--budget", default=None)
    a = p.parse_args(argv)
    _emit({"event": "bench_hello", "t": time.time(), "pid": os.getpid()})
    _emit({"event": "stage", "t": time.time(), "stage": "export", "index": 0, "count": 1,
           "pid": os.getpid()})
    _emit({"event": "ready", "t": time.time(), "stage": "export", "seconds": 0.0,
           "released_bytes": 0})
    levers = ExportLevers(decimation_target=a.target, texture_size=a.texture,
                          budget=parse_size(a.budget) if a.budget else None)
    result = export_asset(a.asset, a.output, levers, emit=_emit, overwrite=True)
    _emit({"event": "bench_result", "t": time.time(), **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
