"""``python -m bench.cluster``: a 12-image batch on a Ray cluster of 1 node and of 2 nodes, and
what going through Ray costs per image.

Usage (from the repository root; needs the cluster extra)::

    .venv/bin/python -m bench.cluster                      # 12 images, 160 px, builtin
    .venv/bin/python -m bench.cluster --out /tmp/c.json --side 240

One run, in this order, each a real ``python -m runner batch`` subprocess (the product's
command line, ``--texture-size 512``), on 12 small copies of tests/data/images (scaled so the
longer side is ``--side`` px; six pictures, each also mirrored, so all 12 differ):

1. ``local``: the plain local batch (one image after another on this machine);
2. ``one_node``: ``--cluster`` on a ``ray.cluster_utils.Cluster`` whose head offers one
   ``image_to_mesh`` slot (one image at a time, like the local batch);
3. ``two_nodes``: the same after a second node with one slot joined (two at a time).

Measured: each batch's wall seconds (parent's clock, process start to exit) and the
``batch_done.seconds`` it reports; ``ratio_one_over_two`` = one_node / two_nodes wall seconds
(the speed-up a second node gives); ``ray_overhead_per_image_seconds`` = (one_node − local) / 12
(what placing, sending, relaying and writing through Ray adds per image, both running one image
at a time); the load average before each batch. Every batch must end with ``batch_done`` and 12
done, else the bench fails (exit 1) instead of writing a figure.

The two "nodes" are processes on this machine sharing its cores: the ratio says how much of a
second machine's speed-up the scheduling gives when cores are free; on a busy 2-core machine it
is bounded by the cores. Several real machines were not tried. The result is written as JSON to
``--out`` (default ``bench/results/cluster_bench.json``).
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = HERE / "results" / "cluster_bench.json"
PICTURES = ["character_1.png", "typical_humanoid_block_robot.png",
            "typical_humanoid_dragonborn.png", "typical_humanoid_dwarf.png",
            "typical_humanoid_goblin.png", "yoimiya_1.png"]
COUNT = 12
MB = 1 << 20
NODE = dict(num_cpus=1, object_store_memory=80 * MB, resources={"image_to_mesh": 1},
            memory=2048 * MB)


def machine_facts() -> dict:
    """What a cluster benchmark's figures were measured on: platform, CPUs, Python version."""
    return {"platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version()}


def make_images(folder: Path, side: int) -> Path:
    """12 different small pictures: six from tests/data/images, each also mirrored."""
    from PIL import Image, ImageOps

    folder.mkdir(parents=True)
    for name in PICTURES:
        im = Image.open(REPO / "tests" / "data" / "images" / name)
        im.thumbnail((side, side))
        im.save(folder / name)
        ImageOps.mirror(im).save(folder / f"mirrored_{name}")
    return folder


def run_batch(src: Path, out: Path, cluster: str | None) -> dict:
    """One ``python -m runner batch``; its wall seconds, ``batch_done`` and load average."""
    argv = [sys.executable, "-m", "runner", "batch", str(src), "-o", str(out),
            "--texture-size", "512"] + (["--cluster", cluster] if cluster else [])
    load = os.getloadavg()[0]
    began = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=1800,
                          stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    done = events[-1] if events and events[-1]["event"] == "batch_done" else None
    if proc.returncode != 0 or done is None or done["done"] != COUNT:
        raise SystemExit(f"bench.cluster: the batch {'on ' + cluster if cluster else 'here'} "
                         f"failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    nodes = {e["node"]["id"] for e in events if e["event"] == "placed"}
    return {"wall_seconds": round(wall, 3), "batch_seconds": done["seconds"],
            "load_average": round(load, 2), "nodes_used": len(nodes)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=int, default=160, help="longest side of the pictures")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from ray.cluster_utils import Cluster

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        tmp = Path(tmp)
        src = make_images(tmp / "in", args.side)
        local = run_batch(src, tmp / "local", None)
        cluster = Cluster(initialize_head=True,
                          head_node_args=dict(NODE, include_dashboard=False))
        try:
            one = run_batch(src, tmp / "one", cluster.address)
            cluster.add_node(**NODE)
            cluster.wait_for_nodes()
            two = run_batch(src, tmp / "two", cluster.address)
        finally:
            cluster.shutdown()
    if (one["nodes_used"], two["nodes_used"]) != (1, 2):
        raise SystemExit(f"bench.cluster: nodes used {one['nodes_used']}, {two['nodes_used']}")
    result = {
        "bench": "cluster", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_facts(),
        "images": COUNT, "side_px": args.side, "backend": "builtin", "texture_size": 512,
        "local": local, "one_node": one, "two_nodes": two,
        "ratio_one_over_two": round(one["wall_seconds"] / two["wall_seconds"], 3),
        "ray_overhead_per_image_seconds":
            round((one["wall_seconds"] - local["wall_seconds"]) / COUNT, 3),
        "note": "both nodes are processes on this machine, sharing its cores",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
