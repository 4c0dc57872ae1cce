"""A full output drive during a Pixal3D job: a real 2 MiB tmpfs almost filled
by a filler file, so the writability probe passes and the hand-over ``.npz`` (``numpy.savez``,
a ``ZipFile``) written into the job folder next to the output hits ENOSPC. The job ends
``disk_full`` (exit 22) and stderr holds nothing but the runner's and the guard's own lines —
no "Exception ignored in ZipFile.__del__" traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture
def nearly_full(tmp_path):
    folder = tmp_path / "tiny disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode()[-200:]}")
    try:
        (folder / "filler").write_bytes(b"\0" * 1_800_000)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_disk_full_says_only_the_runners_lines(standin_dir, standin_weights, rgb_image, tmp_path,
                                               repo_root, nearly_full):
    env = {**os.environ, **standin_weights.env, "PIXAL3D_DEVICE": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "runner", str(rgb_image),
                           "-o", str(nearly_full / "a.glb"),
                           "--trace", str(tmp_path / "a.trace.jsonl"), "--backend", "pixal3d",
                           "--pixal3d-dir", str(standin_dir), "--texture-size", "512"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=repo_root)
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["kind"] == "disk_full" and proc.returncode == 22, (last, proc.stderr[-3000:])
    foreign = [line for line in proc.stderr.splitlines()
               if not line.startswith(("runner: ", "guard: "))]
    assert foreign == [], proc.stderr[-3000:]
    assert sorted(os.listdir(nearly_full)) == ["filler"]  # the job folder and partial GLB removed
