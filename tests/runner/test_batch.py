"""`python -m runner batch` over tests/data/images plus one corrupt file: every good image done,
one failure in the manifest, exit 5; a second run does nothing new."""
from __future__ import annotations

import json
import shutil

import pytest

from runner.batch.folder import output_names


@pytest.mark.slow
def test_batch_with_one_corrupt_file(rt, shared_images, tmp_path):
    # one PNG with alpha and the JPEG on white around the broken file: each kind of input the
    # batch meets, at two jobs' cost rather than every shared image's
    images = [next(p for p in shared_images if p.suffix == ".png"),
              next(p for p in shared_images if p.suffix.lower() in (".jpg", ".jpeg"))]
    src = tmp_path / "in ü"
    src.mkdir()
    for p in images:
        shutil.copy(p, src / p.name)
    (src / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 10)
    (src / "readme.txt").write_text("not an image suffix: ignored")
    out = tmp_path / "out"

    fin = rt.run(["batch", src, "-o", out], timeout=600)
    assert fin.returncode == 5, fin.stderr[-3000:]
    assert fin.events[0]["event"] == "hello" and fin.events[0]["mode"] == "batch"
    done = fin.last()
    assert done["event"] == "batch_done"
    assert (done["done"], done["failed"], done["skipped"]) == (len(images), 1, 0)
    assert not [e for e in fin.events if e["event"] in ("result", "error")]
    items = [e for e in fin.events if e["event"] == "batch_item"]
    assert [e["index"] for e in items] == list(range(1, len(images) + 2))
    broken = next(e for e in items if e["image"].endswith("broken.png"))
    assert broken["status"] == "failed" and broken["error"]["kind"] == "image_truncated"
    # per-image events carry their item index, and every job had its stages and memory
    for item in items:
        if item["status"] == "done":
            own = [e for e in fin.events if e.get("item") == item["index"]]
            assert [e["stage"] for e in own if e["event"] == "stage"] == fin.events[0]["stages"]
            assert any(e["event"] == "memory" for e in own)
            assert item["peak"] > 0 and item["seconds"] > 0

    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["images"]
    assert set(entries) == {p.name for p in images} | {"broken.png"}
    for p in images:
        e = entries[p.name]
        assert e["status"] == "done" and e["peak"] > 0 and e["seconds"] > 0
        assert open(e["output"], "rb").read(4) == b"glTF"
        assert (out / (p.stem + ".trace.jsonl")).exists()
    assert entries["broken.png"]["status"] == "failed"
    assert entries["broken.png"]["error"]["exit_code"] == 13
    assert not list(out.glob(".*"))  # no partial GLB, no temporary manifest
    mtimes = {p: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "manifest.json"}

    again = rt.run(["batch", src, "-o", out], timeout=120)
    assert again.returncode == 5
    done = again.last()
    assert (done["done"], done["failed"], done["skipped"]) == (0, 1, len(images))
    assert not [e for e in again.events if e["event"] in ("stage", "guard")]  # no worker started
    assert {p: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "manifest.json"} == mtimes


def test_batch_missing_folder(rt, tmp_path):
    fin = rt.run(["batch", tmp_path / "nope", "-o", tmp_path / "out"])
    assert fin.kinds() == ["hello", "error"]
    assert fin.last()["kind"] == "input_missing" and fin.returncode == 11


def test_batch_empty_folder(rt, tmp_path):
    (tmp_path / "in").mkdir()
    fin = rt.run(["batch", tmp_path / "in", "-o", tmp_path / "out"])
    assert fin.last()["kind"] == "input_missing" and "No images" in fin.last()["message"]


def test_output_names_unique(tmp_path):
    names = output_names([tmp_path / "a.png", tmp_path / "a.JPG", tmp_path / "b.png"])
    assert sorted(names.values()) == ["a-jpg", "a-png", "b"]
