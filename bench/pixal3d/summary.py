"""The benchmark's ``summary.json``: everything the table and the docs quote, computed from the
traces of one ``python -m bench.pixal3d`` run (bytes, seconds), and the machine it ran on."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time

from stageload.trace import iter_lines

from . import analysis, disk, report, sizes
from .modes import EXPORT_ENGINE, MODE_NOTES, MODES, WORKING_MEMORY


def _installed(runs: list[list[dict]]) -> list[dict]:
    """Per run of a mode, what its ``bench_done`` says the working memory was: ``{"mode",
    "installed"}`` (the parts of ``--working-memory lean`` in place)."""
    out = []
    for records in runs:
        done = next((e for e in records if e.get("event") == "bench_done"), {})
        out.append({"working_memory": done.get("working_memory"),
                    "installed": done.get("working_memory_installed")})
    return out


def machine() -> dict:
    """What the numbers were measured on."""
    import psutil
    import torch

    return {"platform": platform.platform(), "python": platform.python_version(),
            "loadavg_at_summary": list(os.getloadavg()),
            "torch": torch.__version__, "cpus": os.cpu_count(),
            "memory_total": psutil.virtual_memory().total,
            "drop_caches_writable": disk.drop_caches_allowed()}


def build_summary(args, weights, cold, working, budget, runs, t_start) -> dict:
    """Everything the table and the docs quote, from the traces (bytes, seconds)."""
    def records(run):  # every line as written (plain or compressed), no reordering
        return [json.loads(line) for line in iter_lines(args.out / run["trace"])
                if line.strip()]

    for run in runs:
        run["sample_hz"] = analysis.sample_hz(records(run))
    alone_run = next(r for r in runs if r["mode"] == "alone")
    alone = analysis.working_alone(records(alone_run))
    runtime = alone.get("setup", {}).get("baseline")
    compute_run = next((r for r in runs if r["mode"] == "compute"), None)
    compute = {} if compute_run is None else analysis.compute_working(records(compute_run))
    per_mode = {m: [r for r in runs if r["mode"] == m] for m in MODES}
    data = {m: [records(r) for r in per_mode[m]] for m in MODES}
    peaks = {m: [analysis.stage_peaks(recs) for recs in data[m]] for m in MODES}
    plan = weights["plan"]
    model_bytes = weights["model_bytes"]

    stages = []
    for stage in plan:
        listed = plan[stage]
        wbytes = sum(model_bytes[m] for m in listed)
        share = (alone.get(stage) or {}).get("working")
        computed = (compute.get(stage) or {}).get("working")
        # A stage's working memory: the SPEC §1 share measured alone, or the compute run's rise
        # where larger — the stand-in's real-architecture models take their own transients
        # (attention slices, feed-forward ranges, sparse convs), which do not scale with the
        # share, and the share is allocated after them (pipeline.run), so they do not add.
        work = None if share is None else max(share, computed or 0)
        # The runtime at a stage: the alone process's baseline, or where larger the compute
        # run's start less its weights — the interpreter as running the earlier stages grew it
        # (kernels and thread pools set up on first use, modules imported, pages the allocator
        # keeps), which a staged run carries as well; the compute run never releases a model,
        # so a released model's residue in a staged run is not in it.
        grown = (compute.get(stage) or {}).get("runtime")
        at = None if runtime is None else max(runtime, grown or 0)
        limit = None if at is None or work is None else at + wbytes + work
        row = {"stage": stage, "plan_models": listed, "plan_weight_bytes": wbytes,
               "working_alone": share, "working_compute": computed, "working": work,
               "working_target": working.get(stage, 0), "runtime_compute": grown,
               "runtime": at,
               "limit": limit, "limit_excl_runtime": None if work is None else wbytes + work}
        for m in MODES:
            row[m] = analysis.span([(p.get(stage) or {}).get("peak") for p in peaks[m]])
            row[f"{m}_release_seconds"] = analysis.span(
                [(p.get(stage) or {}).get("release_seconds") for p in peaks[m]])
        row["staged_over_limit"] = (row["staged"]["max"] / limit
                                    if limit and row["staged"]["max"] else None)
        row["budget_over_limit"] = (row["budget"]["max"] / limit
                                    if limit and row["budget"]["max"] else None)
        # What the staged peak holds beyond the limit, next to the largest weight of the stage
        # (a second copy of that weight would show as an excess at least this large).
        row["excess_over_limit"] = (None if limit is None or row["staged"]["max"] is None
                                    else row["staged"]["max"] - limit)
        row["largest_weight"] = max((model_bytes[m] for m in listed), default=0)
        spec = sizes.SPEC_TABLE.get(stage)
        row["spec"] = None if spec is None else {"eager": spec[0], "staged": list(spec[1])}
        stages.append(row)

    resident = {m: [analysis.resident_weights(recs) for recs in data[m]] for m in ("staged",
                                                                                   "budget")}
    for row in stages:
        listed_sum = row["plan_weight_bytes"]
        for m in ("staged", "budget"):
            vals = [(r["per_stage"].get(row["stage"]) or {}).get("max_bytes") for r in resident[m]]
            row[f"{m}_resident_weight_bytes"] = analysis.span(vals)
        row["staged_resident_within_plan"] = all(
            v is None or v <= listed_sum for v in row["staged_resident_weight_bytes"]["runs"])

    overall = {m: analysis.span([analysis.overall_peak(recs) for recs in data[m]]) for m in MODES}
    no_export = {m: analysis.span([max([(p.get(s) or {}).get("peak") or 0 for s in plan
                                        if s != "export"] or [0]) for p in peaks[m]])
                 for m in MODES}
    loading = {m: [analysis.loads(recs) for recs in data[m]] for m in MODES}
    cold_tp = analysis.span([c["throughput"] for c in cold])
    summary = {
        "schema": 1,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {"scale": args.scale, "rounds": args.rounds, "hold": args.hold,
                   "interval": args.interval, "budget": budget, "image": str(args.image),
                   "steps": args.steps if args.steps is not None else "the port's own",
                   "weights": {k: weights[k] for k in ("fingerprint", "cache") if k in weights},
                   "modes": list(MODES), "wall_seconds": time.time() - t_start,
                   "mode_runs": {m: {"working_memory": WORKING_MEMORY[m],
                                     "export_engine": EXPORT_ENGINE[m], "note": MODE_NOTES[m],
                                     "installed": _installed(data[m])} for m in MODES}},
        "sizes": {"real_weight_bytes": sizes.REAL_WEIGHT_BYTES, "model_bytes": model_bytes,
                  "plan": plan, "working_real": sizes.real_working_bytes("bounded"),
                  "working_real_eager": sizes.real_working_bytes("port"),
                  "working_scaled": working, "totals": sizes.check_totals()},
        "runtime_baseline": runtime,
        "alone": alone,
        "compute": compute,
        "stages": stages,
        "overall": {"peak": overall, "peak_excluding_export": no_export},
        "loading": {"cold_read": cold, "cold_throughput": cold_tp,
                    **{m: loading[m] for m in MODES}},
        "runs": [{k: v for k,
                  v in r.items() if k != "command"} | {"command": " ".join(r["command"])}
                 for r in runs],
    }
    summary["load_transients"] = {
        m: [dict(x, round=i) for i, recs in enumerate(data[m])
            for x in analysis.load_transients(recs, args.interval)] for m in MODES}
    summary["double_loads"] = {m: [d for r in resident[m] for d in r["double_loads"]]
                               for m in resident}
    # What stageload.pixal3d.build.direct.prepare_meta_runtime() paid in each process (the one-time
    # torch._dynamo import a meta-device initialiser triggers): the alone process calls it to
    # set up the same runtime as a staged run's setup; eager runs never call it.
    def runtime_paid(recs):
        found = [e for e in recs if e.get("event") == "bench_runtime"]
        return {k: found[0].get(k) for k in ("seconds", "modules", "rss_bytes")} if found else None
    summary["meta_runtime"] = {"alone": runtime_paid(records(alone_run)),
                               "compute": (None if compute_run is None
                                           else runtime_paid(records(compute_run))),
                               **{m: [runtime_paid(recs) for recs in data[m]] for m in MODES}}
    summary["targets"] = report.targets(summary)
    return summary
