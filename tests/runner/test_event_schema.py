"""The one event schema (meshfacts/events.py): every kind the product emits is declared with
its fields' types, matches runner/PROTOCOL.md, and is checked where it is made in the tests.

The real runner's events are checked by every test that starts one (tests/conftest.py makes the
schema strict for each process); here the schema itself, its constructor and the relay."""
from __future__ import annotations

import io
import json
import math
import re

import pytest

from meshfacts import events as schema
from meshfacts.events import make
from runner.protocol import Emitter, relay


def _event(kind: schema.Kind) -> dict:
    return {"v": schema.PROTOCOL_VERSION, "event": kind.name, "t": 1.0, **kind.example}


@pytest.mark.parametrize("name", sorted(schema.KINDS))
def test_every_kinds_example_matches_its_declaration(name):
    kind = schema.KINDS[name]
    assert kind.stream in (schema.STDOUT, schema.TRACE, schema.PIPE)
    assert kind.example, f"{name}: declare an example"
    assert schema.problems(_event(kind)) == []
    assert set(kind.example) >= {k for k, f in kind.fields.items() if f.required}
    # the example is JSON, as every event is on the wire
    assert json.loads(json.dumps(_event(kind))) == _event(kind)


def _documented(repo_root) -> tuple[set[str], set[str]]:
    """(the Events table's names, the trace-only names "The trace" lists) in PROTOCOL.md."""
    text = (repo_root / "runner" / "PROTOCOL.md").read_text(encoding="utf-8")
    table = text.split("## Events", 1)[1].split("\n#", 1)[0]
    events = {name for cell in re.findall(r"^\| ((?:`\w+`(?: / )?)+) \|", table, flags=re.M)
              for name in re.findall(r"`(\w+)`", cell)}
    trace = text.split("## The trace", 1)[1]
    trace_only = trace[trace.index("together with"):trace.index("The trace is written")]
    return events, set(re.findall(r"`(\w+)`", trace_only))


def test_the_schema_declares_what_protocol_md_describes(repo_root):
    """PROTOCOL.md's Events table is the schema's stdout kinds, and its trace-only lines (the
    meter's ``sample``, the processes' ``worker``, ``worker_done``, ``worker_error``,
    ``worker_exit`` and the export process's ``export_*``) are the trace kinds; the worker's
    ``probe`` answer and its deep self-check's ``self_check_done`` never leave its pipe."""
    events, trace_only = _documented(repo_root)
    by_stream = {s: {k.name for k in schema.KINDS.values() if k.stream == s}
                 for s in (schema.STDOUT, schema.TRACE, schema.PIPE)}
    assert by_stream[schema.STDOUT] == events
    assert by_stream[schema.TRACE] == trace_only
    assert by_stream[schema.PIPE] == {"probe", "self_check_done"}


def test_stageloads_events_agree_with_the_schema():
    """stageload (below the runner) keeps its own required fields for its library users;
    each of its kinds is declared here with those fields (the relay checks them in a run)."""
    from stageload.events import FIELDS

    for name, fields in FIELDS.items():
        kind = schema.KINDS[name]
        assert kind.stream == schema.STDOUT, name
        assert set(fields) <= set(kind.fields), (name, set(fields) - set(kind.fields))


def test_the_new_kinds_of_this_round_are_declared():
    wm = schema.KINDS["working_memory"].fields
    assert {k for k, f in wm.items() if f.required} == {"stage", "target", "tool", "chunk",
                                                        "bytes_saved", "note"}
    assert wm["chunk"].type(None) and wm["chunk"].type(4096) and not wm["chunk"].type("4k")
    parent = schema.KINDS["stage"].fields["parent"]
    assert not parent.required and parent.type("decode_shape") and not parent.type("")


def test_strict_make_refuses_what_the_schema_does_not_declare(monkeypatch):
    monkeypatch.setenv(schema.STRICT_ENV, "1")
    ok = make("stage", stage="shape", index=1, count=4)
    assert ok["v"] == 1 and ok["event"] == "stage" and isinstance(ok["t"], float)
    bad = {
        "made_up_kind": lambda: make("made_up_kind", x=1),
        "missing": lambda: make("ready", stage="shape", seconds=0.1),
        "type": lambda: make("ready", stage="shape", seconds="0.1", released_bytes=0),
        "nan": lambda: make("memory", footprint=math.nan, peak=1, stage=None, stage_peak=None,
                            swap=0, available=1, total=2),
        "undeclared field": lambda: make("resumed", pid=1, why="idle", seconds=2.0, colour=1),
        "bad nested": lambda: make("guard", state="waiting", reason=None,
                                   readings={"available": "lots"}),
    }
    for what, call in bad.items():
        with pytest.raises(schema.SchemaError):
            call()
        assert what  # each case raised
    with pytest.raises(schema.SchemaError, match="ready.released_bytes is missing"):
        make("ready", stage="shape", seconds=0.1)


def test_without_strict_make_builds_without_checking(monkeypatch):
    """The product does not pay for the check on every event (4 memory events a second)."""
    monkeypatch.delenv(schema.STRICT_ENV, raising=False)
    ev = make("made_up_kind", x=1)
    assert ev["event"] == "made_up_kind" and ev["x"] == 1


def test_the_relay_checks_stageloads_events_and_the_emitter_all(monkeypatch):
    """stageload's events cannot be checked where stageload makes them (it may not import the
    runner): the relay checks them; the emitter checks what is added after ``make``."""
    from stageload.events import make_event

    monkeypatch.setenv(schema.STRICT_ENV, "1")
    good = relay(make_event("release", model="m", stage="s", bytes=4, seconds=0.5))
    assert good["v"] == 1 and good["event"] == "release"
    with pytest.raises(schema.SchemaError, match="release.bytes"):
        relay(make_event("release", model="m", stage="s", bytes=-4, seconds=0.5))
    said = relay(make_event("release", model="m", stage="s", bytes=4, seconds=0.5,
                            reason="read by nothing after its sampler"))
    assert said["reason"] == "read by nothing after its sampler"
    with pytest.raises(schema.SchemaError, match="release.reason"):
        relay(make_event("release", model="m", stage="s", bytes=4, seconds=0.5, reason=3))
    out = io.StringIO()
    emitter = Emitter(out)
    emitter.emit({**make("stage", stage="shape", index=0, count=2), "item": 3})
    with pytest.raises(schema.SchemaError, match="stage.colour is not declared"):
        emitter.emit({**make("stage", stage="shape", index=0, count=2), "colour": "red"})
    assert [json.loads(line)["item"] for line in out.getvalue().splitlines()] == [3]


def test_clean_drops_bad_fields_and_refuses_undeclared_kinds():
    ev = {"v": 1, "event": "memory", "t": 2.0, "footprint": "abc", "peak": math.nan,
          "swap": 4096, "extra": [1]}
    kept, notes = schema.clean(ev)
    assert kept == {"v": 1, "event": "memory", "t": 2.0, "swap": 4096, "extra": [1]}
    assert notes == ["memory.footprint = 'abc' is not valid; ignored",
                     "memory.peak = nan is not valid; ignored"]
    kept, notes = schema.clean({"event": "guard", "t": 1.0, "state": "waiting",
                                "readings": {"available": "x", "total": 5}})
    assert kept["readings"] == {"total": 5}
    assert notes == ["guard.readings.available = 'x' is not valid; ignored"]
    for odd in ({"event": "telemetry"}, {"event": ["stage"]}, {"event": None}, {}):
        kept, notes = schema.clean(odd)
        assert kept is None and len(notes) == 1


def test_stageloads_own_events_pass_the_schema_as_the_runner_relays_them(monkeypatch):
    """stageload makes its events without the runner (it may not import it): the ones its
    staged models, meter and guard make in this process — stage, ready, load, reload,
    release, progress, the meter's sample, a guard decision — pass the relay's strict check
    (the sample, a trace-only line, the schema's own)."""
    import os

    from torch import nn

    from stageload import StagedModels
    from stageload.guard.config import GuardConfig
    from stageload.guard.guard import Guard
    from stageload.meter import Sampler

    monkeypatch.setenv(schema.STRICT_ENV, "1")
    events: list[dict] = []
    models = StagedModels({"a": lambda: nn.Linear(8, 8), "b": lambda: nn.Linear(4, 4)},
                          {"one": ["a"], "two": ["b"]}, events=events.append)
    models.enter("one")
    models["a"]
    models.progress(0.5)
    models.enter("two")
    models["a"]  # outside its stage: a reload
    models.release("a")
    models.close()
    Sampler(os.getpid(), events.append).sample_now()
    Guard(GuardConfig(), events.append, human=None)._decide("started", "room",
                                                            {"available": 1, "total": 2})
    kinds = {e["event"] for e in events}
    assert kinds == {"stage", "ready", "load", "reload", "release", "progress", "sample", "guard"}
    for event in events:
        if schema.KINDS[event["event"]].stream == schema.STDOUT:
            assert relay(event)["v"] == schema.PROTOCOL_VERSION
        else:
            assert schema.check(event) is event
