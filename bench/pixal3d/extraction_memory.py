"""The shape decoder's mesh extraction alone, the port's against lean's by voxel ranges
(``python -m bench.pixal3d.decode_memory --extraction FINE...``; run it under
``flock /tmp/bigmem.lock``).

What runs: the stand-in port's decoder module's ``flexible_dual_grid_to_mesh``
(``pixal3d.models.sc_vaes.fdg_vae``: off CUDA, the port's pure-PyTorch ``mesh_extract``) on
inputs of the decoder's forms at the real grid (1024): coords int32 ``[N, 3]`` (a view of the
sparse tensor's ``[N, 4]``), dual vertices float32 ``[N, 3]``, intersection flags bool
``[N, 3]``, split weights float32 ``[N, 1]``; ``port``: as the port runs it, ``lean``: with
``stageload.pixal3d.lean.extraction.install`` at the product's default budget (1 GiB, capped at
64 MiB: 43,648 voxels a range). The voxels are those a surface crosses — three concentric
spheres on the 1024 grid, radii in the ratio 1 : 0.7 : 0.4, sized for about ``FINE`` voxels —
with two kinds of flags: ``surface`` (set where a sphere crosses the edge at the voxel's far
corner, as a decoder trained on surfaces predicts: every quad whole, about one intersected edge
a voxel) and ``random`` (each flag set with probability ½, as the decode bench's random-weight
decoder gives: ~1.5 edges a voxel, most quads dropped). Seeded.

Each case runs in its own process (``bench.own_peak``): the inputs are built, the kernel's
high-water mark is reset, the extraction runs, and its peak over the footprint before it
(the inputs) is read: ``working_bytes`` (the output included). The output's SHA-256 must be the
same for both paths. glibc gives freed blocks back (``MALLOC`` of ``decode_memory``), one
thread.
"""
from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

from bench.pixal3d.decode_report import scale_largest

GRID = 1024
RADII = (1.0, 0.7, 0.4)
CROSSED_PER_AREA = 1.5
"""Cells a surface crosses per unit of its area (the mean of |nx| + |ny| + |nz| on a sphere)."""


def surfaces(fine: int, flags: str, seed: int = 0) -> tuple:
    """(coords int32 [N, 4] with batch 0, dual float32 [N, 3], intersected bool [N, 3], split
    float32 [N, 1]) for about ``fine`` voxels (module docstring), built one x slab at a time."""
    import torch
    scale = math.sqrt(fine / (4 * math.pi * CROSSED_PER_AREA * sum(r * r for r in RADII)))
    if scale * RADII[0] > GRID / 2 - 2:
        raise SystemExit(f"{fine:,} voxels do not fit the {GRID} grid with these spheres")
    # only the box around the largest sphere: the rest of the grid crosses nothing
    low = int(GRID / 2 - scale * RADII[0]) - 2
    span = GRID + 1 - 2 * low
    axis = torch.arange(low, low + span, dtype=torch.float64) - GRID / 2
    yz = axis[:, None] ** 2 + axis[None, :] ** 2

    def plane(x: int):
        d = torch.sqrt(axis[x] ** 2 + yz)
        out = torch.zeros_like(d, dtype=torch.bool)
        for r in RADII:
            out ^= d < r * scale
        return out

    parts, flag_parts, here, cells = [], [], plane(0), span - 1
    for x in range(cells):
        there = plane(x + 1)
        count = sum(p[a:a + cells, b:b + cells].int() for p in (here, there)
                    for a in (0, 1) for b in (0, 1))
        yzs = ((count > 0) & (count < 8)).nonzero()
        if len(yzs):
            y, z = yzs.T
            far = there[y + 1, z + 1]
            flag_parts.append(torch.stack([here[y + 1, z + 1] != far, there[y, z + 1] != far,
                                           there[y + 1, z] != far], 1))
            parts.append((torch.cat([torch.full((len(yzs), 1), x), yzs], 1) + low).int())
        here = there
    xyz = torch.cat(parts)
    gen = torch.Generator().manual_seed(seed)
    if flags == "surface":
        intersected = torch.cat(flag_parts)
    else:
        intersected = torch.rand(len(xyz), 3, generator=gen) < 0.5
    del parts, flag_parts
    coords = torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz], 1)
    dual = torch.rand(len(xyz), 3, generator=gen)
    split = torch.nn.functional.softplus(torch.randn(len(xyz), 1, generator=gen))
    return coords, dual, intersected, split


def run_case(flags: str, path: str, fine: int, result: Path) -> None:
    """One case in this process (module docstring); writes its figures to ``result``."""
    import torch
    torch.set_num_threads(1)
    from standin import PORT_DIR
    sys.path.insert(0, str(PORT_DIR))
    import pixal3d.models.sc_vaes.fdg_vae as fdg

    from stageload.meter import footprint, high_water_mark, reset_high_water_mark
    from stageload.pixal3d.lean import extraction
    from stageload.pixal3d.lean.models import DEFAULT_BUDGET
    coords, dual, intersected, split = surfaces(fine, flags)
    aabb = [[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]]
    small = surfaces(2_000, flags)  # a first small call: what loads on first use is not counted
    events: list = []
    handles = extraction.install(fdg, "flexible_dual_grid_to_mesh", DEFAULT_BUDGET,
                                 sink=events.append) if path == "lean" else []
    fdg.flexible_dual_grid_to_mesh(small[0][:, 1:], *small[1:], aabb=aabb, grid_size=GRID)
    del small
    events.clear()
    for handle in handles:  # the measured call sends the working_memory event
        handle.event = None
    gc.collect()
    reset_high_water_mark(os.getpid())
    base = footprint(os.getpid(), tree=False)
    start = time.perf_counter()
    vertices, faces = fdg.flexible_dual_grid_to_mesh(coords[:, 1:], dual, intersected, split,
                                                     aabb=aabb, grid_size=GRID, train=False)
    seconds = time.perf_counter() - start
    peak = high_water_mark(os.getpid()) - base
    for handle in handles:
        handle.remove()
    digest = hashlib.sha256(vertices.numpy().tobytes() + faces.numpy().tobytes()).hexdigest()
    result.write_text(json.dumps({
        "flags": flags, "path": path, "fine": len(coords), "working_bytes": peak,
        "intersected_edges": int(intersected.sum()), "faces": len(faces),
        "input_bytes": sum(t.numel() * t.element_size() for t in (coords, dual, intersected,
                                                                   split)),
        "output_bytes": vertices.numel() * 4 + faces.numel() * 8,
        "seconds": round(seconds, 2), "sha256": digest, "events": events}))


def measure(flags: str, path: str, fine: int, scratch: Path, root: Path, env: dict) -> dict:
    """One case in its own process under ``bench.own_peak``; its figures and the process's
    high-water mark at exit (``peak_at_exit_bytes``)."""
    import subprocess
    stem = scratch / f"extraction-{flags}-{path}-{fine}"
    peak, res = stem.with_suffix(".peak"), stem.with_suffix(".json")
    cmd = [sys.executable, "-m", "bench.own_peak", str(peak), "-m", "bench.pixal3d.decode_memory",
           "--case", f"extraction-{flags}:{path}", "--coarse", str(fine), "--result", str(res)]
    subprocess.run(cmd, check=True, cwd=root, env={**os.environ, **env})
    out = json.loads(res.read_text())
    out["peak_at_exit_bytes"] = json.loads(peak.read_text())["peak_bytes"]
    print(f"extraction {flags} {path} fine={out['fine']:,}: {out['working_bytes'] / 2**30:.3f} "
          f"GiB, {out['seconds']:.1f} s", flush=True)
    return out


def report(cases: list[dict], real_fine: int) -> dict:
    """Rows pairing port and lean by (flags, voxels), and each flags kind's largest carried to
    ``real_fine`` voxels by its bytes per voxel (the extraction's tensors are all per voxel or
    per intersected edge, so its working memory is linear in the voxels at a fixed edges-per-
    voxel ratio; labelled scaled)."""
    by = {(c["flags"], c["fine"], c["path"]): c for c in cases}
    rows = []
    for (flags, fine, path), port in sorted(by.items()):
        lean = by.get((flags, fine, "lean"))
        if path != "port" or lean is None:
            continue
        rows.append({"flags": flags, "fine_voxels": fine,
                     "intersected_edges": port["intersected_edges"],
                     "edges_per_voxel": round(port["intersected_edges"] / fine, 3),
                     "faces": port["faces"], "input_bytes": port["input_bytes"],
                     "output_bytes": port["output_bytes"],
                     "port_bytes": port["working_bytes"], "lean_bytes": lean["working_bytes"],
                     "ratio": lean["working_bytes"] / port["working_bytes"],
                     "port_bytes_per_voxel": round(port["working_bytes"] / fine, 1),
                     "lean_bytes_per_voxel": round(lean["working_bytes"] / fine, 1),
                     "same_output": port["sha256"] == lean["sha256"],
                     "port_seconds": port["seconds"], "lean_seconds": lean["seconds"],
                     "port_process_peak_bytes": port["peak_at_exit_bytes"],
                     "lean_process_peak_bytes": lean["peak_at_exit_bytes"],
                     "lean_events": lean["events"]})
    scaled = scale_largest(rows, "flags", real_fine,
                           {"port_bytes": "port_bytes", "lean_bytes": "lean_bytes"})
    return {"rows": rows, "scaled": scaled}


def markdown(summary: dict) -> str:
    gib = 1 << 30
    lines = ["| flags | fine voxels | intersected edges a voxel | faces | extraction over its "
             "inputs: port | lean | lean ÷ port | port B/voxel | lean B/voxel | same bytes | "
             "port s | lean s |", "|---" * 12 + "|"]
    for r in summary["rows"]:
        lines.append(f"| {r['flags']} | {r['fine_voxels']:,} | {r['edges_per_voxel']} | "
                     f"{r['faces']:,} | {r['port_bytes'] / gib:.3f} GiB | "
                     f"{r['lean_bytes'] / gib:.3f} GiB | {r['ratio']:.3f} | "
                     f"{r['port_bytes_per_voxel']:,.0f} | {r['lean_bytes_per_voxel']:,.0f} | "
                     f"{'yes' if r['same_output'] else 'NO'} | {r['port_seconds']} | "
                     f"{r['lean_seconds']} |")
    for flags, s in summary["scaled"].items():
        lines.append(f"| {flags}, scaled (not measured) | {s['fine_voxels']:,} (from "
                     f"{s['from_fine_voxels']:,}) | – | – | {s['port_bytes'] / gib:.2f} GiB | "
                     f"{s['lean_bytes'] / gib:.2f} GiB | "
                     f"{s['lean_bytes'] / s['port_bytes']:.3f} | – | – | – | – | – |")
    return "\n".join(lines) + "\n"
