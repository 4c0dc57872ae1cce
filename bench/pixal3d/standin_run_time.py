"""``python -m bench.pixal3d.standin_run_time REF [REF ...]``: how long one stand-in Pixal3D run
at test sizes takes with the stand-in port (and stageload) of each git ``REF`` — e.g. ``main``
against a branch that changes the stand-in — to tell whether a change makes the test suite's
stand-in runs slower.

Each ref's packages and ``tests/data/images`` (``PATHS``; those a ref lacks are skipped) are
extracted with ``git archive`` into a scratch folder; then, ``--repeats`` times in turn, each ref
runs in a fresh process of this interpreter: ``make_weights(scale=1e-4)`` and one
``Pixal3DRun.generate`` of ``tests/data/images/character_1.png`` (CPU, seed 7, ``--fov 0.6``,
512² texture), single-threaded (``torch.set_num_threads(1)``) so the figure is CPU work, not the
machine's load. Per run: the run's CPU seconds (``time.process_time``), its wall seconds, the
CPU seconds of each pipeline step (the pipeline's methods, the shape decoder's ``upsample``, the
port's ``asset_to_glb``) and the decoded mesh's faces. Writes ``OUT/standin_run_time.json``:
every run, each ref's median, and each ref's median over the first ref's (the ratios compare
runs taken in turn on one machine).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What a stand-in run imports (the tree's top-level packages) and reads.
PATHS = ("standin", "stageload", "runner", "meshfacts", "bounded_export", "tests/data/images")
STEPS = ("preprocess_image", "get_proj_cond_ss", "sample_sparse_structure", "get_proj_cond_shape",
         "sample_shape_slat", "sample_tex_slat", "decode_shape_slat", "decode_tex_slat")

#: The child: one run from the source tree in argv[1]; prints one JSON line.
CHILD = r'''
import json, os, sys, tempfile, time
from pathlib import Path
src = Path(sys.argv[1]); os.chdir(src); sys.path.insert(0, str(src))
import torch
torch.set_num_threads(1)
from standin import PORT_DIR, make_weights
scratch = Path(tempfile.mkdtemp(dir=sys.argv[2]))
os.environ.update(make_weights(scratch / "weights", scale=1e-4).env)
import stageload.pixal3d as sp
steps = {}
def timed(owner, name):
    inner = getattr(owner, name)
    def call(*args, **kwargs):
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            steps[name] = steps.get(name, 0.0) + time.process_time() - start
    setattr(owner, name, call)
settings = dict(load="eager", working_memory="port")
if hasattr(sp, "RunOptions"):  # the run's options as one object (since d7d1787)
    run = sp.Pixal3DRun(PORT_DIR, sp.RunOptions(seed=7, texture_size=512, **settings),
                        device="cpu")
    per_image = {}
else:
    run = sp.Pixal3DRun(PORT_DIR, device="cpu", **settings)
    per_image = dict(seed=7, texture_size=512)
for name in json.loads(sys.argv[3]):
    timed(run.pipeline, name)
timed(run.pipeline.models["shape_slat_decoder"], "upsample")
timed(sys.modules["generate_mps"], "asset_to_glb")
cpu, wall = time.process_time(), time.time()
result = run.generate(src / "tests/data/images/character_1.png", scratch / "out.glb", fov=0.6,
                      **per_image)
cpu, wall = time.process_time() - cpu, time.time() - wall
run.close()
print(json.dumps({"cpu_seconds": cpu, "wall_seconds": wall, "faces": result["faces"],
                  "steps": steps}))
'''


def extract(ref: str, into: Path) -> Path:
    """``git archive`` of ``PATHS`` at ``ref`` into ``into/ref``. Raises CalledProcessError for
    an unknown ref."""
    folder = into / ref.replace("/", "_")
    folder.mkdir(parents=True)
    listed = subprocess.run(["git", "ls-tree", "--name-only", ref, *PATHS], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split()
    paths = [p for p in PATHS if p in listed or p.split("/")[0] in listed]
    archive = subprocess.run(["git", "archive", ref, *paths], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def one_run(folder: Path, scratch: Path) -> dict:
    """One child run of the tree at ``folder``. Raises RuntimeError with the child's stderr
    when it fails."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(scratch),
                          json.dumps(STEPS)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the run of {folder} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("refs", nargs="+", help="git refs; the first is the baseline")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "standin")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    with tempfile.TemporaryDirectory() as scratch:
        folders = {ref: extract(ref, Path(scratch) / "src") for ref in args.refs}
        runs = {ref: [] for ref in args.refs}
        for _ in range(args.repeats):
            for ref, folder in folders.items():
                runs[ref].append(one_run(folder, Path(scratch)))
    median = {ref: statistics.median(r["cpu_seconds"] for r in rs) for ref, rs in runs.items()}
    base = median[args.refs[0]]
    report = {"refs": args.refs, "repeats": args.repeats, "runs": runs,
              "median_cpu_seconds": median,
              "ratio_to_first": {ref: m / base for ref, m in median.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "standin_run_time.json"
    path.write_text(json.dumps(report, indent=1))
    print(json.dumps({"median_cpu_seconds": median, "ratio_to_first": report["ratio_to_first"],
                      "file": str(path)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
