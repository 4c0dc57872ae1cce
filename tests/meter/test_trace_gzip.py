"""Compressed traces: `stageload summary`, `plot` and `--need-from` read a `.jsonl.gz` as they
read the plain trace (the benchmarks keep theirs compressed), a compressed trace cut short reads
like one cut by a kill, damaged gzip data is one clear error, and the repository keeps no
uncompressed benchmark trace. Real files and real subprocesses."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stageload.plot import load_run
from stageload.summary import summarize
from stageload.trace import TraceError, TraceReader, compress_trace, iter_lines, peak_from_trace

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024**2


def _events() -> list[dict]:
    out = [{"event": "stage", "t": 1.0, "stage": "shape", "index": 0, "count": 2},
           {"event": "ready", "t": 1.1, "stage": "shape", "seconds": 0.1, "released_bytes": 0}]
    out += [{"event": "sample", "t": 1.2 + i / 10, "pid": 7, "footprint": (100 + i) * MiB,
             "hwm": None, "swap": 0} for i in range(20)]
    out += [{"event": "stage", "t": 3.5, "stage": "texture", "index": 1, "count": 2},
            {"event": "ready", "t": 3.6, "stage": "texture", "seconds": 0.1,
             "released_bytes": 0},
            {"event": "sample", "t": 3.7, "pid": 7, "footprint": 900 * MiB, "hwm": None,
             "swap": 0},
            {"event": "sample", "t": 3.8, "pid": 7, "footprint": 300 * MiB, "hwm": None,
             "swap": 0}]
    return out


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in _events()))
    return path


def test_compress_then_every_reader_gives_the_plain_traces_figures(tmp_path):
    plain = _plain(tmp_path)
    expected = summarize(iter_lines(plain))
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(plain.read_bytes())
    packed = compress_trace(copy)
    assert packed == tmp_path / "copy.jsonl.gz" and not copy.exists()
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    got = summarize(iter_lines(packed))
    assert got["peak"] == expected["peak"] and got["peak"]["bytes"] == 900 * MiB
    assert [s["stage"] for s in got["stages"]] == ["shape", "texture"]
    assert peak_from_trace(packed) == 900 * MiB
    assert load_run(packed).label == "copy"


def test_summary_and_plot_commands_read_a_gzipped_trace(tmp_path):
    packed = compress_trace(_plain(tmp_path))
    res = subprocess.run([sys.executable, "-m", "stageload", "summary", "--json", str(packed)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["peak"]["bytes"] == 900 * MiB
    chart = tmp_path / "chart.png"
    res = subprocess.run([sys.executable, "-m", "stageload", "plot", str(packed), "-o",
                          str(chart)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_gzipped_trace_is_recognised_by_its_bytes_not_its_name(tmp_path):
    odd = tmp_path / "no_suffix"
    odd.write_bytes(gzip.compress(_plain(tmp_path).read_bytes()))
    assert summarize(iter_lines(odd))["peak"]["bytes"] == 900 * MiB


def test_a_compressed_trace_cut_short_reads_up_to_the_cut(tmp_path):
    data = gzip.compress(_plain(tmp_path).read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    lines = list(iter_lines(cut))
    assert 0 < len(lines) <= len(_events())
    reader = TraceReader(iter_lines(cut))
    events = list(reader)
    assert reader.truncated and 0 < len(events) < len(_events())
    s = summarize(iter_lines(cut))  # the cut is said, never a traceback
    assert s["truncated"] and s["peak"]["bytes"] >= 100 * MiB


def test_damaged_gzip_data_is_a_trace_error(tmp_path):
    data = bytearray(gzip.compress(_plain(tmp_path).read_bytes()))
    data[12:40] = b"\xff" * 28  # inside the deflate stream
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="damaged"):
        list(iter_lines(bad))


def test_compress_never_replaces_an_existing_file(tmp_path):
    plain = _plain(tmp_path)
    (tmp_path / "run.jsonl.gz").write_bytes(b"keep me")
    with pytest.raises(FileExistsError):
        compress_trace(plain)
    assert plain.exists() and (tmp_path / "run.jsonl.gz").read_bytes() == b"keep me"
    with pytest.raises(TraceError):
        compress_trace(tmp_path / "missing.jsonl")


def test_the_repository_keeps_no_uncompressed_benchmark_trace():
    plain = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench" / "results").rglob("*.jsonl"))
    assert plain == [], f"compress these with `python -m bench.compress_traces`: {plain}"
