"""Summary figures against values computed by hand from tests/meter/fixtures/small_run.jsonl,
the high-water-mark placement rule, and the command line."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stageload.meter.window import hwm_interval, window_peak
from stageload.summary import main, summarize
from stageload.trace import TraceError

FIXTURE = Path(__file__).with_name("fixtures") / "small_run.jsonl"


@pytest.fixture
def summary():
    return summarize(FIXTURE.read_text().splitlines())


def test_overall_figures_by_hand(summary):
    s = summary
    assert s["seconds"] == pytest.approx(1.8)           # 1001.8 - 1000.0
    assert s["samples"] == 10
    assert s["sample_hz"] == pytest.approx(5.0)         # samples 0.2 s apart
    assert s["truncated"] is False
    # highest sampled footprint is 2000 (t=1001.2); the mark 2500 of the sample at 1000.6
    # (span 1000.4..1000.6) is higher: it is the overall peak, though no stage gets it
    # (its span crosses setup's end at 1000.5 and lies before denoise's ready at 1000.7)
    assert s["peak"] == {"bytes": 2500, "t": pytest.approx(0.6), "source": "hwm", "stage": None}
    assert s["swap"] == {"start": 100, "peak": 200, "end": 160, "growth": 100}
    assert s["available_min"] == 7900
    cold = {"count": 3, "bytes": 500 + 800 + 500, "seconds": pytest.approx(0.2 + 0.3 + 0.15)}
    assert s["loads"] == {"count": 3, "reloads": 1, "bytes": 500 + 800 + 500,
                          "seconds": pytest.approx(0.2 + 0.3 + 0.15),
                          "prefetched": {"count": 0, "bytes": 0, "seconds": 0.0}, "cold": cold}
    assert s["outside_stage"] == [{"model": "enc", "stage": "decode", "event": "reload",
                                   "bytes": 500, "seconds": 0.15, "t": pytest.approx(1.45)}]


def test_stage_figures_by_hand(summary):
    setup, denoise, decode = summary["stages"]
    # setup: stage 1000.05, ready 1000.1, next stage 1000.5; samples 1000.2 (1200, mark 1250
    # over 1000.1..1000.2) and 1000.4 (1700, mark 1800 over 1000.2..1000.4)
    assert setup["stage"] == "setup" and setup["index"] == 0 and setup["count"] == 3
    assert setup["seconds"] == pytest.approx(0.45)
    assert setup["window_seconds"] == pytest.approx(0.40)
    assert setup["release_seconds"] == 0.05
    assert (setup["peak"], setup["peak_footprint"], setup["peak_hwm"]) == (1800, 1700, 1800)
    assert setup["samples"] == 2
    assert (setup["loads"], setup["load_bytes"], setup["load_seconds"]) == \
        (1, 500, pytest.approx(0.2))
    # denoise: stage 1000.5, ready 1000.7, next 1001.3; samples 1000.8 (1100, mark span starts
    # 1000.6 < ready: not counted), 1001.0 (1900, mark 2100 counted), 1001.2 (2000, mark 2050)
    assert denoise["seconds"] == pytest.approx(0.8)
    assert denoise["release_seconds"] == 0.2 and denoise["released_bytes"] == 500
    assert denoise["window_seconds"] == pytest.approx(0.6)
    assert (denoise["peak"], denoise["peak_footprint"], denoise["peak_hwm"]) == (2100, 2000, 2100)
    assert denoise["samples"] == 3
    assert (denoise["loads"], denoise["load_bytes"]) == (1, 800)
    assert denoise["gpu_peak"] == 700
    # decode: stage = ready = 1001.3, runs to the end 1001.8; samples 1001.4 (1300, mark 2000
    # spans 1001.2..1001.4: crosses the edge, not counted), 1001.6 (1500, 1550), 1001.8 (1400, 1500)
    assert decode["seconds"] == pytest.approx(0.5)
    assert (decode["peak"], decode["peak_footprint"], decode["peak_hwm"]) == (1550, 1500, 1550)
    assert decode["samples"] == 3
    assert (decode["loads"], decode["load_bytes"]) == (1, 500)
    assert decode["gpu_peak"] is None


def test_hwm_placement_rule():
    reset = {"t": 10.0, "hwm": 900, "hwm_since": 9.5}
    assert hwm_interval(None, reset) == (9.5, 10.0, 900)
    # lifetime marks (no reset, e.g. macOS): placed only when they rose since the last sample
    a = {"t": 1.0, "hwm": 500, "hwm_since": None}
    b = {"t": 2.0, "hwm": 800, "hwm_since": None}
    c = {"t": 3.0, "hwm": 800, "hwm_since": None}
    assert hwm_interval(None, a) is None
    assert hwm_interval(a, b) == (1.0, 2.0, 800)
    assert hwm_interval(b, c) is None
    assert hwm_interval(a, {"t": 2.0, "hwm": None}) is None
    samples = [dict(a, footprint=400), dict(b, footprint=450), dict(c, footprint=460)]
    assert window_peak(samples, 0.5, None) == {"footprint": 460, "hwm": 800, "peak": 800,
                                                "samples": 3}
    assert window_peak(samples, 1.5, None)["hwm"] is None  # the rise began before the window
    assert window_peak(samples, 5.0, None) == {"footprint": None, "hwm": None, "peak": None,
                                                "samples": 0}


def test_stage_without_ready_starts_at_its_stage_event():
    lines = [{"event": "stage", "t": 0.0, "stage": "only", "index": 0, "count": 1},
             {"event": "sample", "t": 0.1, "footprint": 7, "hwm": None},
             {"event": "sample", "t": 0.2, "footprint": 9, "hwm": None}]
    (st,) = summarize(lines)["stages"]
    assert st["peak"] == 9 and st["release_seconds"] is None and st["samples"] == 2


def test_errors_are_clear():
    with pytest.raises(TraceError, match="no events"):
        summarize([])
    with pytest.raises(TraceError, match="line 1"):
        summarize(["not json", '{"event": "x", "t": 1}'])


def test_cli_text_json_and_bad_input(tmp_path, capsys):
    assert main([str(FIXTURE)]) == 0
    text = capsys.readouterr().out
    for word in ("setup", "denoise", "decode", "peak footprint", "swap used", "outside"):
        assert word in text
    assert main([str(FIXTURE), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peak"]["bytes"] == 2500
    assert main([str(tmp_path / "missing.jsonl")]) == 2
    assert "not found" in capsys.readouterr().err
    junk = tmp_path / "junk.jsonl"
    junk.write_text("hello\nworld\n")
    assert main([str(junk)]) == 2
    assert "not a JSON object" in capsys.readouterr().err


def test_a_lone_line_that_is_not_an_event_is_named(tmp_path, capsys):
    """A one-line text file or ``[1,2,3]`` once got "the trace has no events" (the lone bad line
    was taken for a torn last line and dropped), while binary garbage got the line-1 message:
    now any first line that is not a JSON object with "event" gets the line-1 message."""
    cases = {"text.jsonl": "hello world\n", "list.jsonl": "[1,2,3]\n",
             "obj.jsonl": '{"name": "x"}', "garbage.bin": "\x00\xff\xfe binary"}
    reasons = {"list.jsonl": "a JSON array", "obj.jsonl": 'no "event" field'}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        assert main([str(path)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "line 1 is not a JSON object" in err and "stageload trace?" in err, (name, err)
        assert "no events" not in err
        assert reasons.get(name, "") in err
    # a writer killed inside its first write: said as such
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"event": "sta')
    assert main([str(torn)]) == 2
    assert "cut short" in capsys.readouterr().err
    # a file with nothing in it is still "no events"; a torn line after real events is dropped
    (tmp_path / "empty.jsonl").write_text("\n")
    assert main([str(tmp_path / "empty.jsonl")]) == 2
    assert "no events" in capsys.readouterr().err
    assert summarize(['{"event": "stage", "t": 1, "stage": "s"}', "[1"])["truncated"] is True


def test_module_entry_point(repo_root):
    done = subprocess.run([sys.executable, "-m", "stageload", "summary", str(FIXTURE), "--json"],
                          capture_output=True, text=True, cwd=repo_root, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stages"][1]["peak"] == 2100


def test_closed_stdout_exits_quietly(repo_root):
    """``summary TRACE | head -1``: the reader is gone before the summary is printed. The
    command exits 141 (128 + SIGPIPE) with nothing on stderr — no BrokenPipeError traceback, no
    "Exception ignored" from the interpreter's final flush."""
    for args in ([], ["--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "stageload", "summary", str(FIXTURE), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=repo_root)
        proc.stdout.close()  # long before the interpreter has started: the write must fail
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141, err
        assert err == ""


def test_unreadable_trace_is_one_line(capsys):
    """A trace that opens but cannot be read (``/proc/self/mem`` fails at offset 0 with EIO, even
    for root) is a one-line error with exit 2, not a traceback."""
    if not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux /proc")
    assert main(["/proc/self/mem"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stageload summary: cannot read /proc/self/mem: ")
    assert len(err.strip().splitlines()) == 1
