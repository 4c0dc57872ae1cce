"""A damaged batch manifest is kept beside it (renamed, said on stderr) and rebuilt from the GLBs
and their traces, so the images already done are skipped, not failed with ``output_exists``; so
is a deleted one, an empty file, and one without records; a manifest from a newer version is
refused with ``manifest_newer``, touching nothing."""
from __future__ import annotations

import json
import os
import shutil

import pytest


def _items(fin) -> dict:
    return {os.path.basename(e["image"]): e for e in fin.events if e["event"] == "batch_item"}


def _folder(shared_images, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(shared_images[0], src / "one.png")
    shutil.copy(shared_images[1], src / "two.png")
    return src, tmp_path / "out"


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],           # cut off mid-write
    lambda text: "{\"version\": 1, \"images\": [}",  # corrupt JSON
    lambda text: "[1, 2, 3]\n",                    # JSON, but not a manifest
    # a manifest whose one record is not a record: the others must not fail for it
    lambda text: '{"version":1,"images":{"göblin.png":"x"}}',
    lambda text: text.replace('"status": "done"', '"status": 5', 1),
])
def test_a_damaged_manifest_is_kept_and_rebuilt_from_glbs_and_traces(rt, shared_images, tmp_path,
                                                                     damage):
    src, out = _folder(shared_images, tmp_path)
    first = rt.run(["batch", src, "-o", out], timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = out / "manifest.json"
    before = json.loads(manifest.read_text())["images"]
    damaged = damage(manifest.read_text())
    manifest.write_text(damaged)
    (out / "two.glb").unlink()  # not provable any more: it must run again

    again = rt.run(["batch", src, "-o", out], timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {k: v["status"] for k, v in _items(again).items()} == {"one.png": "skipped",
                                                                   "two.png": "done"}
    (kept,) = [p for p in out.iterdir() if p.name.startswith("manifest.json.damaged-")]
    assert kept.read_text() == damaged  # the damaged file, byte for byte
    assert f"kept as {kept.name}" in again.stderr and "rebuilt 1 finished image" in again.stderr
    after = json.loads(manifest.read_text())
    one = after["images"]["one.png"]
    assert one["status"] == "done" and one["rebuilt"] is True
    for key in ("output", "trace", "sha256", "options"):
        assert one[key] == before["one.png"][key], key
    assert after["images"]["two.png"]["status"] == "done"


@pytest.fixture(scope="module")
def finished_batch(shared_images, tmp_path_factory):
    """A batch of two images run once: ``(src, out, pristine)``; ``pristine`` is a copy of
    ``out`` as the batch left it, for each test to restore ``out`` from (same path: the folder
    is not moved)."""
    base = tmp_path_factory.mktemp("gone")
    src, out = _folder(shared_images, base)
    return src, out, base / "pristine"


@pytest.mark.parametrize("gone", ["deleted", "empty_file", "no_records", "no_images_key"])
def test_a_deleted_or_empty_manifest_is_rebuilt_and_the_done_images_skipped(
        rt, finished_batch, gone):
    src, out, pristine = finished_batch
    if not pristine.exists():
        first = rt.run(["batch", src, "-o", out], timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        assert "rebuilt" not in first.stderr  # a new folder: nothing to rebuild, nothing said
        shutil.copytree(out, pristine)
    shutil.rmtree(out)
    shutil.copytree(pristine, out)
    manifest = out / "manifest.json"
    before = json.loads(manifest.read_text())["images"]
    if gone == "deleted":
        manifest.unlink()
    else:
        manifest.write_text({"empty_file": "", "no_records": '{"version": 1, "images": {}}',
                             "no_images_key": '{"version": 1}'}[gone])

    again = rt.run(["batch", src, "-o", out], timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {k: v["status"] for k, v in _items(again).items()} == {"one.png": "skipped",
                                                                   "two.png": "skipped"}
    assert "output_exists" not in again.stderr
    said = [line for line in again.stderr.splitlines() if "rebuilt 2 finished image(s)" in line]
    assert len(said) == 1 and str(manifest) in said[0], again.stderr[-3000:]
    after = json.loads(manifest.read_text())["images"]
    for name in ("one.png", "two.png"):
        assert after[name]["status"] == "done" and after[name]["rebuilt"] is True
        for key in ("output", "trace", "sha256", "options"):
            assert after[name][key] == before[name][key], (name, key)


def test_a_manifest_from_a_newer_version_is_refused_touching_nothing(rt, shared_images, tmp_path):
    src, out = _folder(shared_images, tmp_path)
    out.mkdir()
    newer = {"version": 99, "images": {"one.png": {"status": "done", "future": [1, 2]}},
             "added_in_v99": True}
    text = json.dumps(newer)
    (out / "manifest.json").write_text(text)
    before = sorted(p.name for p in out.iterdir())
    proc = rt.run(["batch", src, "-o", out], timeout=120)
    assert proc.returncode == 24, proc.stderr[-3000:]
    error = proc.events[-1]
    assert error["event"] == "error" and error["kind"] == "manifest_newer"
    assert "version 99" in error["message"] and "runner: manifest_newer:" in proc.stderr
    assert (out / "manifest.json").read_text() == text
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_record_missing_from_an_intact_manifest_is_rebuilt_from_its_trace(rt, finished_batch):
    """One image's record lost (the rest intact): its GLB and trace are this batch's, so it is
    skipped on every rerun, not failed with ``output_exists``; the other records are kept."""
    src, out, pristine = finished_batch
    if not pristine.exists():
        first = rt.run(["batch", src, "-o", out], timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        shutil.copytree(out, pristine)
    shutil.rmtree(out)
    shutil.copytree(pristine, out)
    manifest = out / "manifest.json"
    data = json.loads(manifest.read_text())
    lost = data["images"].pop("one.png")
    kept = data["images"]["two.png"]
    manifest.write_text(json.dumps(data))

    said = []
    for _ in range(2):
        again = rt.run(["batch", src, "-o", out], timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert {k: v["status"] for k, v in _items(again).items()} == {"one.png": "skipped",
                                                                       "two.png": "skipped"}
        said.append([line for line in again.stderr.splitlines() if "rebuilt" in line])
    assert len(said[0]) == 1 and "had no record of 1 image(s)" in said[0][0] \
        and "rebuilt 1 finished image(s)" in said[0][0], said
    assert said[1] == [], said  # the first rerun wrote the record back: nothing more to say
    after = json.loads(manifest.read_text())["images"]
    assert after["two.png"] == kept  # the intact record, untouched
    assert after["one.png"]["status"] == "done" and after["one.png"]["rebuilt"] is True
    for key in ("output", "trace", "sha256", "options"):
        assert after["one.png"][key] == lost[key], key
    assert not [p for p in out.iterdir() if ".damaged-" in p.name]
