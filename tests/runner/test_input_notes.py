"""What was done to the picture on the way in reaches the person: the
``input`` event's notes are printed on the runner's stderr (``runner: note: NAME: NOTE``) and
recorded in the batch manifest — real runs of the built-in backend on real odd images."""
from __future__ import annotations

import json
import shutil


def test_single_run_prints_each_note_on_stderr(rt, samples, tmp_path):
    fin = rt.run([samples["gif"], "-o", tmp_path / "gif.glb"])
    assert fin.returncode == 0, fin.stderr[-2000:]
    notes = fin.first("input")["notes"]
    assert "first of 3 frames used" in notes
    lines = [line for line in fin.stderr.splitlines() if line.startswith("runner: note: ")]
    assert lines == [f"runner: note: {samples['gif'].name}: {n}" for n in notes], fin.stderr


def test_batch_manifest_records_each_images_notes(rt, samples, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("exif", "cmyk", "gray"):
        shutil.copy(samples[name], folder / samples[name].name)
    out = tmp_path / "out"
    fin = rt.run(["batch", folder, "-o", out], timeout=300)
    assert fin.returncode == 0, fin.stderr[-2000:]
    entries = json.loads((out / "manifest.json").read_text())["images"]
    assert entries["rotated.jpg"]["notes"] == ["EXIF orientation 6 applied"]
    assert "converted from CMYK" in entries["cmyk.jpg"]["notes"]
    by_item = {e["item"]: e["notes"] for e in fin.events if e["event"] == "input"}
    assert (sorted(map(tuple, by_item.values()))
            == sorted(tuple(e["notes"]) for e in entries.values()))
    assert "runner: note: rotated.jpg: EXIF orientation 6 applied" in fin.stderr.splitlines()
