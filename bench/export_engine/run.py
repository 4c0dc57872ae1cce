"""One export, the way a user runs it: ``python -m runner export ASSET.npz -o OUT.glb
--decimation-target N --texture-size PX [--export-budget SIZE] --trace TRACE`` in a process of
its own, measured from outside twice:

- the runner's own trace: it samples its export process from outside (``stageload.meter``,
  10 Hz plus the kernel high-water mark); the export stage's peak and each sub-step's peak and
  seconds are read with ``stageload.summary.summarize`` — the sub-steps being ``stage`` events
  with ``"parent": "export"``, as the product writes them;
- this process's own ``stageload.meter.Sampler`` on the runner's whole process tree
  (supervisor + export process), every ``INTERVAL`` s;
- how the decimation ran (the ``decimate`` sub-step's ``method``: one call, or in pieces).

A figure that stops being measured fails the run (``MeasurementMissing``): an export stage
without samples, a sub-step of ``SUBSTEPS`` missing or without seconds.

``via="worker"`` runs ``python -m bench.export_engine.worker`` instead (the same engine in a
process of its own, without the runner's supervisor), for when ``runner export`` is not
available: its events go to a trace written here, with this process's ``Sampler`` samples of
the worker (10 Hz plus the kernel high-water mark, reset after each read) — the trace then has
the runner's format and is read the same way. Each result says which way it was measured.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stageload.meter import Sampler
from stageload.trace import TraceWriter

REPO = Path(__file__).resolve().parents[2]
#: the engine's sub-steps, each expected in every export's trace.
SUBSTEPS = ("load", "cleanup", "decimate", "uv_unwrap", "bake", "seams", "write")
#: seconds between this process's own samples of the runner's tree.
INTERVAL = 0.1


class MeasurementMissing(RuntimeError):
    """A figure the benchmark reports was not measured in this run."""


def command(asset: Path, glb: Path, trace: Path, *, target: int, texture: int,
            budget: str | None = None, cores: int | None = None) -> list[str]:
    """The runner command for one export (``cores``: pin it to that many CPUs with taskset)."""
    cmd = [sys.executable, "-m", "runner", "export", str(asset), "-o", str(glb),
           "--decimation-target", str(target), "--texture-size", str(texture),
           "--trace", str(trace)]
    if budget is not None:
        cmd += ["--export-budget", budget]
    if cores is not None:
        cmd = ["taskset", "-c", ",".join(str(c) for c in range(cores)), *cmd]
    return cmd


def thread_env(cores: int | None) -> dict:
    """The environment of a run: with ``cores`` set, the thread pools of BLAS/OpenMP limited to
    it too (a pinned process that spawns more threads than CPUs only time-slices them)."""
    env = dict(os.environ)
    if cores is not None:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(cores)
    return env


def export_figures(trace: Path) -> dict:
    """The export stage's figures from a runner trace: ``{"peak", "peak_hwm", "seconds",
    "samples", "substeps": {name: {"peak", "seconds"}}, "events"}`` (bytes, seconds).

    Raises ``MeasurementMissing`` for an export stage or sub-step not measured."""
    from stageload.summary import summarize
    from stageload.trace import iter_lines

    summary = summarize(iter_lines(trace), source=str(trace))
    stages = [s for s in summary["stages"] if s["stage"] == "export"]
    if not stages:
        raise MeasurementMissing(f"{trace}: no export stage")
    st = stages[0]
    if not st.get("samples") or st.get("peak") is None:
        raise MeasurementMissing(f"{trace}: the export stage has no memory samples")
    subs = {s["stage"]: s for s in st["substeps"]}
    missing = [n for n in SUBSTEPS if n not in subs or subs[n].get("seconds") is None]
    if missing:
        raise MeasurementMissing(f"{trace}: sub-steps not measured: {', '.join(missing)}")
    return {"peak": st["peak"], "peak_hwm": st.get("peak_hwm"), "seconds": st["seconds"],
            "samples": st["samples"], "decimation": _decimation(trace),
            "substeps": {n: {"peak": subs[n]["peak"], "seconds": subs[n]["seconds"]}
                         for n in subs}}


def _decimation(trace: Path) -> dict:
    """How the export decimated: the ``decimate`` sub-step's ``stage`` event's ``method`` and
    ``pieces`` (a trace of before they were written: ``method`` None)."""
    from stageload.trace import iter_lines

    for line in iter_lines(trace):
        if b'"decimate"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:  # a damaged line says nothing about the decimation
            continue
        if isinstance(event, dict) and event.get("event") == "stage" \
                and event.get("parent") == "export" and event.get("stage") == "decimate":
            return {"method": event.get("method"), "pieces": event.get("pieces", 1)}
    return {"method": None, "pieces": None}


def _worker_command(asset: Path, glb: Path, *, target: int, texture: int,
                    budget: str | None, cores: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "bench.export_engine.worker", str(asset), str(glb),
           "--target", str(target), "--texture", str(texture)]
    if budget is not None:
        cmd += ["--budget", budget]
    if cores is not None:
        cmd = ["taskset", "-c", ",".join(str(c) for c in range(cores)), *cmd]
    return cmd


def _run_worker(cmd: list[str], trace: Path, log, cores: int | None, timeout: float,
                samples: list[int]) -> int:
    """The worker, its events into ``trace`` with this process's samples of it."""
    writer = TraceWriter(trace)
    proc = subprocess.Popen(cmd, cwd=REPO, env=thread_env(cores), stdout=subprocess.PIPE,
                            stderr=log, text=True, bufsize=1)
    sampler = None

    def sink(sample: dict) -> None:
        samples.append(sample.get("footprint") or 0)
        writer(sample)

    try:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "bench_hello":
                sampler = Sampler(int(event["pid"]), sink, interval=INTERVAL, tree=True)
                sampler.start()
                continue
            writer(event)
        return proc.wait(timeout=timeout)
    finally:
        if sampler is not None:
            sampler.stop()
        if proc.poll() is None:
            proc.kill()
        writer.close()


def run_export(asset: Path, work: Path, name: str, *, target: int, texture: int,
               budget: str | None = None, cores: int | None = None,
               timeout: float = 3600, via: str = "runner") -> dict:
    """Run one export (see the module docstring); returns its figures with ``name``,
    ``command``, ``rc``, ``wall``, ``tree_peak`` (this process's sampler), ``glb`` (path, kept
    for the quality check; the caller deletes it) and the runner trace's ``export`` figures.

    Raises ``RuntimeError`` when the runner fails, ``MeasurementMissing`` (above)."""
    glb, trace = work / f"{name}.glb", work / f"{name}.trace.jsonl"
    glb.unlink(missing_ok=True)
    trace.unlink(missing_ok=True)
    samples: list[int] = []
    start = time.time()
    if via == "worker":
        cmd = _worker_command(asset, glb, target=target, texture=texture, budget=budget,
                              cores=cores)
        with open(work / f"{name}.log", "w", encoding="utf-8") as log:
            rc = _run_worker(cmd, trace, log, cores, timeout, samples)
        return _result(name, cmd, rc, time.time() - start, samples, glb, trace, work,
                       target=target, texture=texture, budget=budget, cores=cores, via=via)
    cmd = command(asset, glb, trace, target=target, texture=texture, budget=budget, cores=cores)
    with open(work / f"{name}.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=thread_env(cores), stdout=subprocess.DEVNULL,
                                stderr=log)
        sampler = Sampler(proc.pid, lambda s: samples.append(s.get("footprint") or 0),
                          interval=INTERVAL, tree=True, reset_hwm=False,
                          tree_refresh=0.2)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        finally:
            sampler.stop()
            if proc.poll() is None:
                proc.kill()
    return _result(name, cmd, rc, time.time() - start, samples, glb, trace, work,
                   target=target, texture=texture, budget=budget, cores=cores, via=via)


def _result(name, cmd, rc, wall, samples, glb, trace, work, **levers) -> dict:
    if rc != 0:  # a refused or failed export is a result (its target missed), not a crash
        log = (work / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        last = [ln for ln in log.splitlines() if ln.strip()][-3:]
        return {"name": name, "command": cmd, "rc": rc, "wall": wall, "failed": " / ".join(last),
                "tree_peak": max(samples) if samples else None, "glb": str(glb), **levers,
                "loadavg": os.getloadavg()[0], "export": None}
    if not samples:
        raise MeasurementMissing(f"{name}: this process's sampler took no samples")
    return {"name": name, "command": cmd, "rc": rc, "wall": wall, "tree_peak": max(samples),
            "glb": str(glb), **levers, "loadavg": os.getloadavg()[0],
            "export": export_figures(trace)}
