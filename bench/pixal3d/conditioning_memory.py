"""``python -m bench.pixal3d.conditioning_memory``: the shape and texture conditioning's working
memory at real shapes on this machine's CPU, the port's path and the lean path
(``stageload.pixal3d.lean.conditioning``) on the same inputs, each pass in its own process.

Each case is ``bench.pixal3d.conditioning_case`` run under ``bench.own_peak`` (the child's
``VmHWM`` when it ends): peak over inputs = that peak - the child's footprint just before the
pass, its peak reset there. Inputs (see ``conditioning_case``): the pass's image, DINOv3-L's
``[1, 1024, 64, 64]`` patch tokens (32x32 for ``shape_512``), NAF at its release sizes (dim
256, 4 heads, 9x9), the pass's grid (64^3; 32^3 for ``shape_512``) with ``--voxels`` active
voxels spread as a character's shell. The ``encoder`` path runs NAF's image encoder alone (the
part both paths share); the ``banded`` path is lean where its sampled pass declines (the
port's ``PIXAL3D_PROJ_GRID_DEVICE`` set: NAF's whole output in bands, the projection at the
active voxels). Agreement: for each pass and size run the port's way and a lean way, the
largest absolute difference of the ``[N, 2 x 1024]`` features divided by the largest absolute
value of the port's. The port's path at 1024x1024 is not run here (about 20 GiB): its figure
comes from its tensors and is labelled so.

Writes ``OUT_DIR/conditioning_memory.json`` and ``.md`` (default
``bench/results/2026-12-04``). Run it under the guard and nice; the port at 512x512 takes about
ten minutes on two cores.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GIB = 2 ** 30
#: (pass, NAF output size, path) in the order run.
DEFAULT_CASES = (("tex_1024", 1024, "lean"), ("tex_1024", 1024, "banded"),
                 ("tex_1024", 1024, "encoder"),
                 ("tex_1024", 256, "port"), ("tex_1024", 256, "lean"),
                 ("tex_1024", 256, "banded"),
                 ("shape_512", 512, "lean"), ("shape_1024", 512, "lean"),
                 ("tex_1024", 512, "lean"), ("tex_1024", 512, "port"))
SHAPE_PORT_CASES = (("shape_512", 512, "port"), ("shape_1024", 512, "port"))


def port_tensors_1024(n_voxels: int) -> dict:
    """The port's texture pass at 1024x1024 from its tensors (fp32 bytes), not measured: NAF's
    attention through ``_torch_na2d`` (resized k 256 ch and v 1024 ch, flat copies of q, k, v,
    the output and its contiguous copy, one 2,048-query chunk's gathered neighbourhoods) and
    ``ProjGrid`` over 64^3 points of both maps and their concatenation."""
    hw, cq, cv, e = 1024 * 1024, 256, 1024, 4
    parts = {"resized_k": e * cq * hw, "resized_v": e * cv * hw,
             "flat_q_k_v": e * (2 * cq + cv) * hw, "output": e * cv * hw,
             "contiguous_output_copy": e * cv * hw,
             "chunk_gathers": e * 2048 * 81 * (cq + cv)}
    grid = 64 ** 3
    projection = {"z_proj_lr": e * grid * cv, "z_proj_hr": e * grid * cv,
                  "concatenated": e * grid * 2 * cv, "kept_rows": e * n_voxels * 2 * cv}
    return {"attention_bytes": sum(parts.values()), "attention_parts": parts,
            "projection_bytes": sum(projection.values()), "projection_parts": projection,
            "label": "from the port's tensors (not measured)"}


def run_case(case, voxels: dict, weights: Path, work: Path, timeout: float) -> dict:
    """Run one case in a child; returns its info plus ``peak_bytes``, ``over_inputs_bytes``,
    ``wall_seconds`` and ``features_file``."""
    pass_name, size, path = case
    tag = f"{pass_name}-{size}-{path}"
    peak_file, info_file, feats = (work / f"{tag}.peak.json", work / f"{tag}.info.json",
                                   work / f"{tag}.f32")
    cmd = [sys.executable, "-m", "bench.own_peak", str(peak_file), "-m",
           "bench.pixal3d.conditioning_case", "--pass", pass_name, "--size", str(size),
           "--path", path, "--voxels", str(voxels[pass_name]), "--weights", str(weights),
           "--out", str(feats), "--info", str(info_file)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"case {tag} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    info = json.loads(info_file.read_text())
    peak = json.loads(peak_file.read_text())["peak_bytes"]
    info.update(peak_bytes=peak, over_inputs_bytes=peak - info["baseline_bytes"],
                wall_seconds=round(wall, 1), features_file=str(feats) if path != "encoder"
                else None)
    print(f"{tag}: peak over inputs {info['over_inputs_bytes'] / GIB:.2f} GiB, "
          f"{info['seconds']} s", file=sys.stderr, flush=True)
    return info


def agreement(results: list) -> list:
    """Max |lean - port| / max |port| of the features, per pass and size run the port's way
    and a lean way (``lean``, ``banded``)."""
    out = []
    by = {(r["pass"], r["size"], r["path"]): r for r in results}
    for (pass_name, size, path), port in by.items():
        if path != "port":
            continue
        shape = port["features"]
        a = np.fromfile(port["features_file"], dtype=np.float32).reshape(shape)
        for way in ("lean", "banded"):
            other = by.get((pass_name, size, way))
            if other is None:
                continue
            b = np.fromfile(other["features_file"], dtype=np.float32).reshape(shape)
            out.append({"pass": pass_name, "size": size, "path": way, "features": shape,
                        "max_rel_diff": float(np.abs(b - a).max() / np.abs(a).max())})
    return out


def _weights(work: Path) -> Path:
    from standin import make_weights
    folder = work / "weights"
    info = make_weights(folder, scale=1e-4)
    (folder / "env.json").write_text(json.dumps(info.env))
    return folder


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="bench/results/2026-12-04")
    parser.add_argument("--voxels", type=int, default=21_500,
                        help="active voxels on the 64^3 grids (default 21,500)")
    parser.add_argument("--voxels-32", type=int, default=4_000,
                        help="active voxels on shape_512's 32^3 grid (default 4,000)")
    parser.add_argument("--cases", default=None,
                        help="comma-separated PASS:SIZE:PATH (default: the standard set)")
    parser.add_argument("--shape-port", action="store_true",
                        help="also run the port's path for the shape passes at 512x512")
    parser.add_argument("--timeout", type=float, default=3600)
    return parser


def main(argv=None) -> int:
    ns = _parser().parse_args(argv)
    from bench.pixal3d.conditioning_report import write_report
    cases = ([(p, int(s), path) for p, s, path in (c.split(":") for c in ns.cases.split(","))]
             if ns.cases else list(DEFAULT_CASES) + (list(SHAPE_PORT_CASES)
                                                     if ns.shape_port else []))
    voxels = {"tex_1024": ns.voxels, "shape_1024": ns.voxels, "shape_512": ns.voxels_32}
    command = ("python -m bench.pixal3d.conditioning_memory "
               + " ".join(argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="conditioning-memory-") as tmp:
        work = Path(tmp)
        weights = _weights(work)
        results = []
        for case in cases:  # the report is rewritten after each case: a long run keeps its part
            results.append(run_case(case, voxels, weights, work, ns.timeout))
            report = {"cases": [{k: v for k, v in r.items() if k != "features_file"}
                                for r in results],
                      "agreement": agreement(results),
                      "port_1024_from_tensors": port_tensors_1024(ns.voxels),
                      "machine": {"cpus": os.cpu_count()}, "command": command,
                      "complete": len(results) == len(cases)}
            write_report(report, Path(ns.out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
