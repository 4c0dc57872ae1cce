"""The bench's weights folder (``bench.pixal3d.pipeline.write_weights``) is reused only when
written for the same fingerprint — the stand-in's sources, the scale, torch — and written again
otherwise, saying why: real files written at the tests' scale (1e-4, a second or two)."""
from __future__ import annotations

import shutil

from bench.pixal3d import pipeline
from standin import PORT_DIR

SCALE = 1e-4


def _stamps(weights: dict) -> dict:
    return {str(f): f.stat().st_mtime_ns for f in weights["files"]}


def test_same_fingerprint_reuses_and_another_rewrites(tmp_path):
    first = pipeline.write_weights(tmp_path, SCALE, fingerprint="a" * 64)
    assert first["cache"].startswith("written: no weights")
    assert first["files"] and first["model_bytes"]["sparse_structure_flow_model"] > 0
    stamps = _stamps(first)

    again = pipeline.write_weights(tmp_path, SCALE, fingerprint="a" * 64)
    assert again["cache"].startswith("reused")
    assert _stamps(again) == stamps  # not one file touched
    assert again["model_bytes"] == first["model_bytes"]

    other = pipeline.write_weights(tmp_path, SCALE, fingerprint="b" * 64)
    assert other["cache"].startswith("written: written by other stand-in sources")
    assert "aaaaaaaaaaaa" in other["cache"] and "bbbbbbbbbbbb" in other["cache"]
    assert all(other["files"][i].stat().st_mtime_ns > t
               for i, t in enumerate(stamps[str(f)] for f in other["files"]))
    assert pipeline.cached_weights(other["root"], "b" * 64)[0] is not None
    assert pipeline.cached_weights(other["root"], "a" * 64)[0] is None

    other["files"][0].unlink()  # a file gone: written again, never loaded half
    info, why = pipeline.cached_weights(other["root"], "b" * 64)
    assert info is None and why.startswith("files missing")


def test_fingerprint_follows_the_sources_scale_and_nothing_else(tmp_path):
    port = tmp_path / "port"
    shutil.copytree(PORT_DIR, port, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    base = pipeline.weights_fingerprint(SCALE, port)
    assert base == pipeline.weights_fingerprint(SCALE, port)
    assert base == pipeline.weights_fingerprint(SCALE, PORT_DIR)  # the copy: same sources
    assert pipeline.weights_fingerprint(2 * SCALE, port) != base
    (port / "README.md").write_text("not a source\n")  # only Python sources count
    assert pipeline.weights_fingerprint(SCALE, port) == base
    configs = port / "flow_configs.py"
    configs.write_text(configs.read_text() + "\n# another stand-in\n")
    assert pipeline.weights_fingerprint(SCALE, port) != base
