"""TraceWriter / reader on real files: one line per event, no overwrite, torn last line."""
import json
import threading

import pytest

from stageload.trace import TraceError, TraceWriter, encode_line, parse_lines, read_trace


def test_lines_are_whole_from_many_threads(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as sink:
        def work(k):
            for i in range(300):
                sink({"event": "progress", "t": float(i), "stage": f"s{k}", "fraction": 0.5,
                      "pad": "y" * (i * 13 % 5000)})
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 1200
    assert all(json.loads(line)["event"] == "progress" for line in lines)
    with pytest.raises(ValueError, match="closed"):
        sink({"event": "late", "t": 0.0})


def test_never_overwrites_and_appends_when_asked(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"event": "x", "t": 1}\n')
    with pytest.raises(FileExistsError, match="append=True"):
        TraceWriter(path)
    with TraceWriter(path, append=True) as sink:
        sink({"event": "y", "t": 2})
    assert [e["event"] for e in read_trace(path)] == ["x", "y"]


def test_torn_last_line_is_dropped_but_a_torn_middle_is_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"event": "a", "t": 1}\n\n{"event": "b", "t": 2}\n{"event": "sam')
    events, truncated = parse_lines(path.read_bytes().splitlines(keepends=True))
    assert [e["event"] for e in events] == ["a", "b"] and truncated
    assert [e["event"] for e in read_trace(path)] == ["a", "b"]
    path.write_bytes(b'{"event": "a", "t": 1}\n{"eve\n{"event": "b", "t": 2}\n')
    with pytest.raises(TraceError, match="line 2"):
        read_trace(path)
    with pytest.raises(TraceError, match="not found"):
        read_trace(tmp_path / "nope.jsonl")


def test_encoding_is_strict_json():
    import numpy as np
    line = encode_line({"event": "sample", "t": 1.0, "footprint": np.int64(5),
                        "x": float("nan"), "nested": [float("inf"), np.float32(0.5)]})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"event": "sample", "t": 1.0, "footprint": 5, "x": None,
                                "nested": [None, 0.5]}
