"""Prefetch: the next stage's files are read ahead after ``ready``, by a real thread, into the
real page cache; stopped by a stage change, cancel and close; never below the memory floor;
no thread left behind. Residency is read with ``fincore`` (util-linux, ``mincore(2)``) where
it exists; the file's pages are evicted first with ``POSIX_FADV_DONTNEED``."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from stageload import StagedModels
from stageload.errors import PlanError, UnknownModelError
from stageload.loading import load_module
from stageload.prefetch import Prefetcher, default_method

MiB = 1 << 20


def _write(path, mib: int) -> None:
    n = mib * MiB // 4
    save_file({"weight": torch.arange(n, dtype=torch.float32).reshape(-1, 256)}, str(path))


def _evict(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _resident(path):
    tool = shutil.which("fincore")
    if tool is None:
        return None
    out = subprocess.run([tool, "--bytes", "--noheadings", "--raw", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


class _Net(nn.Module):
    def __init__(self, rows: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, 256))


def _models(tmp_path, sizes, events, **kw):
    """Stages a → b → c; model x in a, y in b, z in c; files of ``sizes`` MiB."""
    files = {}
    loaders = {}
    for name, mib in zip("xyz", sizes, strict=True):
        path = tmp_path / f"{name}.safetensors"
        _write(path, mib)
        _evict(path)
        files[name] = path
        rows = mib * MiB // 4 // 256
        loaders[name] = (lambda p=path, r=rows: load_module(lambda: _Net(r), p))
    plan = {"a": ["x"], "b": ["y"], "c": ["z"]}
    return StagedModels(loaders, plan, events=events.append, files=files, **kw), files


def _enter(models, stage):
    """Enter ``stage`` and load what it lists: its prefetch starts after its own loads."""
    models.enter(stage)
    for name in models.stages[stage]:
        models[name]


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "stageload-prefetch"]


def _of(events, kind):
    return [e for e in events if e["event"] == kind]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise to evict")
@pytest.mark.parametrize("method", ["advise", "read"])
def test_prefetch_reads_the_next_stage_files_after_ready(tmp_path, method):
    events = []
    models, files = _models(tmp_path, (2, 8, 2), events,
                            prefetch=Prefetcher(method=method, floor=0))
    assert _resident(files["y"]) in (None, 0)
    models.enter("a")
    assert not models.prefetcher.running and not _of(events, "prefetch")  # x not loaded yet
    models["x"]
    assert models.prefetcher.wait(30)
    kinds = [e["event"] for e in events]
    assert kinds == ["stage", "ready", "load", "prefetch"]
    pre = _of(events, "prefetch")[0]
    size = files["y"].stat().st_size
    assert (pre["model"], pre["stage"], pre["for_stage"], pre["state"]) == ("y", "a", "b", "done")
    assert pre["bytes"] == pre["file_bytes"] == size and pre["reason"] is None
    assert pre["method"] == method and pre["seconds"] >= 0
    if _resident(files["y"]) is not None:  # advise is asynchronous: wait for the reads
        deadline = time.monotonic() + 20
        while _resident(files["y"]) < size - 8192 and time.monotonic() < deadline:
            time.sleep(0.05)  # (the last, partial page may not be read ahead)
        assert _resident(files["y"]) >= size - 8192
        assert _resident(files["z"]) == 0  # only the next stage's model
    _enter(models, "b")
    load = [e for e in _of(events, "load") if e["model"] == "y"][0]
    assert load["prefetched"] is True
    models.close()
    assert not _prefetch_threads()


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or shutil.which("fincore") is None,
                    reason="needs posix_fadvise to evict and fincore to read residency")
def test_default_method_leaves_every_byte_resident_when_done(tmp_path):
    # posix_fadvise(WILLNEED) only asks the kernel, which was measured to leave most of a
    # 1 GiB file unread (bench/pixal3d/loadspeed.py); the default must not depend on it: when
    # its event says done, the whole file is in the page cache, with no waiting.
    assert default_method() == "read"
    path = tmp_path / "m.safetensors"
    _write(path, 48)
    _evict(path)
    assert _resident(path) == 0
    events = []
    pre = Prefetcher(events.append, floor=0)
    pre.start("a", "b", [("m", [path])])
    assert pre.wait(60)
    (event,) = events
    assert (event["state"], event["method"]) == ("done", "read")
    assert event["bytes"] == event["file_bytes"] == path.stat().st_size
    assert _resident(path) >= path.stat().st_size - 4096  # (a last, partial page may be left)
    assert not _prefetch_threads()


def _slow(tmp_path, events, **kw):
    """A prefetcher that is still reading when the test acts: 64 KiB chunks, each waiting
    20 ms in the memory reading; ``started`` is set by its first reading."""
    started = threading.Event()

    def available():
        started.set()
        time.sleep(0.02)
        return 1 << 50

    pre = Prefetcher(floor=0, chunk=64 << 10, available=available, method=default_method())
    models, files = _models(tmp_path, (1, 16, 1), events, prefetch=pre, **kw)
    return models, files, started


@pytest.mark.parametrize("how", ["stage change", "cancel", "close"])
def test_prefetch_stops_at_once(tmp_path, how):
    events = []
    models, files, started = _slow(tmp_path, events)
    _enter(models, "a")
    assert started.wait(10)
    reading = _prefetch_threads()
    assert len(reading) == 1
    t0 = time.perf_counter()
    if how == "stage change":
        models.enter("b")  # (b's own prefetch waits for b's loads: none here)
    elif how == "cancel":
        models.cancel_prefetch()
    else:
        models.close()
    stopped_in = time.perf_counter() - t0
    assert not reading[0].is_alive()
    pre = [e for e in _of(events, "prefetch") if e["model"] == "y"]
    assert len(pre) == 1
    assert pre[0]["state"] in ("stopped", "skipped") and pre[0]["reason"] == how
    assert pre[0]["bytes"] < pre[0]["file_bytes"] == files["y"].stat().st_size
    assert stopped_in < 2.0  # one 64 KiB chunk, not the 16 MiB file (≈ 5 s at this pace)
    if how == "stage change":  # the stop comes before the new stage's events
        kinds = [e["event"] for e in events]
        assert kinds[3:] == ["prefetch", "stage", "release", "ready"], kinds
        assert not _prefetch_threads()
    models.close()
    assert not _prefetch_threads()


def test_models_a_stop_came_before_are_reported_skipped(tmp_path):
    # stage b needs y (16 MiB, read slowly) and w: stopped while reading y, w never started;
    # each gets its event, w "skipped" with the stop's reason and its files' size
    events = []
    started = threading.Event()

    def available():
        started.set()
        time.sleep(0.02)
        return 1 << 50

    files = {}
    for name, mib in (("y", 16), ("w", 1)):
        files[name] = tmp_path / f"{name}.safetensors"
        _write(files[name], mib)
    models = StagedModels({n: (lambda: nn.Linear(2, 2)) for n in "xyw"},
                          {"a": ["x"], "b": ["y", "w"]}, events=events.append, files=files,
                          prefetch=Prefetcher(floor=0, chunk=64 << 10, available=available))
    _enter(models, "a")
    assert started.wait(10)
    models.enter("b")
    pre = {e["model"]: e for e in _of(events, "prefetch")}
    assert sorted(pre) == ["w", "y"]
    assert (pre["y"]["state"], pre["y"]["reason"]) == ("stopped", "stage change")
    assert (pre["w"]["state"], pre["w"]["reason"], pre["w"]["bytes"]) == (
        "skipped", "stage change", 0)
    assert pre["w"]["file_bytes"] == files["w"].stat().st_size
    models.close()
    assert not _prefetch_threads()


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise to evict")
def test_prefetch_never_runs_below_the_floor_and_runs_once_it_is_lowered(tmp_path):
    events = []
    models, files = _models(tmp_path, (1, 4, 1), events)
    size = files["y"].stat().st_size
    available = 100 * MiB
    # floor + the file's bytes above what is available: skipped, nothing asked
    models.prefetcher.available = lambda: available
    models.prefetcher.floor = available - size + 1
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    pre = _of(events, "prefetch")
    assert [(p["model"], p["state"], p["bytes"]) for p in pre] == [("y", "skipped", 0)]
    reason = pre[0]["reason"]
    assert "available memory" in reason and str(models.prefetcher.floor) in reason
    assert _resident(files["y"]) in (None, 0)
    # the threshold lowered to exactly fit: done
    models.prefetcher.floor = available - size
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    assert _of(events, "prefetch")[-1]["state"] == "done"
    # available memory falling while reading: stopped part-way
    readings = iter([available] * 2 + [0] * 1000)
    models.prefetcher.available = lambda: next(readings)
    models.prefetcher.chunk = MiB
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    last = _of(events, "prefetch")[-1]
    assert last["state"] == "stopped" and last["bytes"] == 2 * MiB, (last["reason"], last["bytes"])
    # unknown available memory: skipped
    models.prefetcher.available = lambda: None
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    assert _of(events, "prefetch")[-1]["reason"] == "available memory is unknown"
    models.close()
    assert not _prefetch_threads()


def test_no_prefetch_without_files_or_when_off(tmp_path):
    events = []
    models, _ = _models(tmp_path, (1, 1, 1), events, prefetch=False)
    models.enter("a")
    assert models.prefetcher is None and not _prefetch_threads()
    assert not _of(events, "prefetch")
    plain = StagedModels({"x": lambda: nn.Linear(2, 2)}, {"a": ["x"], "b": ["x"]})
    assert plain.prefetcher is None


def test_models_without_files_are_reported_skipped(tmp_path):
    events = []
    path = tmp_path / "y.safetensors"
    _write(path, 1)
    models = StagedModels({"x": lambda: nn.Linear(2, 2), "y": lambda: nn.Linear(2, 2),
                           "w": lambda: nn.Linear(2, 2)}, {"a": ["x"], "b": ["y", "w"]},
                          events=events.append, files={"y": path}, prefetch_floor=0)
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    states = {e["model"]: (e["state"], e["reason"]) for e in _of(events, "prefetch")}
    assert states["w"] == ("skipped", "no files known for this model")
    assert states["y"][0] in ("done", "skipped")  # skipped only if this machine is short of memory
    models.close()


def test_files_are_validated(tmp_path):
    with pytest.raises(UnknownModelError, match="nope"):
        StagedModels({"x": lambda: nn.Linear(2, 2)}, {"a": ["x"]}, files={"nope": "f"})
    with pytest.raises(PlanError, match="path"):
        StagedModels({"x": lambda: nn.Linear(2, 2)}, {"a": ["x"]}, files={"x": 3})
    with pytest.raises(ValueError, match="method"):
        Prefetcher(method="psychic")
    with pytest.raises(ValueError, match="floor"):
        Prefetcher(floor=-1)


def test_missing_file_is_skipped_not_a_dead_thread(tmp_path):
    events = []
    models = StagedModels({"x": lambda: nn.Linear(2, 2), "y": lambda: nn.Linear(2, 2)},
                          {"a": ["x"], "b": ["y"]}, events=events.append,
                          files={"y": tmp_path / "gone.safetensors"}, prefetch_floor=0)
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    pre = _of(events, "prefetch")[0]
    assert pre["state"] == "skipped" and "cannot read its files" in pre["reason"]
    models.close()
    assert not _prefetch_threads()


def test_summary_splits_load_seconds_by_the_cache_hit(tmp_path):
    from stageload.summary import format_text, summarize
    events = []
    models, files = _models(tmp_path, (1, 2, 1), events, prefetch=Prefetcher(floor=0))
    for stage in ("a", "b", "c"):
        _enter(models, stage)
        assert models.prefetcher.wait(30)
    models.close()
    loads = {e["model"]: e for e in _of(events, "load")}
    assert [loads[m]["prefetched"] for m in "xyz"] == [False, True, True]
    summary = summarize(events)
    hit, cold = summary["loads"]["prefetched"], summary["loads"]["cold"]
    assert (hit["count"], cold["count"]) == (2, 1)
    assert hit["bytes"] == loads["y"]["bytes"] + loads["z"]["bytes"]
    assert hit["seconds"] == pytest.approx(loads["y"]["seconds"] + loads["z"]["seconds"])
    assert summary["prefetch"]["done"]["count"] == 2
    sizes = files["y"].stat().st_size + files["z"].stat().st_size
    assert summary["prefetch"]["done"]["bytes"] == sizes
    text = format_text(summary)
    assert "in 2 loads whose files were read ahead" in text and "in 1 without" in text
    assert "prefetch: 2 done" in text


def test_a_model_the_current_stage_lists_is_not_read_ahead_for_the_next(tmp_path):
    events = []
    paths = {}
    for name in "xy":
        paths[name] = tmp_path / f"{name}.safetensors"
        _write(paths[name], 1)
    models = StagedModels({"x": lambda: nn.Linear(2, 2), "y": lambda: nn.Linear(2, 2)},
                          {"a": ["x"], "b": ["x", "y"]}, events=events.append, files=paths,
                          prefetch_floor=0)
    _enter(models, "a")
    assert models.prefetcher.wait(30)
    assert [e["model"] for e in _of(events, "prefetch")] == ["y"]
    models.close()


def test_the_prefetch_waits_for_the_stages_own_loads_or_its_progress(tmp_path):
    events = []
    models, _ = _models(tmp_path, (1, 1, 1), events, prefetch=Prefetcher(floor=0))
    models.enter("a")
    assert not _of(events, "prefetch") and not _prefetch_threads()
    models.progress(0.1)  # the stage computes without loading x: start now
    assert models.prefetcher.wait(30)
    assert [e["model"] for e in _of(events, "prefetch")] == ["y"]
    models["x"]  # once per stage: no second prefetch
    assert models.prefetcher.wait(30) and len(_of(events, "prefetch")) == 1
    models.close()


def test_a_model_released_inside_the_stage_counts_as_loaded_for_the_prefetch(tmp_path):
    """A stage that releases one of its models before it loads the next (an in-stage
    release) has still loaded what it lists: the next stage's prefetch starts at its last
    load, not never."""
    events = []
    files, loaders = {}, {}
    for name in ("x", "w", "y"):
        files[name] = tmp_path / f"{name}.safetensors"
        _write(files[name], 1)
        loaders[name] = (lambda p=files[name]: load_module(lambda: _Net(MiB // 4 // 256), p))
    models = StagedModels(loaders, {"a": ["x", "w"], "b": ["y"]}, events=events.append,
                          files=files, prefetch=Prefetcher(floor=0))
    models.enter("a")
    models["x"]
    assert models.release("x", reason="done with it") > 0
    assert not _of(events, "prefetch")  # w, which a lists, is not loaded yet
    models["w"]
    assert models.prefetcher.wait(30)
    assert [e["model"] for e in _of(events, "prefetch")] == ["y"]
    models.close()
