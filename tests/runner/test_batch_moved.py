"""A batch output folder that was moved or copied resumes:
the manifest's and the traces' paths name the old folder, but the records are resolved relative
to the folder they are in, so finished images whose GLB, trace and input sha256 match are
skipped — also when the manifest was damaged and rebuilt from the traces. And a rerun never
turns a ``done`` record into ``failed``: an image that fails while its finished GLB is still
there keeps its ``done`` record, with the failure beside it."""
from __future__ import annotations

import json
import os
import shutil

import pytest


def _items(fin) -> dict:
    return {os.path.basename(e["image"]): e for e in fin.events if e["event"] == "batch_item"}


def _two_images(character, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(character, src / "one.png")
    shutil.copy(character, src / "two.png")
    return src


@pytest.mark.parametrize("how", ["moved", "copied", "copied_damaged", "moved_damaged"])
def test_a_moved_or_copied_output_folder_resumes(rt, character, tmp_path, how):
    src = _two_images(character, tmp_path)
    first_out = tmp_path / "first"
    first = rt.run(["batch", src, "-o", first_out], timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    out = tmp_path / "second"
    if how.startswith("moved"):
        shutil.move(first_out, out)
    else:
        shutil.copytree(first_out, out)
    if how.endswith("damaged"):
        manifest = out / "manifest.json"
        manifest.write_text(manifest.read_text()[:40])

    again = rt.run(["batch", src, "-o", out], timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {k: v["status"] for k, v in _items(again).items()} == {"one.png": "skipped",
                                                                   "two.png": "skipped"}
    if how.endswith("damaged"):
        assert "rebuilt 2 finished image(s)" in again.stderr
    images = json.loads((out / "manifest.json").read_text())["images"]
    for name in ("one", "two"):
        entry = images[f"{name}.png"]
        assert entry["status"] == "done"
        # the records now name this folder's files
        assert entry["output"] == str(out / f"{name}.glb")
        assert entry["trace"] == str(out / f"{name}.trace.jsonl")
    if how.startswith("copied"):  # the original folder is left as it was
        kept = json.loads((first_out / "manifest.json").read_text())["images"]
        assert kept["one.png"]["output"] == str(first_out / "one.glb")


def test_a_failed_rerun_keeps_the_done_record(rt, character, noisy, tmp_path):
    src = _two_images(character, tmp_path)
    out = tmp_path / "out"
    first = rt.run(["batch", src, "-o", out], timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = out / "manifest.json"
    before = json.loads(manifest.read_text())["images"]["one.png"]
    glb = (out / "one.glb").read_bytes()
    shutil.copy(noisy, src / "one.png")  # a changed picture that fails in the worker

    again = rt.run(["batch", src, "-o", out], timeout=300)
    assert again.returncode == 5, again.stderr[-3000:]
    items = _items(again)
    assert items["one.png"]["status"] == "failed"
    assert items["one.png"]["error"]["kind"] == "background_not_plain"
    assert items["two.png"]["status"] == "skipped"
    assert (out / "one.glb").read_bytes() == glb
    # the finished work (the GLB of the earlier picture) is still recorded as done, with the
    # earlier picture's sha256, so the next run tries the new picture again; the failure is
    # beside it
    entry = json.loads(manifest.read_text())["images"]["one.png"]
    assert entry["status"] == "done" and entry["sha256"] == before["sha256"]
    assert entry["last_failure"]["kind"] == "background_not_plain"
    assert entry["last_failure"]["status"] == "failed"
    assert isinstance(entry["last_failure"]["finished"], float)
    third = rt.run(["batch", src, "-o", out], timeout=300)
    assert _items(third)["one.png"]["status"] == "failed"
