"""One peak, one stage: the live ``memory`` events the runner sends the add-on
(``runner.job.memory.MemoryTracker``) and ``stageload summary`` read one trace by one stage-window
rule, so the panel and the summary give each stage the same peak and blame the same stage (or
none) for the run's peak.

The trace is replayed in time order into the real tracker, whose ``memory`` events go into the
add-on's real ``JobState`` (what the panel draws from); the same file goes to ``summarize``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from blender_addon.runner_client.state import JobState
from runner.job.memory import MemoryTracker
from stageload.summary import summarize
from stageload.trace import TraceReader, iter_lines

SMALL_RUN = Path(__file__).resolve().parents[1] / "meter" / "fixtures" / "small_run.jsonl"
MiB = 1024**2


def panel_replay(path: Path) -> tuple[dict, int | None, str | None]:
    """Replay the trace at ``path`` through the tracker into a JobState. Returns the stage peak
    the panel last showed for each stage, the run's peak it shows at the end, and the stage it
    blames for that peak: the one whose shown stage peak is the run's peak (None if none)."""
    tracker, state = MemoryTracker(), JobState()
    shown: dict[str, int | None] = {}
    for ev in TraceReader(iter_lines(path)):
        kind = ev["event"]
        if kind in ("stage", "ready"):
            if kind == "stage" and state.stage is not None:
                shown[state.stage] = state.stage_peak
            tracker.on_event(ev)
            state.apply(ev)
        elif kind == "sample":
            state.apply({"event": "memory", "t": ev["t"], **tracker.on_sample(ev, force=True)})
    if state.stage is not None:
        shown[state.stage] = state.stage_peak
    blamed = [name for name, value in shown.items() if value is not None and value == state.peak]
    return shown, state.peak, blamed[0] if blamed else None


def _line(**fields) -> str:
    return json.dumps(fields)


@pytest.fixture
def release_spike(tmp_path) -> Path:
    """The run's peak is a spike while ``decode`` releases ``denoise``'s weights: the mark is
    read by the first sample after ``ready``, but it was reached partly before it. Blamed on
    no stage (the previous rules blamed ``decode`` on the panel and no stage in the summary)."""
    lines = [
        _line(event="stage", t=100.0, stage="denoise"),
        _line(event="ready", t=100.1, stage="denoise"),
        _line(event="sample", t=100.2, footprint=900 * MiB, hwm=950 * MiB, hwm_since=100.1),
        _line(event="sample", t=100.4, footprint=1000 * MiB, hwm=1100 * MiB, hwm_since=100.2),
        _line(event="stage", t=100.45, stage="decode"),
        _line(event="ready", t=100.5, stage="decode"),
        _line(event="sample", t=100.6, footprint=400 * MiB, hwm=1500 * MiB, hwm_since=100.4),
        _line(event="sample", t=100.8, footprint=600 * MiB, hwm=650 * MiB, hwm_since=100.6),
    ]
    path = tmp_path / "spike.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def in_stage_spike(tmp_path) -> Path:
    """The same run with the spike inside ``decode``'s window: both blame ``decode``."""
    path = tmp_path / "inside.jsonl"
    lines = [
        _line(event="stage", t=100.0, stage="denoise"),
        _line(event="ready", t=100.1, stage="denoise"),
        _line(event="sample", t=100.2, footprint=900 * MiB, hwm=950 * MiB, hwm_since=100.1),
        _line(event="stage", t=100.45, stage="decode"),
        _line(event="ready", t=100.5, stage="decode"),
        _line(event="sample", t=100.6, footprint=400 * MiB, hwm=450 * MiB, hwm_since=100.5),
        _line(event="sample", t=100.8, footprint=600 * MiB, hwm=1500 * MiB, hwm_since=100.6),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("trace", ["small_run", "release_spike", "in_stage_spike"])
def test_panel_and_summary_give_each_stage_the_same_peak_and_blame_the_same_stage(trace, request):
    path = SMALL_RUN if trace == "small_run" else request.getfixturevalue(trace)
    summary = summarize(iter_lines(path))
    shown, panel_peak, panel_blame = panel_replay(path)
    assert shown == {st["stage"]: st["peak"] for st in summary["stages"]}
    assert panel_peak == summary["peak"]["bytes"]
    assert panel_blame == summary["peak"]["stage"]
    expected = {"small_run": None, "release_spike": None, "in_stage_spike": "decode"}[trace]
    assert summary["peak"]["stage"] == expected


def test_throttled_memory_events_end_each_stage_with_its_window_peak(tmp_path):
    """The live events are throttled (4 a second): a stage's last one must still carry the
    peak of its whole window — the closing figure sent before the next stage and at the end —
    or the terminal's ``done … peak`` differs from the summary's, and a stage shorter than the
    interval has none at all."""
    clock = [0.0]
    tracker = MemoryTracker(interval=0.25, clock=lambda: clock[0])
    lines, published = [], []

    def event(**ev):
        lines.append(ev)
        closing = tracker.on_event(ev)
        if closing is not None:
            published.append(closing)

    def sample(t, footprint):
        clock[0] = t
        lines.append({"event": "sample", "t": t, "pid": 1, "footprint": footprint})
        memory = tracker.on_sample(lines[-1])
        if memory is not None:
            published.append(memory)

    event(event="stage", t=0.0, stage="shape")
    event(event="ready", t=0.01, stage="shape")
    sample(0.1, 100 * MiB)  # due: an event
    sample(0.2, 300 * MiB)  # not due: counted, but no event of its own
    event(event="stage", t=0.22, stage="texture")  # shorter than the interval
    event(event="ready", t=0.23, stage="texture")
    sample(0.3, 250 * MiB)  # not due either
    published.append(tracker.closing())  # the end of the job
    last = {}
    for memory in published:
        last[memory["stage"]] = memory["stage_peak"]
    summary = summarize([json.dumps(line) for line in lines])
    assert last == {st["stage"]: st["peak"] for st in summary["stages"]} == {
        "shape": 300 * MiB, "texture": 250 * MiB}


def _deliver(tracker: MemoryTracker, arrivals: list[dict]) -> dict:
    """Feed ``arrivals`` to ``tracker`` in that order, as the supervisor does (events through
    ``on_event``, samples through ``on_sample``); returns the last figure published for each
    stage: the closing one sent before each new stage, and the one at the end."""
    last = {}
    for item in arrivals:
        if item["event"] == "sample":
            tracker.on_sample(item)
        else:
            closing = tracker.on_event(item)
            if closing is not None:
                last[closing["stage"]] = closing["stage_peak"]
    end = tracker.closing()
    last[end["stage"]] = end["stage_peak"]
    return last


def test_a_stage_event_that_arrives_after_later_samples_is_placed_by_its_time():
    """The samples are the supervisor's own, the stage events come through the worker's pipe:
    under load a sample taken after ``texture`` began reaches the tracker first. The summary
    reads the trace in ``t`` order; the terminal's ``done … peak`` must be the same figure."""
    lines = [
        {"event": "stage", "t": 0.0, "stage": "shape"},
        {"event": "ready", "t": 0.01, "stage": "shape"},
        {"event": "sample", "t": 0.1, "pid": 1, "footprint": 100 * MiB},
        {"event": "sample", "t": 0.3, "pid": 1, "footprint": 300 * MiB},  # texture's
        {"event": "stage", "t": 0.25, "stage": "texture"},
        {"event": "ready", "t": 0.26, "stage": "texture"},
        {"event": "sample", "t": 0.4, "pid": 1, "footprint": 250 * MiB},
    ]
    summary = summarize([json.dumps(line) for line in lines])
    expected = {st["stage"]: st["peak"] for st in summary["stages"]}
    assert expected == {"shape": 100 * MiB, "texture": 300 * MiB}
    assert _deliver(MemoryTracker(interval=0.25, clock=lambda: 0.0), lines) == expected


def test_late_arrivals_are_placed_after_the_older_ones_are_folded():
    """Forty seconds of samples, each stage event reaching the tracker 0.35 s (three samples,
    the stage's highest among them) late, and one sample itself late by a second: every figure
    is still the summary's, across the window beyond which the tracker folds what it has seen
    (runner.job.memory)."""
    lines, stages = [], ["a", "b", "c", "d"]
    for index, name in enumerate(stages):
        lines.append({"event": "stage", "t": index * 10.0 + 0.05, "stage": name})
        lines.append({"event": "ready", "t": index * 10.0 + 0.06, "stage": name})
    for tick in range(400):
        t = tick * 0.1 + 0.01
        first = tick % 100 == 1  # each stage's highest sample comes right after its ready
        lines.append({"event": "sample", "t": round(t, 3), "pid": 1,
                      "footprint": (600 + tick if first else 100 + (tick * 37) % 250) * MiB})
    lines.sort(key=lambda item: item["t"])

    def arrives(item):
        late = 0.35 if item["event"] != "sample" else (1.0 if item["t"] == 25.01 else 0.0)
        return item["t"] + late

    arrivals = sorted(lines, key=arrives)
    assert arrivals != lines
    summary = summarize([json.dumps(line) for line in lines])
    expected = {st["stage"]: st["peak"] for st in summary["stages"]}
    tracker = MemoryTracker(interval=0.25, clock=lambda: 0.0)
    assert _deliver(tracker, arrivals) == expected
    assert tracker.peak == summary["peak"]["bytes"]
