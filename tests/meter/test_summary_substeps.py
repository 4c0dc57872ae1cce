"""Sub-steps (``stage`` events with ``parent``) in the summary, the text and the plot: they sit
under their parent stage and do not end its window. Values by hand from the trace below."""
import pytest

from stageload.plot import Run
from stageload.summary import format_text, summarize


def _trace():
    ev = [
        {"event": "stage", "t": 0.0, "stage": "decode", "index": 0, "count": 2},
        {"event": "ready", "t": 0.1, "stage": "decode", "seconds": 0.1, "released_bytes": 0},
        {"event": "sample", "t": 0.5, "footprint": 500},
        {"event": "stage", "t": 1.0, "stage": "export", "index": 1, "count": 2},
        {"event": "ready", "t": 1.1, "stage": "export", "seconds": 0.1, "released_bytes": 0},
        {"event": "stage", "t": 1.2, "stage": "prepare", "index": 0, "count": 3,
         "parent": "export"},
        {"event": "sample", "t": 1.3, "footprint": 300},
        {"event": "stage", "t": 1.5, "stage": "remesh", "index": 1, "count": 3, "parent": "export"},
        {"event": "sample", "t": 1.6, "footprint": 900},
        {"event": "sample", "t": 1.8, "footprint": 700},
        {"event": "stage", "t": 2.0, "stage": "write", "index": 2, "count": 3, "parent": "export"},
        {"event": "sample", "t": 2.2, "footprint": 400},
    ]
    return ev


def test_substeps_are_listed_under_their_parent_and_keep_its_window():
    s = summarize(_trace())
    assert [st["stage"] for st in s["stages"]] == ["decode", "export"]
    decode, export = s["stages"]
    assert decode["substeps"] == []
    assert export["peak"] == 900  # the whole export window, across its sub-steps
    subs = export["substeps"]
    assert [(x["stage"], x["index"], x["peak"], x["samples"]) for x in subs] == [
        ("prepare", 0, 300, 1), ("remesh", 1, 900, 2), ("write", 2, 400, 1)]
    assert subs[0]["seconds"] == pytest.approx(0.3) and subs[1]["seconds"] == pytest.approx(0.5)
    assert s["peak"]["stage"] == "export"


def test_text_prints_a_row_per_substep():
    text = format_text(summarize(_trace()))
    rows = [line for line in text.splitlines() if line.lstrip().startswith("·")]
    assert [r.split()[1] for r in rows] == ["prepare", "remesh", "write"]
    assert text.index("export") < text.index("· prepare")


def test_plot_run_keeps_substeps_out_of_the_stage_bands():
    run = Run("t", _trace())
    assert [st["stage"] for st in run.stages] == ["decode", "export"]
    assert [sub["stage"] for sub in run.substeps] == ["prepare", "remesh", "write"]
    assert run.stages[1]["end"] == pytest.approx(2.2)  # export runs to the end of the trace


def test_a_substeps_facts_from_its_progress_events_are_in_its_row():
    """A sub-step's ``progress`` events may carry ``facts`` (what the step found: the bounded
    export's bake says how much of the texture its voxels covered); the last ones stand, in
    the summary and on the sub-step's text row; a fact that is not a finite number or a short
    text is skipped, and another sub-step's facts are not taken."""
    ev = _trace()
    ev.insert(8, {"event": "progress", "t": 1.7, "stage": "export", "substep": "remesh",
                  "facts": {"voxel_coverage": 0.5, "cells": 90}})
    ev.insert(9, {"event": "progress", "t": 1.75, "stage": "export", "substep": "remesh",
                  "facts": {"voxel_coverage": 0.99871, "bad": float("nan"), "flag": True,
                            "long": "x" * 200, "method": "dual contouring"}})
    ev.insert(10, {"event": "progress", "t": 1.76, "stage": "export", "substep": "prepare",
                   "facts": {"other": 1}})
    s = summarize(ev)
    prepare, remesh, write = s["stages"][1]["substeps"]
    assert remesh["facts"] == {"voxel_coverage": 0.99871, "cells": 90,
                               "method": "dual contouring"}
    assert prepare["facts"] == {} and write["facts"] == {}
    row = next(line for line in format_text(s).splitlines() if "· remesh" in line)
    assert row.endswith("voxel_coverage 0.9987  cells 90  method dual contouring"), row
