"""The real runner on the shared images: exit 0, a GLB, and an event stream that keeps the
protocol (runner/PROTOCOL.md). The GLB's shape and texture are the built-in backend's tests."""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stageload.summary import summarize


def check_stream(fin, image: Path, out: Path) -> None:
    """Protocol checks for one successful single-image run."""
    events = fin.events
    assert fin.returncode == 0, fin.stderr[-3000:]
    assert "Traceback" not in fin.stdout
    hello, result = events[0], events[-1]
    assert hello["event"] == "hello" and result["event"] == "result"
    assert [e for e in events if e["event"] in ("result", "error")] == [result]
    assert hello["image"] == str(image) and hello["output"] == str(out)
    assert result["output"] == str(out) and result["trace"] == str(out.with_suffix(".trace.jsonl"))
    assert all(e["v"] == 1 and isinstance(e["t"], float) for e in events)
    # stages: announced in the planned order, each followed by its ready
    stages = [e for e in events if e["event"] == "stage"]
    assert ([e["stage"] for e in stages] == hello["stages"]
            == ["matte", "shape", "texture", "export"])
    assert [e["index"] for e in stages] == list(range(len(stages)))
    names = [e["event"] for e in events]
    for s in stages:
        i = events.index(s)
        assert events[i + 1]["event"] in ("ready", "memory"), names[i:i + 3]
    # times: relayed worker events keep the worker's stamp, so lines interleave with memory
    # events by a few ms; only the ends are ordered
    assert all(hello["t"] <= e["t"] <= result["t"] for e in events)
    # memory: at least 2 per second of the run, with the documented fields
    memory = [e for e in events if e["event"] == "memory"]
    run_seconds = result["t"] - hello["t"]
    assert len(memory) >= 2 * run_seconds - 1, (len(memory), run_seconds)
    for m in memory:
        assert {"footprint", "peak", "stage", "stage_peak", "swap", "available", "total"} <= set(m)
        assert m["footprint"] > 0 and m["peak"] >= m["footprint"]
    gaps = [b["t"] - a["t"] for a, b in zip(memory, memory[1:], strict=False)]
    assert max(gaps) < 1.0, max(gaps)
    assert result["peak"] == memory[-1]["peak"] or result["peak"] >= memory[-1]["peak"]
    # the GLB is there (glTF binary magic), no partial file is left
    assert out.read_bytes()[:4] == b"glTF"
    assert not list(out.parent.glob(".*partial*"))
    # the trace: every stdout line is in it, the result's summary is the trace's summary
    trace = Path(result["trace"])
    lines = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["event"] == "hello" and lines[-1]["event"] == "result"
    samples = [e for e in lines if e["event"] == "sample"]
    assert len(samples) >= 5 * (samples[-1]["t"] - samples[0]["t"])  # ~10 Hz, machine shared
    stdout_in_trace = [e for e in lines if e.get("v") == 1]
    assert [e["event"] for e in stdout_in_trace] == names
    again = json.loads(json.dumps(summarize(lines[:-1]), default=str))
    assert again == result["summary"]
    assert result["summary"]["peak"]["bytes"] == max(
        max(s["footprint"], s["hwm"] or 0) for s in samples)


@pytest.mark.slow
def test_every_shared_image(shared_images, tmp_path, rt):
    outs = {img: tmp_path / f"{img.stem}.glb" for img in shared_images}
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(shared_images, pool.map(
            lambda img: rt.run([img, "-o", outs[img]]), shared_images), strict=True))
    for img, fin in runs.items():
        check_stream(fin, img, outs[img])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_supervisor_never_maps_torch(shared_images, tmp_path, rt):
    """While a built-in job runs, libtorch is mapped into neither the supervisor nor the
    worker (the strongest form of "torch is imported only by backends that need it"; the
    built-in backend runs in Blender's own Python, which has no torch). The worker's maps do
    hold the libraries it really loads (SciPy's), so the reading can tell."""
    image = shared_images[0]
    live = rt.Live([image, "-o", tmp_path / "a.glb"])
    try:
        live.wait_for("stage")
        worker = next(e for e in live.events if e["event"] == "guard" and e["state"] == "started")
        sup_maps = Path(f"/proc/{live.proc.pid}/maps").read_text()
        wrk_maps = Path(f"/proc/{worker['readings']['pid']}/maps").read_text()
        assert "/scipy" in wrk_maps  # the reading sees what the worker loads
        assert "libtorch" not in sup_maps and "/torch/" not in sup_maps
        assert "libtorch" not in wrk_maps and "/torch/" not in wrk_maps
        fin = live.finish()
    finally:
        live.kill()
    assert fin.returncode == 0
