"""``python -m bench.export_engine``: the bounded export engine measured at full size.
See docs/benchmark.md ("Bounded export") for what each figure means.

    .venv/bin/python -m bench.export_engine [--quick] [--docs]

Runs, each ``python -m runner export`` in a process of its own (``run.py``), one after the
other: the defaults (1,000,000 faces, 2048 texture) on the full-size asset; the same with
``--export-budget 2G``; the input's faces varied (the asset decimated to 1, 2 and 5 M faces,
same voxels; the full asset is the ~8 M point); the texture varied (1024, 4096); and the
defaults pinned to one core (``taskset``, thread pools of one) against the two of this
machine. Then the quality of the defaults' GLB (``quality.py``) and the stand-in's modelled
port export at the same sizes (``model.py``, a model). Writes
``bench/results/<UTC date>/export_engine/export_engine.json`` (every figure, bytes and
seconds) and ``table.md``; ``--docs`` refreshes the generated blocks of docs/pixal3d.md and
docs/benchmark.md.

``--only RUN …``: only those runs, merged into the results folder's earlier
``export_engine.json`` (a row keeps the time it was measured; the table says which rows came
later); the quality is measured for the defaults' GLB and the 2G budget's.

``--quick``: a 512 grid (about 2 M faces), the defaults, the budget, 1 M input faces, a 1024
texture and the one-core run, fewer quality samples: every code path in minutes, the figures
not the full-size ones. ``--resolution``, ``--target``, ``--faces``, ``--texture``, ``--textures``
and ``--samples`` (the quality's distance and colour samples) override the plan's sizes: the
test suite's smoke run takes the smallest that still runs every code path.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from stageload.trace import compress_trace

from . import model, quality, report
from .run import REPO, run_export

SHARED_PICTURE = Path("/work/shared/images/typical_humanoid_mech.png")
PICTURE = REPO / "tests" / "data" / "images" / "typical_humanoid_mech.png"
DEFAULT_TARGET, DEFAULT_TEXTURE = 1_000_000, 2048
#: the bounded export's targets (bytes, seconds): docs/benchmark.md, "Bounded export".
GIB = 1 << 30
TARGETS = {"defaults_peak": 4 * GIB, "budget_2g_peak": int(2.2 * GIB), "defaults_seconds": 600}


def _asset(picture: Path, resolution: int, work: Path) -> tuple[Path, dict]:
    """The full-size asset (made once, in its own process, and kept in ``work``)."""
    path = work / f"asset_{picture.stem}_{resolution}.npz"
    facts = path.with_suffix(".json")
    if not (path.exists() and facts.exists()):
        print(f"making {path.name} (python -m standin.asset)", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, "-m", "standin.asset", str(picture), "-o",
                              str(path), "--resolution", str(resolution), "--overwrite"],
                             cwd=REPO, capture_output=True, text=True, check=True)
        facts.write_text(out.stdout.strip().splitlines()[-1])
    return path, json.loads(facts.read_text())


def _reduced(full: Path, faces: int) -> Path:
    path = full.with_name(f"{full.stem}_{faces // 1000}k.npz")
    if not path.exists():
        print(f"making {path.name} (python -m standin.asset.reduce)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "standin.asset.reduce", str(full), "-o", str(path),
                        "--faces", str(faces)], cwd=REPO, check=True, capture_output=True)
    return path


def plan(quick: bool) -> dict:
    """What to run: the grid, the input face counts below the full asset, the other textures."""
    if quick:
        return {"resolution": 512, "faces": [1_000_000], "textures": [1024],
                "target": DEFAULT_TARGET, "distance_samples": 50_000, "colour_samples": 50_000}
    return {"resolution": 1024, "faces": [1_000_000, 5_000_000, 2_000_000],
            "textures": [4096, 1024], "target": DEFAULT_TARGET, "distance_samples": 200_000,
            "colour_samples": 100_000}


def _label(faces: int) -> str:
    return f"{faces / 1e6:g}m" if faces >= 100_000 else f"{faces // 1000}k"


def _runs(p: dict, full: Path) -> list[tuple[str, Path | int, dict]]:
    """The runs (name, the asset or the input faces of a reduced one, levers), most wanted
    first (results are written after each, so a benchmark cut short keeps the headline
    figures): defaults, budget, the faces and textures alternating with the one-core run in
    the middle."""
    d = {"target": p["target"], "texture": p.get("texture", DEFAULT_TEXTURE)}
    faces = [(f"faces_{_label(f)}", f, d) for f in p["faces"]]  # reduced when it runs
    textures = [(f"texture_{t}", full, {**d, "texture": t}) for t in p["textures"]]
    rest = []
    for k in range(max(len(faces), len(textures))):
        rest += faces[k:k + 1] + textures[k:k + 1]
        if k == 0:
            rest.append(("cores_1", full, {**d, "cores": 1}))
    return [("defaults", full, d), ("budget_2g", full, {**d, "budget": "2G"}), *rest]


#: the runs whose GLB's quality is measured, and the result's key for it.
QUALITY_OF = {"defaults": "quality", "budget_2g": "quality_budget_2g"}


def _put(result: dict, row: dict) -> None:
    """Put ``row`` into ``result["runs"]``, replacing an earlier row of the same name."""
    runs = result["runs"]
    at = next((i for i, r in enumerate(runs) if r["name"] == row["name"]), None)
    if at is None:
        runs.append(row)
    else:
        runs[at] = row


def _merge_into(path: Path, planned: list, only: list[str]) -> tuple[dict, list]:
    """``--only``: the earlier results at ``path`` (which must exist) and the planned runs
    named in ``only`` (SystemExit naming an unknown one)."""
    if not path.exists():
        raise SystemExit(f"--only merges into {path}, which does not exist: run the whole "
                         "benchmark first")
    unknown = set(only) - {name for name, _, _ in planned}
    if unknown:
        raise SystemExit(f"--only: no such run {', '.join(sorted(unknown))}; the plan has "
                         f"{', '.join(name for name, _, _ in planned)}")
    result = json.loads(path.read_text())
    for row in result["runs"]:  # rows of the first pass: the benchmark's own time
        row.setdefault("measured", result["measured"])
    return result, [run for run in planned if run[0] in only]


def _faces_of(path: Path) -> int:
    import numpy as np
    with np.load(str(path)) as data:
        return int(data["faces"].shape[0])


def _parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m bench.export_engine",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 512 grid and fewer runs")
    ap.add_argument("--picture", type=Path, default=None,
                    help=f"the character (default {SHARED_PICTURE}, else {PICTURE})")
    ap.add_argument("--work", type=Path, default=Path("/tmp/export_engine_bench"))
    ap.add_argument("--out", type=Path, default=None,
                    help="results folder (default bench/results/<UTC date>/export_engine)")
    ap.add_argument("--docs", action="store_true", help="refresh docs/pixal3d.md and "
                    "docs/benchmark.md's generated blocks")
    ap.add_argument("--keep-glb", action="store_true", help="keep the GLBs in --work")
    ap.add_argument("--resolution", type=int, help="the asset's grid (the plan's by default)")
    ap.add_argument("--target", type=int, help="the decimation target of every run (1,000,000)")
    ap.add_argument("--faces", type=int, nargs="*", help="input face counts below the asset's")
    ap.add_argument("--texture", type=int, help="the defaults' texture size (2048)")
    ap.add_argument("--textures", type=int, nargs="*", help="texture sizes besides 2048")
    ap.add_argument("--samples", type=int, help="the quality's distance and colour samples "
                    "(the plan's by default; fewer make a smoke run's quality a sketch)")
    ap.add_argument("--via", choices=("runner", "worker"), default="runner",
                    help="runner: python -m runner export (the product's way, default); "
                    "worker: the engine in a bench worker process (run.py)")
    ap.add_argument("--only", nargs="+", metavar="RUN",
                    help="run only these runs of the plan (e.g. budget_2g faces_2m) and merge "
                    "them into the results folder's export_engine.json (each row keeps the time "
                    "it was measured)")
    return ap


def _measure(a, p: dict, full: Path, name: str, asset: Path | int, levers: dict,
             result: dict, out: Path) -> None:
    """One planned run: the export (``run_export``) on ``asset`` (a reduced one made first when
    it is a face count) with ``levers``, its row put into ``result`` with the modelled port
    export, its trace and log copied to ``out``, and the quality of its GLB when it is one of
    :data:`QUALITY_OF` (measured before the GLB is removed, unless ``--keep-glb``)."""
    asset = asset if isinstance(asset, Path) else _reduced(full, asset)
    print(f"export: {name}", file=sys.stderr, flush=True)
    row = run_export(asset, a.work, name, via=a.via, **levers)
    row["input_faces"] = _faces_of(asset)
    if row["export"] is None:
        print(f"  {name} failed (exit {row['rc']}): {row['failed']}", file=sys.stderr)
    row["modelled_port"] = model.port_export(row["input_faces"], row["target"],
                                             row["texture"], p["resolution"])
    row["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    row["merged"] = bool(a.only)  # measured after the benchmark's own pass
    _put(result, row)
    if (a.work / f"{name}.log").exists():  # results keep each run's log and trace
        shutil.copy(a.work / f"{name}.log", out / f"{name}.log")
    trace = a.work / f"{name}.trace.jsonl"
    if trace.exists():  # kept compressed (bench.compress_traces), replacing an earlier run's
        (out / f"{name}.trace.jsonl.gz").unlink(missing_ok=True)
        compress_trace(shutil.copy(trace, out / trace.name))
    # quality first: the figures a later failure must not lose
    if name in QUALITY_OF and row["export"] is not None:
        print(f"quality of the {name} GLB", file=sys.stderr, flush=True)
        result[QUALITY_OF[name]] = quality.evaluate(
            full, row["glb"], p["target"], distance_samples=p["distance_samples"],
            colour_samples=p["colour_samples"])
    if not a.keep_glb:
        Path(row["glb"]).unlink(missing_ok=True)


def _finish(a, p: dict, full: Path, result: dict, out: Path) -> int:
    """Mark ``result`` complete when every planned run has a row, analyse it, write
    ``export_engine.json`` and ``table.md`` (and the docs' blocks with ``--docs``), print the
    tables; returns 0 when every target was met, else 1."""
    names = [r["name"] for r in result["runs"]]
    result["complete"] = all(name in names for name, _, _ in _runs(p, full))
    result["analysis"] = report.analyse(result)
    (out / "export_engine.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(report.tables(result) + "\n")
    if a.docs:
        report.refresh_docs(result, out)
    print(report.tables(result))
    return 0 if all(result["analysis"]["checks"].values()) else 1


def main(argv=None) -> int:
    """Run the benchmark (see the module docstring); returns 0 when every target was met."""
    a = _parser().parse_args(argv)
    picture = a.picture or (SHARED_PICTURE if SHARED_PICTURE.exists() else PICTURE)
    p = plan(a.quick)
    for key in ("resolution", "target", "texture", "faces", "textures"):
        if getattr(a, key) is not None:
            p[key] = getattr(a, key)
    if a.samples is not None:
        p["distance_samples"] = p["colour_samples"] = a.samples
    out = a.out or REPO / "bench" / "results" / time.strftime("%Y-%m-%d", time.gmtime()) / (
        "export_engine_quick" if a.quick else "export_engine")
    a.work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    full, asset_facts = _asset(picture, p["resolution"], a.work)
    result = {"measured": None, "quick": a.quick, "plan": p,
              "asset": {**asset_facts, "path": str(full)}, "runs": [], "quality": None,
              "targets": TARGETS, "machine": report.machine(), "complete": False}
    planned = _runs(p, full)
    if a.only:
        result, planned = _merge_into(out / "export_engine.json", planned, a.only)
    for name, asset, levers in planned:
        _measure(a, p, full, name, asset, levers, result, out)
        if not a.only:
            result["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            result["bench_seconds"] = time.time() - started
        # written after every run, marked incomplete until the last
        (out / "export_engine.json").write_text(json.dumps(result, indent=1))
    return _finish(a, p, full, result, out)


if __name__ == "__main__":
    sys.exit(main())
