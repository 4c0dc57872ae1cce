"""``python -m standin.asset PICTURE -o ASSET.npz [--resolution 1024]``: write a test asset in
the port's mesh-checkpoint format (see ``standin/asset/__init__.py``); prints one JSON line of
facts (counts, seconds per step, the process's peak RSS in bytes) on stdout, progress on
stderr."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from stageload.meter import high_water_mark

from . import ASSET_FILL, DEFAULT_DEPTH_SCALE, build_asset, write_asset
from .body import RELIEF


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m standin.asset", description=__doc__.split(":")[0])
    p.add_argument("picture", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="the .npz to write")
    p.add_argument("--resolution", type=int, default=1024, help="voxels per axis (1024)")
    p.add_argument("--fill", type=float, default=ASSET_FILL)
    p.add_argument("--depth-scale", type=float, default=DEFAULT_DEPTH_SCALE)
    p.add_argument("--relief", type=float, default=RELIEF)
    p.add_argument("--coords-layout", choices=("xyz", "bxyz"), default="xyz",
                   help="coords [N, 3] as the port writes them (xyz) or [N, 4] with batch 0")
    p.add_argument("--sorted", action="store_true", help="voxels sorted (default: shuffled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true")
    a = p.parse_args(argv)
    if a.output.suffix != ".npz":
        p.error(f"the output must end in .npz (numpy adds it otherwise): {a.output}")
    if a.output.exists() and not a.overwrite:
        p.error(f"{a.output} exists; pass --overwrite to replace it")
    last = {}

    def progress(step: str, fraction: float) -> None:
        if fraction - last.get(step, -1) >= 0.1 or fraction >= 1:
            last[step] = fraction
            print(f"{step}: {fraction:.0%}", file=sys.stderr, flush=True)

    try:
        asset = build_asset(a.picture, a.resolution, fill=a.fill, depth_scale=a.depth_scale,
                            relief=a.relief, coords_layout=a.coords_layout, shuffle=not a.sorted,
                            seed=a.seed, on_progress=progress)
    except ValueError as exc:
        p.error(str(exc))
    except Exception as exc:  # the runner's own input errors carry a message for people
        if type(exc).__name__ in ("RunnerError", "EmptyMatteError", "BackgroundNotPlainError"):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    size = write_asset(a.output, asset)
    facts = {**asset.facts, "output": str(a.output), "bytes": size,
             "peak_rss": high_water_mark(os.getpid())}  # VmHWM: bench/own_peak.py says why
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
