"""``python -m bench.export_orient``: the bounded export's ``orient`` step measured at full size
(its own process, as the engine runs it), against trimesh's ``repair.fix_winding``, and the
whole export at the defaults with it. Run it alone (it holds several GiB)::

    flock /tmp/bigmem.lock .venv/bin/python -m bench.export_orient [--asset A.npz] [--quick]

1. The asset of docs/benchmark.md's ``defaults`` row (``python -m standin.asset
   typical_humanoid_mech.png --resolution 1024``: about 7.9 M faces; made once in ``--work``,
   or ``--asset``). Its mesh is cleaned as the engine cleans it (``cleanup.clean``), then wound
   the way o_voxel's flexible dual grid extraction winds it: the quads of one axis all come in
   one vertex order, so every face whose outside lies toward the negative side of its main
   axis (the largest component of its normal) is reversed — about half. The stand-in's mesh
   is marching cubes, wound outward, so the step must give back exactly the cleaned faces.
2. The step's child process (``python -m bounded_export.stoppable
   bounded_export.orient:orient_file``, the engine's own command) under ``bench.own_peak``: its
   kernel high-water mark (VmHWM) and wall seconds, at full size and on the bumpy sphere of
   ``standin.sphere_asset`` at 8 subdivisions (1.3 M faces), wound the same way: the two give
   the bytes a face (``budget.ORIENT_BYTES_PER_FACE``).
3. ``trimesh.repair.fix_winding`` on the sphere at 20 k, 82 k and 328 k faces, each in its own
   process (its networkx walk grows too fast to run at full size here).
4. The whole export at the defaults (1,000,000 faces, 2048 texture) of the asset with its
   faces wound as in 1 (``bench.export_engine.run.run_export``: ``python -m runner export``
   sampled from outside): its peak and the orient step's, against the 3 GiB default budget;
   its GLB welded and checked (trimesh: consistent winding, positive volume).
   ``--export-trace TRACE`` reads these figures from an earlier run's runner trace instead.

Writes ``bench/results/<UTC date>/export_orient/export_orient.json`` (bytes, seconds) and
``table.md``. ``--quick``: the 512 grid and no whole export (minutes; not the full-size
figures). ``--no-export``: skip 4.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_PICTURE = Path("/work/shared/images/typical_humanoid_mech.png")
PICTURE = REPO / "tests" / "data" / "images" / "typical_humanoid_mech.png"
TRIMESH_SUBDIVISIONS = (5, 6, 7)
GIB = 1 << 30


def fdg_winding(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, int]:
    """(faces int32 [F, 3], reversed count): ``faces`` with every face whose normal's largest
    component is negative reversed (o_voxel's fixed quad order per axis, see the module
    docstring)."""
    out = np.array(faces, np.int32)
    step = 1 << 20
    flipped = 0
    for start in range(0, len(out), step):
        tri = vertices[out[start:start + step]].astype(np.float64)
        normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        main = np.abs(normal).argmax(axis=1)
        back = normal[np.arange(len(normal)), main] < 0
        rows = start + np.flatnonzero(back)
        out[rows] = out[rows][:, ::-1]
        flipped += len(rows)
    return out, flipped


def _own_peak(work: Path, name: str, module_args: list[str]) -> dict:
    """``module_args`` run as ``python -m bench.own_peak PEAK.json -m …``: ``{"peak",
    "seconds", "stdout"}``. Raises ``RuntimeError`` when it fails."""
    peak = work / f"{name}.peak.json"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.own_peak", str(peak), "-m",
                           *module_args], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed: {proc.stderr[-2000:]}")
    return {"peak": json.loads(peak.read_text())["peak_bytes"], "seconds": round(seconds, 3),
            "stdout": proc.stdout}


def orient_child(work: Path, name: str, mesh: Path) -> dict:
    """The engine's orient child on the mesh file ``mesh``: peak, seconds, its facts."""
    empty, out = work / "empty.npz", work / f"{name}.oriented.npz"
    np.savez(empty)
    params = json.dumps({"inp": str(mesh), "out": str(out)})
    result = _own_peak(work, name, ["bounded_export.stoppable",
                                    "bounded_export.orient:orient_file", str(empty),
                                    str(work / f"{name}.facts.npz"), params])
    with np.load(work / f"{name}.facts.npz") as data:
        result["facts"] = {key: int(data[key]) for key in data.files}
    result.pop("stdout")
    return result


def prepared(work: Path, name: str, vertices: np.ndarray, faces: np.ndarray) -> dict:
    """The cleaned mesh wound as FDG winds it, written to ``work/NAME.fdg.npz``."""
    from bounded_export.cleanup import clean

    vertices, faces = clean(vertices.astype(np.float32), faces.astype(np.int32))
    wound, flipped = fdg_winding(vertices, faces)
    np.savez(work / f"{name}.fdg.npz", vertices=vertices, faces=wound)
    np.save(work / f"{name}.clean_faces.npy", faces)
    return {"faces": len(faces), "vertices": len(vertices), "reversed": flipped,
            "path": work / f"{name}.fdg.npz"}


def _rotated(faces: np.ndarray) -> np.ndarray:
    """Each face's corners turned (winding kept) so its smallest vertex comes first."""
    first = faces.argmin(axis=1)
    rows = np.arange(len(faces))[:, None]
    return faces[rows, (first[:, None] + np.arange(3)) % 3]


def not_outward(work: Path, name: str) -> int:
    """Faces of the oriented mesh not wound as the cleaned mesh's (0: all outward again)."""
    want = _rotated(np.load(work / f"{name}.clean_faces.npy"))
    with np.load(work / f"{name}.oriented.npz") as data:
        got = _rotated(data["faces"])
    return int(np.count_nonzero((got != want).any(axis=1)))


def fix_winding_main(inp: str, out: str) -> None:
    """The trimesh worker: ``fix_winding`` on the mesh in ``inp``; seconds and whether it
    came out consistent to ``out`` (JSON)."""
    import trimesh

    with np.load(inp) as data:
        mesh = trimesh.Trimesh(data["vertices"], data["faces"], process=False)
    start = time.perf_counter()
    trimesh.repair.fix_winding(mesh)
    seconds = time.perf_counter() - start
    Path(out).write_text(json.dumps({"seconds": round(seconds, 3),
                                     "consistent": bool(mesh.is_winding_consistent)}))


def trimesh_rows(work: Path) -> list[dict]:
    """``fix_winding`` on the wound sphere at ``TRIMESH_SUBDIVISIONS``, each in a process."""
    from standin.sphere_asset import sphere_mesh

    rows = []
    for sub in TRIMESH_SUBDIVISIONS:
        name = f"trimesh_{sub}"
        prep = prepared(work, name, *sphere_mesh(sub))
        ran = _own_peak(work, name, ["bench.export_orient", "fix-winding", str(prep["path"]),
                                     str(work / f"{name}.json")])
        inner = json.loads((work / f"{name}.json").read_text())
        rows.append({"faces": prep["faces"], "peak": ran["peak"], "seconds": ran["seconds"],
                     "fix_winding_seconds": inner["seconds"],
                     "consistent": inner["consistent"]})
    return rows


def _asset(work: Path, resolution: int) -> Path:
    picture = SHARED_PICTURE if SHARED_PICTURE.exists() else PICTURE
    path = work / f"asset_{picture.stem}_{resolution}.npz"
    if not path.exists():
        print(f"making {path.name} (python -m standin.asset)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "standin.asset", str(picture), "-o", str(path),
                        "--resolution", str(resolution), "--overwrite"], cwd=REPO, check=True,
                       capture_output=True)
    return path


def _wound_asset(asset: Path, work: Path) -> Path:
    """The asset with its mesh's faces wound as FDG winds them (voxels unchanged)."""
    path = work / f"{asset.stem}_fdg.npz"
    if not path.exists():
        with np.load(asset) as data:
            arrays = {key: data[key] for key in data.files}
        arrays["faces"] = fdg_winding(arrays["vertices"], arrays["faces"])[0]
        np.savez(path, **arrays)
    return path


def whole_export(asset: Path, work: Path) -> dict:
    """The defaults' export of ``asset`` through the runner, sampled from outside."""
    from bench.export_engine.run import run_export

    row = run_export(asset, work, "defaults_fdg", target=1_000_000, texture=2048)
    glb = Path(row.pop("glb"))
    if glb.exists():
        row["glb_winding"] = glb_winding(glb)
        glb.unlink()
    return row


def traced_export(trace: Path, out: Path) -> dict:
    """The whole export's figures from the runner trace ``trace`` of an earlier run (the
    runner's own samples; this process's tree samples were not taken: ``tree_peak`` is the
    export's peak), the trace kept compressed in ``out``."""
    import shutil

    from bench.export_engine.run import export_figures
    from stageload.trace import compress_trace

    figures = export_figures(trace)
    kept = out / trace.name
    shutil.copyfile(trace, kept)
    compress_trace(kept)
    return {"name": "defaults_fdg", "from_trace": str(trace), "tree_peak": figures["peak"],
            "export": figures}


def glb_winding(glb: Path) -> dict:
    """The GLB's faces welded across UV seams (trimesh): wound consistently, and the signed
    volume they enclose (positive: outward)."""
    import trimesh

    loaded = trimesh.load(glb, force="mesh", process=False)
    mesh = trimesh.Trimesh(loaded.vertices, loaded.faces, process=False)
    mesh.merge_vertices(merge_tex=True, merge_norm=True)
    return {"faces": len(mesh.faces), "consistent": bool(mesh.is_winding_consistent),
            "watertight": bool(mesh.is_watertight), "volume": float(mesh.volume)}


def step_rows(work: Path, full: Path) -> dict:
    """The orient child on the sphere (1.3 M faces) and on the full asset's mesh."""
    from standin.sphere_asset import sphere_mesh

    rows = {}
    for name, make in (("sphere_8", lambda: sphere_mesh(8)), ("full", lambda: _mesh(full))):
        prep = prepared(work, name, *make())
        ran = orient_child(work, name, prep.pop("path"))
        rows[name] = {**prep, **ran, "differing_faces": not_outward(work, name)}
        for suffix in (".fdg.npz", ".oriented.npz", ".clean_faces.npy"):
            (work / f"{name}{suffix}").unlink(missing_ok=True)
    small, big = rows["sphere_8"], rows["full"]
    slope = (big["peak"] - small["peak"]) / (big["faces"] - small["faces"])
    rows["bytes_per_face"] = round(slope, 1)
    rows["base"] = int(small["peak"] - slope * small["faces"])
    return rows


def _mesh(asset: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(asset) as data:
        return data["vertices"], data["faces"]


def _budget(faces: int, asset: Path) -> dict:
    """The budget model's figure for the orient step of ``asset`` at the defaults."""
    from bounded_export import budget
    from bounded_export.asset import inspect_asset

    plan = budget.plan(**budget.asset_sizes(inspect_asset(asset)), target=1_000_000,
                       texture=2048, file_bytes=asset.stat().st_size)
    return {"predicted_orient": plan.peaks["orient"], "predicted_peak": plan.peak,
            "default_budget": budget.DEFAULT_BUDGET, "faces": faces}


def table(result: dict) -> str:
    """The markdown of ``result``."""
    gib = lambda n: "–" if n is None else f"{n / GIB:.2f} GiB"  # noqa: E731
    s = result["step"]
    lines = [f"Measured {result['measured']} on {result['machine']}.", "",
             "| mesh | faces | reversed (FDG order) | orient peak (VmHWM) | seconds | "
             "faces not outward after |", "|---|---|---|---|---|---|"]
    for name in ("sphere_8", "full"):
        r = s[name]
        lines.append(f"| {name} | {r['faces']:,} | {r['reversed']:,} | {gib(r['peak'])} | "
                     f"{r['seconds']:.1f} | {r['differing_faces']:,} |")
    lines += ["", f"Per face: {s['bytes_per_face']} B over a base of {gib(s['base'])}; the "
              f"budget model predicts {gib(result['budget']['predicted_orient'])} for the "
              f"step (the export process beside it included).", "",
              "| trimesh fix_winding: faces | peak | process seconds | fix_winding seconds | "
              "consistent |", "|---|---|---|---|---|"]
    for r in result["trimesh"]:
        lines.append(f"| {r['faces']:,} | {gib(r['peak'])} | {r['seconds']:.1f} | "
                     f"{r['fix_winding_seconds']:.1f} | {r['consistent']} |")
    e = result.get("export")
    if e:
        lines += ["", export_line(e, result["budget"]["default_budget"])]
        if e.get("glb_winding"):
            lines += ["", f"Its GLB, welded: {e['glb_winding']}."]
    return "\n".join(lines) + "\n"


def export_line(e: dict, budget: int) -> str:
    """One sentence on the whole export's row ``e`` (``run_export``'s) against ``budget``."""
    if not e.get("export"):
        return f"Whole export failed: {e.get('failed')}"
    sub, whole = e["export"]["substeps"], e["export"]
    orient, cleanup = sub["orient"], sub["cleanup"]
    highest = max(sub, key=lambda k: sub[k]["peak"] or 0)
    tree = ("the runner's samples of the export process, read from an earlier run's trace"
            if e.get("from_trace") else f"tree {e['tree_peak'] / GIB:.2f} GiB")
    return (f"Whole export at the defaults (FDG-wound asset): peak {whole['peak'] / GIB:.2f} GiB"
            f" ({tree}), {whole['seconds']:.1f} s; orient "
            f"{orient['peak'] / GIB:.2f} GiB, {orient['seconds']:.1f} s (× "
            f"{orient['seconds'] / cleanup['seconds']:.2f} the cleanup's "
            f"{cleanup['seconds']:.1f} s in the same run, "
            f"{orient['seconds'] / whole['seconds']:.0%} of the export); highest step "
            f"{highest} ({sub[highest]['peak'] / GIB:.2f} GiB); peak within the "
            f"{budget / GIB:.0f} GiB default budget: {e['tree_peak'] <= budget}.")


def main(argv=None) -> int:
    """The command line (module docstring); ``fix-winding IN OUT`` is the trimesh worker."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["fix-winding"]:
        fix_winding_main(*argv[1:3])
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.export_orient",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--asset", type=Path, help="the full-size asset (made in --work if absent)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/export_orient_bench"))
    ap.add_argument("--out", type=Path, help="default bench/results/<UTC date>/export_orient")
    ap.add_argument("--quick", action="store_true", help="the 512 grid, no whole export")
    ap.add_argument("--no-export", action="store_true", help="skip the whole export")
    ap.add_argument("--export-trace", type=Path,
                    help="read the whole export's figures from this runner trace of an earlier "
                         "run of it (python -m runner export … --trace) instead of running it")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    asset = a.asset or _asset(a.work, 512 if a.quick else 1024)
    out = a.out or REPO / "bench" / "results" / time.strftime("%Y-%m-%d", time.gmtime()) \
        / "export_orient"
    out.mkdir(parents=True, exist_ok=True)
    result = {"measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": f"{platform.platform()} ({len(__import__('os').sched_getaffinity(0))}"
                         " CPUs)", "asset": str(asset), "quick": a.quick,
              "step": step_rows(a.work, asset), "trimesh": trimesh_rows(a.work)}
    result["budget"] = _budget(result["step"]["full"]["faces"], asset)
    if a.export_trace:
        result["export"] = traced_export(a.export_trace, out)
    elif not (a.quick or a.no_export):
        result["export"] = whole_export(_wound_asset(asset, a.work), a.work)
    (out / "export_orient.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "table.md").write_text(table(result))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
