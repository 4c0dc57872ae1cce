"""Export rows of the Pixal3D benchmark: the stand-in port run end to end through the runner,
with the export stage in the model process (``--export-process in-process``, the port's way)
against a process of its own (``--export-process own``), and the latter with
``--export-profile fit``. Peak and wall time of the export stage, per sub-step, the face count
of the GLB, and the export's peak against the port's modelled one.

    .venv/bin/python -m bench.pixal3d.export [--scale 0.03125] [--rounds 2]
        [--out bench/results/<date>/export] [--summary bench/results/<date>/summary.json]

What it runs: ``python -m runner IMAGE -o OUT.glb --backend pixal3d --pixal3d-dir <stand-in>
--texture-size 512 --trace …`` on the CPU, weights written at ``--scale`` of the real sizes,
and the stand-in's export holding the real drivers' memory at the same scale
(``PIXAL3D_STANDIN_EXPORT_SCALE``; the model of those drivers is in the stand-in's
``o_voxel/_memory.py``). The runner samples each process from outside (10 Hz plus the kernel
high-water mark), so each mode is measured as a user would run it.

Figures (bytes, seconds), per mode and round, in ``export.json``:

- ``peak``: the export stage's peak (``stageload summary``'s window rule); ``seconds``: its
  wall time; ``substeps``: each sub-step's peak and seconds; ``faces``: faces in the GLB;
- ``ready_footprint``: the footprint of the export stage's process at its first sample after
  ``ready`` — in-process, what the model process still holds once every model is released
  (runtime, allocator caches); own process, a fresh interpreter's;
- ``modelled``: the stand-in's modelled working memory (its report), so ``limit`` =
  own-process ``ready_footprint`` + ``modelled`` is the least an export process can hold.

Checks: ``export_split_over_inprocess`` (own-process peak ÷ in-process peak, worst rounds);
in-process − own-process peak ≥ 0.9 × the leftover (in-process − own-process
``ready_footprint``; 0.9 allows one sampling interval's drift); own-process peak ≤ 1.10 ×
``limit``; fit's peak below the default's with the GLB's faces within the peer's tolerance
(``stageload.pixal3d.export.run.PEER_FACE_TOLERANCE``). ``--summary`` merges them into the main
benchmark's ``summary.json`` (key ``export`` and ``export_split_over_inprocess``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODES = {
    "in_process": ["--export-process", "in-process"],
    "own_process": ["--export-process", "own"],
    "own_process_fit": ["--export-process", "own", "--export-profile", "fit"],
}


def _first_footprint_after(events: list[dict], t: float) -> int | None:
    for e in events:
        if e.get("event") == "sample" and e["t"] >= t and e.get("footprint"):
            return int(e["footprint"])
    return None


def _faces_then_remove(glb: Path) -> int:
    """Faces in the benchmark's own GLB, which is then deleted (results keep traces, not GLBs)."""
    import trimesh
    scene = trimesh.load(str(glb))
    faces = int(sum(len(g.faces) for g in scene.geometry.values()))
    glb.unlink()
    return faces


def run_mode(name: str, work: Path, env: dict, image: Path, port_dir: Path) -> dict:
    """One runner job in mode ``name``; returns its figures (see the module docstring)."""
    from stageload.summary import summarize
    from stageload.trace import iter_lines, parse_lines

    out, trace = work / f"{name}.glb", work / f"{name}.trace.jsonl"
    report = work / f"{name}.modelled.json"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "runner", str(image), "-o", str(out), "--backend", "pixal3d",
           "--pixal3d-dir", str(port_dir), "--texture-size", "512", "--trace", str(trace),
           "--overwrite", *MODES[name]]
    start = time.time()
    with open(work / f"{name}.log", "w", encoding="utf-8") as log:
        proc = subprocess.run(cmd, cwd=REPO,
                              env={**env, "PIXAL3D_STANDIN_EXPORT_REPORT": str(report)},
                              stdout=subprocess.DEVNULL, stderr=log, timeout=1800)
    wall = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: the runner exited with {proc.returncode}; see "
                           f"{work / (name + '.log')}")
    events, _ = parse_lines(iter_lines(trace), source=str(trace))
    export = next(st for st in summarize(events)["stages"] if st["stage"] == "export")
    ready = next(e["t"] for e in events if e.get("event") == "ready" and e.get("stage") == "export")
    pids = {e.get("stage"): e.get("pid") for e in events if e.get("event") == "stage"
            and e.get("parent") is None}
    return {"mode": name, "peak": export["peak"], "seconds": export["seconds"], "wall": wall,
            "ready_footprint": _first_footprint_after(events, ready),
            "modelled": json.loads(report.read_text())["peak_bytes"] if report.exists() else 0,
            "faces": _faces_then_remove(out), "export_pid": pids.get("export"),
            "decode_pid": pids.get("decode"),
            "substeps": [{k: sub[k] for k in ("stage", "peak", "seconds")}
                         for sub in export["substeps"]]}


def analyse(rows: list[dict]) -> dict:
    """The checks over every round (worst round of each mode)."""
    from stageload.pixal3d.export.run import PEER_FACE_TOLERANCE

    by = {m: [r for r in rows if r["mode"] == m] for m in MODES}
    worst = {m: max(rs, key=lambda r: r["peak"]) for m, rs in by.items()}
    inproc, own, fit = worst["in_process"], worst["own_process"], worst["own_process_fit"]
    leftover = inproc["ready_footprint"] - own["ready_footprint"]
    limit = own["ready_footprint"] + own["modelled"]
    face_diff = abs(fit["faces"] - own["faces"]) / own["faces"]
    return {
        "export_split_over_inprocess": own["peak"] / inproc["peak"],
        "leftover": leftover, "peak_saved": inproc["peak"] - own["peak"],
        "saved_over_leftover": (inproc["peak"] - own["peak"]) / leftover if leftover > 0 else None,
        "export_limit": limit, "own_over_limit": own["peak"] / limit,
        "fit_over_default": fit["peak"] / own["peak"], "fit_faces": fit["faces"],
        "default_faces": own["faces"], "face_difference": face_diff,
        "peer_face_tolerance": PEER_FACE_TOLERANCE,
        "checks": {
            "own process saves at least the leftover": leftover > 0
            and inproc["peak"] - own["peak"] >= 0.9 * leftover,
            "own-process peak <= 1.10 x limit": own["peak"] <= 1.10 * limit,
            "fit lowers the peak": fit["peak"] < own["peak"],
            "fit faces within the peer's tolerance": face_diff <= PEER_FACE_TOLERANCE,
            "export in another pid than the model stages": all(
                r["export_pid"] is not None and r["export_pid"] != r["decode_pid"]
                for m in ("own_process", "own_process_fit") for r in by[m]),
        },
    }


def table(result: dict) -> str:
    """Markdown rows: each mode's worst round, then the checks."""
    gb = lambda n: f"{n / 1e9:.2f} GB" if n is not None else "–"  # noqa: E731
    lines = ["| export | peak | wall time (stage) | footprint at ready | faces | peak sub-step |",
             "|---|---|---|---|---|---|"]
    for mode in MODES:
        rows = [r for r in result["rounds"] if r["mode"] == mode]
        r = max(rows, key=lambda x: x["peak"])
        top = max(r["substeps"], key=lambda s: s["peak"] or 0) if r["substeps"] else None
        sub = f"{top['stage']} ({gb(top['peak'])})" if top else "–"
        secs = ", ".join(f"{x['seconds']:.1f} s" for x in rows)
        lines.append(f"| {mode.replace('_', ' ')} | {gb(r['peak'])} | {secs} | "
                     f"{gb(r['ready_footprint'])} | {r['faces']:,} | {sub} |")
    a = result["analysis"]
    lines += ["", "| export target | measured | result |", "|---|---|---|",
              f"| own process ÷ in-process peak (`export_split_over_inprocess`) | "
              f"{a['export_split_over_inprocess']:.3f} | |",
              f"| in-process − own peak ≥ 0.9 × leftover ({gb(a['leftover'])}) | "
              f"{gb(a['peak_saved'])} | "
              f"{_met(a['checks']['own process saves at least the leftover'])} |",
              f"| own-process peak ÷ limit ({gb(a['export_limit'])}) ≤ 1.10 | "
              f"{a['own_over_limit']:.3f} | "
              f"{_met(a['checks']['own-process peak <= 1.10 x limit'])} |",
              f"| fit peak ÷ default peak < 1 | {a['fit_over_default']:.3f} | "
              f"{_met(a['checks']['fit lowers the peak'])} |",
              f"| fit faces vs default (≤ {a['peer_face_tolerance']:.1%}) | "
              f"{a['fit_faces']:,} vs {a['default_faces']:,} ({a['face_difference']:.1%}) | "
              f"{_met(a['checks']['fit faces within the peer' + chr(39) + 's tolerance'])} |"]
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1 / 32, help="fraction of the real sizes")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="results folder (default: bench/"
                   "results/<UTC date>/export)")
    p.add_argument("--work", type=Path, default=Path("/tmp/pixal3d_export_bench"))
    p.add_argument("--image", type=Path, default=REPO / "examples" / "goblin.png")
    p.add_argument("--summary", type=Path, default=None,
                   help="the main benchmark's summary.json to merge the export figures into")
    args = p.parse_args(argv)
    if not 0 < args.scale <= 1 or args.rounds < 1:
        p.error("--scale must be in (0, 1] and --rounds at least 1")
    out = args.out or REPO / "bench" / "results" / time.strftime("%Y-%m-%d",
                                                                 time.gmtime()) / "export"
    out.mkdir(parents=True, exist_ok=True)
    from standin import PORT_DIR as port_dir
    from standin import make_weights
    info = make_weights(args.work / f"weights_{args.scale:g}", scale=args.scale)
    env = {**os.environ, **info.env, "PIXAL3D_DEVICE": "cpu",
           "PIXAL3D_STANDIN_EXPORT_SCALE": str(args.scale)}
    rows = []
    for k in range(args.rounds):
        for mode in MODES:  # alternating, so a busy moment hits every mode alike
            print(f"round {k}: {mode}", file=sys.stderr, flush=True)
            rows.append({**run_mode(mode, out, env, args.image, port_dir), "round": k})
    result = {"scale": args.scale, "rounds": rows, "analysis": analyse(rows),
              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "export.json").write_text(json.dumps(result, indent=1))
    (out / "export_table.md").write_text(table(result) + "\n")
    if args.summary is not None:
        summary = json.loads(args.summary.read_text()) if args.summary.exists() else {}
        summary["export"] = result
        summary["export_split_over_inprocess"] = result["analysis"]["export_split_over_inprocess"]
        args.summary.write_text(json.dumps(summary, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
