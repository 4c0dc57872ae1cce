"""Traces as untrusted input: junk numbers, a FIFO, an endless line, and a
large trace read in bounded memory — for `stageload summary`, `stageload plot` and the guard's
`--need-from`, which all read the same files. Real files, FIFOs and subprocesses throughout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stageload.plot import MAX_POINTS, Run, _Series
from stageload.summary import main as summary_main
from stageload.summary import summarize
from stageload.trace import TraceError, TraceReader, iter_lines, peak_from_trace

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024**2


def sample(t: float, **fields) -> str:
    return json.dumps({"event": "sample", "t": t, "pid": 1, **fields})


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


JUNK = [  # (value as JSON text, what it is)
    ('"abc"', "string"), ("NaN", "NaN"), ("1e400", "infinity"), ("-5", "negative"),
    ("true", "bool"), ("1" + "0" * 400, "huge integer"), ("[1]", "array"), ('{"a": 1}', "object"),
]


@pytest.fixture
def junk_trace(tmp_path):
    lines = ['{"event": "stage", "t": 10.0, "stage": "texture", "index": NaN, "count": 2}',
             json.dumps({"event": "ready", "t": 10.1, "stage": "texture"}),
             sample(10.2, footprint=300 * MiB, hwm=310 * MiB, hwm_since=10.1, swap=0)]
    t = 10.3
    for text, _ in JUNK:
        for key in ("footprint", "hwm", "swap", "available"):
            lines.append(f'{{"event": "sample", "t": {t}, "pid": 1, "{key}": {text}}}')
            t += 0.1
        lines.append(f'{{"event": "load", "t": {t}, "model": "m", "bytes": {text}, '
                     f'"seconds": {text}}}')
        lines.append(f'{{"event": "sample", "t": {text}, "pid": 1, "footprint": 5}}')
        t += 0.1
    lines.append(sample(t, footprint=200 * MiB, hwm=210 * MiB, hwm_since=t - 0.1, swap=0))
    return write(tmp_path / "junk.jsonl", lines)


def test_junk_numbers_are_skipped_and_counted_never_a_traceback(junk_trace, capsys):
    s = summarize(iter_lines(junk_trace))
    # the stage's index; per junk value: 4 sample fields + the load's bytes and seconds + one
    # event without a time
    assert s["skipped"] == 1 + len(JUNK) * 7
    assert s["first_skipped"] == "line 1: index=NaN"
    assert s["peak"] == {"bytes": 310 * MiB, "t": pytest.approx(0.2), "source": "hwm",
                         "stage": "texture"}
    (stage,) = s["stages"]
    assert stage["peak"] == 310 * MiB and stage["peak_footprint"] == 300 * MiB
    assert s["loads"]["count"] == len(JUNK) and s["loads"]["bytes"] == 0
    assert s["swap"]["peak"] == 0 and s["available_min"] is None
    json.dumps(s, allow_nan=False)  # strict JSON out: no NaN or Infinity crept through

    assert summary_main([str(junk_trace)]) == 0
    out = capsys.readouterr().out
    assert f"skipped {1 + len(JUNK) * 7} value(s) that are not a usable number" in out
    assert "(first: line 1: index=NaN)" in out
    assert summary_main([str(junk_trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == 1 + len(JUNK) * 7


def test_junk_numbers_in_plot_and_need_from(junk_trace, tmp_path):
    run = Run("junk", iter_lines(junk_trace))
    assert max(run.gib) == pytest.approx(300 / 1024)  # only the usable footprints are drawn
    assert peak_from_trace(junk_trace) == 310 * MiB
    out = tmp_path / "junk.png"
    proc = subprocess.run([sys.executable, "-m", "stageload", "plot", str(junk_trace), "-o",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and out.stat().st_size > 0


def test_a_trace_whose_only_times_are_junk_says_so(tmp_path):
    trace = write(tmp_path / "t.jsonl", ['{"event": "sample", "t": "noon", "footprint": 1}'])
    with pytest.raises(TraceError, match='no events with a usable time .*t="noon"'):
        summarize(iter_lines(trace))


def test_a_callers_event_dicts_are_not_changed():
    event = {"event": "sample", "t": 1.0, "footprint": float("nan")}
    (seen,) = list(TraceReader([event]))
    assert seen["footprint"] is None and event["footprint"] != event["footprint"]  # still NaN


COMMANDS = {
    "summary": lambda path, tmp: ["summary", str(path)],
    "plot": lambda path, tmp: ["plot", str(path), "-o", str(tmp / "chart.png")],
    "need-from": lambda path, tmp: ["guard", "--need-from", str(path), "--", "true"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_fifo_as_trace_is_refused_at_once(command, tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)  # no writer ever opens it: a plain open() for reading would block for ever
    proc = subprocess.run([sys.executable, "-m", "stageload", *COMMANDS[command](fifo, tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "is a FIFO (named pipe), not a trace file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "chart.png").exists()


def test_a_device_and_an_endless_line_are_refused(tmp_path, monkeypatch):
    with pytest.raises(TraceError, match="is a device, not a trace file"):
        list(iter_lines("/dev/zero"))
    monkeypatch.setattr("stageload.trace.MAX_LINE", 1000)
    long_line = write(tmp_path / "long.jsonl", [sample(1.0, footprint=1), "x" * 5000])
    with pytest.raises(TraceError, match="line 2 is longer than"):
        list(iter_lines(long_line))


def test_lines_slightly_out_of_time_order_are_put_in_order(tmp_path):
    # the worker's events and the supervisor's samples interleave with a small lag
    lines = [sample(1.0, footprint=10), json.dumps({"event": "stage", "t": 1.5, "stage": "a"}),
             sample(1.4, footprint=99), json.dumps({"event": "ready", "t": 1.6, "stage": "a"}),
             sample(1.7, footprint=20)]
    s = summarize(lines)
    assert s["peak"]["bytes"] == 99 and s["peak"]["stage"] is None  # before stage a began
    assert s["stages"][0]["peak"] == 20


def test_the_plot_line_is_thinned_keeping_every_peak():
    series = _Series(limit=100)
    values = [(i * 37) % 1000 for i in range(10_000)]
    values[7777] = 5000
    for i, v in enumerate(values):
        series.add(float(i), float(v))
    times, kept = series.finish()
    assert 100 <= len(kept) <= 200 and MAX_POINTS >= 100
    assert max(kept) == 5000 and times[kept.index(5000)] == 7777.0
    assert times == sorted(times)


def _write_big_trace(path: Path, size: int) -> None:
    t, n = 1.7e9, 0
    with path.open("w") as f:
        while f.tell() < size:
            if n % 20_000 == 0:
                f.write(json.dumps({"event": "stage", "t": t, "stage": f"s{n // 20_000}"}) + "\n")
            f.write(sample(t, footprint=10**9 + n, hwm=10**9 + n, hwm_since=t - 0.1,
                           swap=0, available=9 * 10**9) + "\n")
            t += 0.1
            n += 1


def _peak_rss(argv: list[str], tmp_path: Path) -> tuple[int, int]:
    """Exit status and the process's own peak RSS in bytes of ``python -m ...`` ``argv`` (its
    ``VmHWM``, through ``bench.own_peak``: ``ru_maxrss`` from ``os.wait4`` would include this
    pytest process's peak, inherited at ``exec``, and hide the difference)."""
    assert argv[:2] == [sys.executable, "-m"], argv
    report = tmp_path / f"peak{len(list(tmp_path.glob('peak*.json')))}.json"
    proc = subprocess.run([sys.executable, "-m", "bench.own_peak", str(report), *argv[1:]],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = json.loads(report.read_text())["peak_bytes"]
    return proc.returncode, peak


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_summary_of_a_large_trace_stays_in_bounded_memory(tmp_path):
    size = 50 * 10**6
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    _write_big_trace(small, 10**5)
    _write_big_trace(big, size)
    command = [sys.executable, "-m", "stageload", "summary", "--json"]
    code, base = _peak_rss(command + [str(small)], tmp_path)
    assert code == 0
    code, peak = _peak_rss(command + [str(big)], tmp_path)
    assert code == 0
    # holding the events would take several times the file (the issue measured 5.8 GB for 1 GB);
    # streaming keeps the growth to the stage rows and the sample-gap reservoir
    assert peak - base < size / 5, (base, peak)
