"""The port's fallback export paths through the real runner on the stand-in
port. A native export that fails (MemoryError) and falls back to the port's simpler baker is a
``warning`` event (fallback, cause, what differs) on stdout, a ``runner: warning:`` line on
stderr, in the result and in the batch manifest; ``--strict-export`` makes it an error; a disk
that fills during the export is ``disk_full``, never a fallback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _run(args, env, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "runner", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


def _events(proc):
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture
def env(standin_weights):
    return {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu",
            "PIXAL3D_STANDIN_EXPORT_SCALE": "0"}


def _export_only(warnings: list) -> list:
    """The export's warnings: without what the lean working memory says about the stand-in's
    decoders (their rows run in one piece: they have none of the layers lean chunks)."""
    return [w for w in warnings if not str(w.get("source") or "").startswith(LEAN)]


LEAN = "stageload.pixal3d.lean"


def _args(rgb_image, out, standin_dir, *extra):
    return [rgb_image, "-o", out, "--backend", "pixal3d", "--pixal3d-dir", standin_dir,
            "--texture-size", "512", "--export-engine", "port", *extra]  # the port's fallbacks


@pytest.mark.parametrize("process", ["own", "in-process"])
def test_a_fallback_export_is_a_warning_on_every_channel(standin_dir, rgb_image, tmp_path,
                                                         repo_root, env, process):
    out = tmp_path / "c.glb"
    env = {**env, "PIXAL3D_STANDIN_BRIDGE_FAULT": "memory"}
    proc = _run(_args(rgb_image, out, standin_dir, "--export-process", process), env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = _events(proc)
    (warning,) = _export_only([e for e in events if e["event"] == "warning"])
    assert warning["fallback"] == "fallback_baker" and "MemoryError" in warning["cause"]
    assert "export_fallback_texture_glb" in warning["differs"] and warning["source"]
    assert f"runner: warning: {warning['message']}" in proc.stderr
    result = events[-1]
    assert result["event"] == "result" and out.is_file()
    assert [w["fallback"] for w in _export_only(result["warnings"])] == ["fallback_baker"]
    trace = [json.loads(line) for line in open(result["trace"], encoding="utf-8")]
    assert any(e.get("event") == "warning" and e.get("fallback") == "fallback_baker" for e in trace)


def test_strict_export_turns_the_fallback_into_an_error(standin_dir, rgb_image, tmp_path, repo_root,
                                                        env):
    out = tmp_path / "c.glb"
    env = {**env, "PIXAL3D_STANDIN_BRIDGE_FAULT": "memory"}
    proc = _run(_args(rgb_image, out, standin_dir, "--strict-export"), env, repo_root)
    error = _events(proc)[-1]
    assert proc.returncode == 50, proc.stderr[-3000:]
    assert error["event"] == "error" and error["kind"] == "export_fallback"
    assert "MemoryError" in error["message"] and "fallback_baker" in error["message"]
    assert not out.exists() and "runner: export_fallback:" in proc.stderr


def test_a_disk_that_fills_during_export_is_disk_full(standin_dir, rgb_image, tmp_path, repo_root,
                                                      env):
    out = tmp_path / "c.glb"
    env = {**env, "PIXAL3D_STANDIN_BRIDGE_FAULT": "nospace"}
    proc = _run(_args(rgb_image, out, standin_dir), env, repo_root)
    events = _events(proc)
    assert proc.returncode == 22, proc.stderr[-3000:]
    assert events[-1]["kind"] == "disk_full" and not out.exists()
    assert not _export_only([e for e in events if e["event"] == "warning"])


def test_the_batch_manifest_records_the_fallback(standin_dir, rgb_image, tmp_path, repo_root, env):
    folder, out_dir = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    (folder / "a.png").write_bytes(rgb_image.read_bytes())
    env = {**env, "PIXAL3D_STANDIN_BRIDGE_FAULT": "memory"}
    proc = _run(["batch", folder, "-o", out_dir, "--backend", "pixal3d",
                 "--pixal3d-dir", standin_dir, "--texture-size", "512", "--export-engine", "port"],
                env, repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    item = next(e for e in _events(proc) if e["event"] == "batch_item")
    assert [w["fallback"] for w in _export_only(item["warnings"])] == ["fallback_baker"]
    entry = json.loads((out_dir / "manifest.json").read_text())["images"]["a.png"]
    (recorded,) = _export_only(entry["warnings"])
    assert entry["status"] == "done" and recorded["fallback"] == "fallback_baker"
    assert "MemoryError" in recorded["cause"]
