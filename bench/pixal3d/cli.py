"""``python -m bench.pixal3d``: eager vs staged vs staged+budget loading of the Pixal3D stand-in,
against the physical limit of every stage (the table of SPEC §1, reproduced on this machine).

Usage (from the repository root, see docs/benchmark.md)::

    .venv/bin/python -m bench.pixal3d                      # scale 1/64, 2 rounds
    .venv/bin/python -m bench.pixal3d --scale 0.002 --rounds 1 --hold 0.3 --out /tmp/b

What it does, in order:

1. writes the stand-in port's weights at ``--scale`` of the real sizes (real safetensors files
   under ``--work``; reused only when written by the same stand-in sources at the same scale
   and torch, ``pipeline.weights_fingerprint``, else written again; the log says which);
2. measures the cold sequential read throughput of those files (evicted from the page cache
   first, see ``bench.pixal3d.disk``);
3. runs the stages' working memory alone in one process (the "alone" run) to measure each
   stage's working memory over baseline on this machine, then the stand-in's computations with
   every model loaded up front (the "compute" run) to measure what its real-architecture models
   take over their weights in each stage; the larger of the two is the stage's working memory
   in its limit;
4. runs eager, staged and staged+budget, alternating, ``--rounds`` times, each in its own
   process under ``python -m stageload guard``, sampled from this process at ``--interval``
   (default 0.05 s = 20 Hz), the weight files evicted from the page cache before each run;
5. writes ``summary.json``, ``table.md`` and ``chart.png`` (``python -m stageload plot``) and
   the traces to ``--out`` (default ``bench/results/<UTC date>/``).

Why 1/64: the stand-in's flows are the real DiTs and compute through every weight (~2 ×
parameters × tokens FLOP a forward; the structure flow's 4,096 tokens at every step make it
the dearest), so the scale is close to the smallest whose largest loads (the flows, 42-44 MB =
40-42 MiB) stay above the 32 MiB the load check judges. At 1/8 a run's flows cost 8 times the
compute.

Exit codes: 0 done (targets met or not: they are reported, not enforced), 1 a run failed,
2 bad arguments or an output folder that exists (use ``--force`` to replace the benchmark's own
files there).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.compress_traces import compress_folder

from . import disk, report  # light: no torch
from .modes import MODE_TITLES, MODES

# Heavier modules (torch, the stand-in port, the meter) are imported in _run() after the
# arguments are checked, so a bad command line is answered at once.

REPO = Path(__file__).resolve().parents[2]
OUTPUT_FILES = ("summary.json", "table.md", "chart.png")
PROG = "python -m bench.pixal3d"
DEFAULT_SCALE = 1 / 64


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check the command line; exits 2 with a message naming the bad option."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                   help="size factor for weights and working memory (default 0.015625 = 1/64: "
                        "the flows ~42-44 MB, loads >= 32 MiB for the load target, and a run "
                        "whose flows compute through every weight still fits minutes)")
    p.add_argument("--rounds", type=int, default=2, help="eager/staged/budget rounds (default 2)")
    p.add_argument("--hold", type=float, default=1.0,
                   help="seconds each stage holds its full state so the sampler sees it (default "
                        "1)")
    p.add_argument("--interval", type=float, default=0.05,
                   help="sampling period in seconds (default 0.05 = 20 Hz; must be <= 0.1)")
    p.add_argument("--work", type=Path, default=Path("/tmp/pixal3d_bench"),
                   help="folder for the written weights (default /tmp/pixal3d_bench)")
    p.add_argument("--out", type=Path, default=None,
                   help="result folder (default bench/results/<UTC date>)")
    p.add_argument("--force", action="store_true",
                   help="replace summary.json/table.md/chart.png/traces in an existing --out")
    p.add_argument("--budget", type=int, default=None,
                   help="keep-resident budget in bytes for the budget mode "
                        "(default: the shape decoder's bytes at --scale, plus 10 %%)")
    p.add_argument("--image", type=Path, default=None,
                   help="input image (default: examples/goblin.png flattened onto white, so the "
                        "background remover runs as in SPEC §1's run)")
    p.add_argument("--steps", type=int, default=None,
                   help="sampler steps per flow stage (default: the port's own; 1 for a quick "
                        "check)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per run")
    p.add_argument("--guard-arg", action="append", default=[],
                   help="extra option for python -m stageload guard (repeatable)")
    p.add_argument("--docs", type=Path, default=None,
                   help="also refresh the generated table in this markdown file "
                        "(e.g. docs/benchmark.md)")
    args = p.parse_args(argv)
    if not 0 < args.scale <= 1:
        p.error(f"--scale must be in (0, 1], got {args.scale}; e.g. 0.125 for 1/8")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if not 0 < args.interval <= 0.1:
        p.error(f"--interval must be in (0, 0.1] seconds (>= 10 Hz), got {args.interval}")
    if args.hold < 0:
        p.error("--hold must be >= 0 seconds")
    if args.image is not None and not args.image.is_file():
        p.error(f"--image {args.image} does not exist; give a PNG or JPEG")
    if args.out is None:
        today = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
        args.out = REPO / "bench" / "results" / today
    existing = [n for n in OUTPUT_FILES if (args.out / n).exists()]
    if existing and not args.force:
        p.error(f"{args.out} already holds {', '.join(existing)}; pass --force to replace them "
                f"or choose another --out")
    return args


def flattened_example(work: Path) -> Path:
    """``examples/goblin.png`` composited onto white without alpha (RGB PNG under ``work``):
    a picture with no usable alpha makes the port run its background remover, as the real run
    of SPEC §1 did. Returns the path (rewritten each time; it is the benchmark's own file)."""
    from PIL import Image

    work.mkdir(parents=True, exist_ok=True)
    src = Image.open(REPO / "examples" / "goblin.png").convert("RGBA")
    flat = Image.new("RGBA", src.size, (255, 255, 255, 255))
    flat.alpha_composite(src)
    out = work / "goblin_on_white.png"
    flat.convert("RGB").save(out)
    return out


def guard_args(args, need: int, log: Path) -> list[str]:
    """Guard options for one run: admit only when available memory covers ``need`` bytes (the
    run's predicted peak) plus the guard's --kill-free floor, give up after 300 s, log every
    decision to ``log``, then the user's ``--guard-arg`` options."""
    return ["--need", f"{int(need)}B", "--start-timeout", "300", "--log", str(log),
            *args.guard_arg]


def _log(t0: float, text: str) -> None:
    print(f"[bench {time.time() - t0:6.1f} s] {text}", file=sys.stderr)


def main(argv=None) -> int:
    """Run the benchmark; returns the exit code (see the module docstring)."""
    args = parse_args(argv)
    try:
        return _run(args)
    except OSError as exc:  # an unwritable --work/--out, a full disk: say which, no traceback
        print(f"{PROG}: error: {exc.strerror or exc} ({exc.filename or ''}); check that "
              f"--work ({args.work}) and --out ({args.out}) are writable and have room",
              file=sys.stderr)
        return 1


def _run(args) -> int:
    from . import pipeline, sizes
    from .run import run_traced
    from .summary import build_summary

    args.out.mkdir(parents=True, exist_ok=True)
    traces = args.out / "traces"
    traces.mkdir(exist_ok=True)
    t_start = time.time()

    if args.image is None:
        args.image = flattened_example(args.work)
    _log(t_start, f"writing weights at scale {args.scale} under {args.work}")
    weights = pipeline.write_weights(args.work, args.scale)
    _log(t_start, f"weights {weights['cache']}")
    files = weights["files"]
    budget = args.budget if args.budget is not None else int(
        weights["model_bytes"]["shape_slat_decoder"] * 1.1)

    _log(t_start, "cold read of the weight files")
    cold = [disk.cold_read(files) for _ in range(2)]

    # the staged modes' (and the alone run's) working memory: the product's bounded export;
    # eager's export holds the port's to_glb's, the largest share, which the guard must admit
    working = sizes.scaled_working_bytes(args.scale, "bounded")
    need = int(sum(weights["model_bytes"].values()) * 2
               + max(sizes.scaled_working_bytes(args.scale, "port").values()))
    common = ["--scale", str(args.scale), "--hold", str(args.hold), "--weights",
              str(weights["root"]), "--image", str(args.image),
              "--load-pause", str(2 * args.interval)]
    if args.steps is not None:
        common += ["--steps", str(args.steps)]
    _log(t_start, "load time breakdown of the texture flow model")
    breakdown = pipeline.load_breakdown(weights)
    runs = []

    def one(mode: str, rnd: int) -> dict:
        trace = traces / f"{mode}_{rnd}.jsonl"
        eviction = disk.evict(files)
        (traces / f"{mode}_{rnd}.guard.jsonl").unlink(missing_ok=True)  # the guard appends
        for kept in (f"{mode}_{rnd}.jsonl.gz", f"{mode}_{rnd}.guard.jsonl.gz"):
            (traces / kept).unlink(missing_ok=True)  # an earlier run's (--force): never kept
            # beside this run's, which compress_folder would then leave uncompressed
        extra = ["--budget", str(budget)] if mode == "budget" else []
        _log(t_start, f"{mode} run {rnd} ...")
        res = run_traced(["--mode", mode, *common, *extra], trace,
                         guard_args=guard_args(args, need, traces / f"{mode}_{rnd}.guard.jsonl"),
                         interval=args.interval,
                         log_path=traces / f"{mode}_{rnd}.log", timeout=args.timeout)
        res.update(mode=mode, round=rnd, trace=str(trace.relative_to(args.out)),
                   eviction=eviction.as_dict())
        _log(t_start, f"{mode} run {rnd}: rc {res['rc']}, {res['samples']} samples, "
                      f"{res['wall_seconds']:.1f} s")
        runs.append(res)
        return res

    one("alone", 0)
    one("compute", 0)
    for rnd in range(args.rounds):
        for mode in MODES:
            one(mode, rnd)

    empty = [r for r in runs if r["events"] == 0]
    if empty:  # nothing to summarise: say which run and why instead of a traceback later
        for r in empty:
            log_file = args.out / (r["trace"][:-len(".jsonl")] + ".log")
            tail = log_file.read_text(encoding="utf-8",
                                      errors="replace").strip().splitlines()[-5:] \
                if log_file.is_file() else []
            print(f"{r['mode']} run {r['round']} exited {r['rc']} without a single event; "
                  f"its log ({log_file}) ends:\n  " + "\n  ".join(tail), file=sys.stderr)
        return 1

    _log(t_start, "summary, table and chart")
    summary = build_summary(args, weights, cold, working, budget, runs, t_start)
    summary["loading"]["breakdown"] = breakdown
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "table.md").write_text(report.table_markdown(summary))
    plot = subprocess.run(chart_command(args.out, runs, force=args.force), cwd=REPO,
                          capture_output=True, text=True)
    if plot.returncode != 0:
        _log(t_start, f"chart failed: {plot.stderr.strip()}")
    keep_compressed(args.out, traces, summary)
    if args.docs is not None:
        report.refresh_docs(args.docs, summary)
    print((args.out / "table.md").read_text())
    failed = [r for r in runs if r["rc"] != 0]
    return 1 if failed or plot.returncode != 0 else 0


def keep_compressed(out: Path, traces: Path, summary: dict) -> None:
    """Compress the runs' traces once every figure is taken (``bench.compress_traces``) and
    rewrite ``summary.json`` with their new names."""
    moved = compress_folder(traces)
    for run in summary.get("runs", []):
        old = str(Path(run.get("trace", "")).relative_to("traces")) if run.get("trace") else None
        if old in moved:
            run["trace"] = str(Path("traces") / moved[old])
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def chart_command(out: Path, runs: list[dict], *, force: bool) -> list[str]:
    """``python -m stageload plot`` over the first round of the three modes -> ``chart.png``
    (``--force`` only when the user asked to replace earlier results)."""
    first = [r for r in runs if r["mode"] in MODES and r["round"] == 0]
    cmd = [sys.executable, "-m", "stageload", "plot", *[str(out / r["trace"]) for r in first],
           "-o", str(out / "chart.png"), "--title",
           "Footprint over time: eager, staged, staged+budget (round 0)"]
    for r in first:
        cmd += ["--label", MODE_TITLES[r["mode"]]]
    return cmd + (["--force"] if force else [])




if __name__ == "__main__":
    sys.exit(main())
