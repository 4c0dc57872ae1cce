"""Batch file names and disks: a file whose name is not valid UTF-8 is
processed and recorded like any other (the manifest stays UTF-8 JSON, the images after it
run, no temporary manifest is left, a resume skips it); a 100 % full disk fails the
writability probe before any work."""
from __future__ import annotations

import json
import os
import shutil

RAW = b"caf\xe9.png"  # Latin-1 "café.png": not valid UTF-8


def test_a_file_name_that_is_not_utf8_is_processed_and_recorded(rt, character, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(character, os.path.join(os.fsencode(folder), RAW))
    shutil.copyfile(character, folder / "z.png")  # after it in name order
    out = tmp_path / "out"
    fin = rt.run(["batch", folder, "-o", out])
    assert fin.returncode == 0, fin.stderr[-2000:]
    items = [e for e in fin.events if e["event"] == "batch_item"]
    assert [e["status"] for e in items] == ["done", "done"]
    manifest = json.loads((out / "manifest.json").read_bytes().decode("utf-8"))
    assert set(manifest["images"]) == {os.fsdecode(RAW), "z.png"}
    assert os.path.exists(os.path.join(os.fsencode(out), b"caf\xe9.glb"))
    assert not list(out.glob(".*"))  # no temporary manifest
    again = rt.run(["batch", folder, "-o", out])
    assert again.returncode == 0 and again.last()["skipped"] == 2, again.stderr[-2000:]


def _fill(folder) -> None:
    """Write into ``folder`` until its file system has no free block left (4 KiB writes, then
    single bytes for the last partial block)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (b"\0" * 4096, b"\0"):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
    finally:
        os.close(fd)


def test_a_full_disk_fails_before_any_work(rt, character, tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    with rt.mounted_tmpfs(mount, "size=1m"):
        _fill(mount)
        fin = rt.run([character, "-o", mount / "out.glb"])
        assert fin.returncode == 22 and fin.last()["kind"] == "disk_full", fin.stderr[-2000:]
        assert not [e for e in fin.events if e["event"] in ("guard", "stage", "memory")]
        assert [p.name for p in mount.iterdir()] == ["filler"]
