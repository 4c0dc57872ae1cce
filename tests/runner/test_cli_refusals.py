"""Refusals up front and clear messages from the command line (tester's report 2026-12-01,
items 6, 8, 10, 11): a batch whose backend cannot run is refused as a whole before anything is
written; a dangling symlink at the output path is refused before the job runs; and the messages
for odd paths, odd files and misplaced arguments say what is really wrong."""
from __future__ import annotations

import os
import shutil

HUMAN_PREFIX = "runner: "


def test_a_batch_whose_pixal3d_folder_is_missing_is_refused_up_front(rt, character, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(character, src / "one.png")
    shutil.copy(character, src / "two.png")
    out = tmp_path / "out"
    fin = rt.run(["batch", src, "-o", out, "--backend", "pixal3d",
                  "--pixal3d-dir", tmp_path / "nonexistent"])
    assert fin.returncode == 32, fin.stderr[-2000:]
    assert fin.kinds() == ["hello", "error"] and fin.last()["kind"] == "pixal3d_missing"
    assert str(tmp_path / "nonexistent") in fin.last()["message"]
    assert not out.exists()  # no folder, no manifest, no trace
    lines = [line for line in fin.stderr.splitlines() if line.startswith(HUMAN_PREFIX)]
    assert len(lines) == 1 and lines[0].startswith("runner: pixal3d_missing: "), fin.stderr


def test_a_dangling_symlink_at_the_output_is_refused_before_the_job(rt, character, tmp_path):
    link = tmp_path / "dangling.glb"
    os.symlink(tmp_path / "nonexistent_target.glb", link)
    fin = rt.run([character, "-o", link])
    assert fin.returncode == 20 and fin.last()["kind"] == "output_exists", fin.stderr[-2000:]
    assert fin.kinds() == ["hello", "error"]  # refused up front: no stage ran
    message = fin.last()["message"]
    assert "symbolic link" in message and "nonexistent_target.glb" in message
    assert "appeared while the job ran" not in message
    assert os.readlink(link) == str(tmp_path / "nonexistent_target.glb")
    assert not (tmp_path / "dangling.trace.jsonl").exists()
    assert not (tmp_path / "nonexistent_target.glb").exists()
