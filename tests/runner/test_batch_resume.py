"""Batch resume notices changes: an image is skipped only when
its bytes (sha256) and the output-shaping options match the manifest; a changed image or
``--texture-size`` re-runs and replaces what the batch itself wrote; a GLB the manifest does not
attribute to the batch is left alone; the manifest gets the usual file mode; a file given as the
batch folder is named as a file."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat

import pytest


def _items(fin) -> dict:
    return {os.path.basename(e["image"]): e for e in fin.events if e["event"] == "batch_item"}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.slow
def test_resume_reruns_changed_images_and_options(rt, shared_images, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    a, b = shared_images[0], shared_images[1]
    shutil.copy(a, src / "one.png")
    shutil.copy(b, src / "two.png")
    out = tmp_path / "out"

    first = rt.run(["batch", src, "-o", out], timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["images"]["one.png"]
    assert entry["sha256"] == hashlib.sha256((src / "one.png").read_bytes()).hexdigest()
    # the options as parsed once: each default filled in (the table's 1024 px texture)
    assert entry["options"]["backend"] == "builtin" and entry["options"]["texture_size"] == 1024
    # the manifest has the mode every other new file gets (0666 & ~umask), not 0600
    mode = stat.S_IMODE((out / "manifest.json").stat().st_mode)
    assert mode == 0o666 & ~_umask() == stat.S_IMODE((out / "one.glb").stat().st_mode), oct(mode)

    # the same input, the same options: nothing runs
    same = rt.run(["batch", src, "-o", out], timeout=120)
    assert {k: v["status"] for k, v in _items(same).items()} == {"one.png": "skipped",
                                                                  "two.png": "skipped"}

    # replace one.png by a different picture: only it runs again, and its GLB is replaced
    old_glb = (out / "one.glb").read_bytes()
    shutil.copy(b, src / "one.png")
    changed = rt.run(["batch", src, "-o", out], timeout=300)
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert {k: v["status"] for k, v in _items(changed).items()} == {"one.png": "done",
                                                                     "two.png": "skipped"}
    assert (out / "one.glb").read_bytes() != old_glb
    # said before it is replaced: an event and a stderr line naming the GLB and why
    said = [e for e in changed.events if e["event"] == "warning" and e.get("source") ==
            "runner.batch"]
    assert [e["message"].split(" was made ")[0] for e in said] == ["one.glb"], said
    assert "image changed" in said[0]["cause"]
    assert "runner: warning: one.glb was made from another version of its image" in \
        changed.stderr
    assert json.loads((out / "one.trace.jsonl").read_text().splitlines()[0])["pid"] == \
        changed.events[0]["pid"]

    # other options that shape the output: every image runs again
    smaller = rt.run(["batch", src, "-o", out, "--texture-size", "512"], timeout=300)
    assert smaller.returncode == 0, smaller.stderr[-3000:]
    items = _items(smaller)
    assert {k: v["status"] for k, v in items.items()} == {"one.png": "done", "two.png": "done"}
    causes = {e["message"].split(" was made ")[0]: e["cause"] for e in smaller.events
              if e["event"] == "warning" and e.get("source") == "runner.batch"}
    assert causes == {f"{n}.glb": "with other options (texture_size 1024 → 512)"
                      for n in ("one", "two")}, causes
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["images"]["two.png"]["options"]["texture_size"] == 512


def test_changed_image_never_replaces_a_file_the_batch_did_not_write(rt, shared_images, tmp_path):
    """A GLB at the output path that the manifest does not record as the batch's own is left
    untouched (output_exists), even though the image changed."""
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(shared_images[0], src / "one.png")
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "one.glb"
    foreign.write_bytes(b"somebody else's model")
    (out / "manifest.json").write_text(json.dumps({"version": 1, "images": {"one.png": {
        "image": str(src / "one.png"), "output": str(out / "elsewhere.glb"), "trace": None,
        "status": "done", "sha256": "0" * 64, "options": {}}}}))
    fin = rt.run(["batch", src, "-o", out], timeout=120)
    assert fin.returncode == 5
    assert _items(fin)["one.png"]["error"]["kind"] == "output_exists"
    assert foreign.read_bytes() == b"somebody else's model"


def test_batch_given_a_file_says_it_is_a_file(rt, shared_images, tmp_path):
    fin = rt.run(["batch", shared_images[0], "-o", tmp_path / "x"])
    err = fin.last()
    assert err["event"] == "error" and err["kind"] == "input_missing"
    assert "is a file, not a folder" in err["message"] and "does not exist" not in err["message"]
    assert "python -m runner IMAGE" in err["hint"]
