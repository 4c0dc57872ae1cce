"""Jobs that reach the worker: odd but valid images normalised and turned into a GLB, the
guard's stop and timeout, disk full while writing, and the built-in backend's own refusals —
each with its documented kind and exit code, and no existing file damaged."""
from __future__ import annotations

import errno
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from meshfacts.errors import KINDS
from runner.worker.run import _classify

SENTINEL = b"not touched by the runner\n"


@pytest.mark.slow
def test_odd_but_valid_images(rt, samples, tmp_path):
    """Grayscale, palette, 16-bit, CMYK JPEG, animated GIF/WebP, EXIF-rotated JPEG, a path with
    spaces and non-ASCII characters: exit 0 and a GLB, and the `input` event says what was
    converted (the pixel values themselves are checked in test_inputs.py)."""
    names = ["gray", "palette", "gray16", "cmyk", "gif", "webp", "exif", "unicode"]
    out_dir = tmp_path / "Ausgabe ü 出力"
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(names, pool.map(
            lambda n: rt.run([samples[n], "-o", out_dir / f"{n} ü.glb"]), names), strict=True))
    for name, fin in runs.items():
        assert fin.returncode == 0, (name, fin.last(), fin.stderr[-2000:])
        result = fin.last()
        assert result["event"] == "result"
        assert open(result["output"], "rb").read(4) == b"glTF"
        info = fin.first("input")
        assert info["path"] == str(samples[name])
    assert runs["gray"].first("input")["mode"] == "L"
    assert runs["palette"].first("input")["had_alpha"] is True
    assert runs["gray16"].first("input")["mode"].startswith("I;16")
    assert runs["cmyk"].first("input")["mode"] == "CMYK"
    assert runs["gif"].first("input")["frames"] == 3 == runs["webp"].first("input")["frames"]
    exif = runs["exif"].first("input")
    assert (exif["orientation"], exif["width"], exif["height"]) == (6, 128, 192)
    # the mesh follows the upright picture: taller than wide, as the rotated silhouette is
    dims = runs["exif"].last()["info"]
    assert dims["height_m"] > dims["width_m"] * 1.2, dims


def test_guard_stop(rt, shared_images, sentinel_output):
    """A budget the run cannot meet (available memory must stay above 100 %): the real guard
    stops the worker's group; kind guard_stopped, exit 3, existing output untouched, trace kept
    with the guard's decision."""
    fin = rt.run([shared_images[0], "-o", sentinel_output, "--overwrite", "--kill-free", "100%",
                  "--kill-samples", "1", "--poll", "0.1"])
    err = fin.last()
    assert err["kind"] == "guard_stopped" and fin.returncode == 3, fin.stderr[-2000:]
    assert "100 %" in err["message"]
    stopped = [e for e in fin.events if e["event"] == "guard" and e["state"] == "stopped"]
    assert stopped and stopped[0]["readings"]["available"] > 0
    assert sentinel_output.read_bytes() == SENTINEL
    assert not list(sentinel_output.parent.glob(".*partial*"))
    lines = sentinel_output.with_suffix(".trace.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "guard_stopped"


def test_guard_timeout(rt, shared_images, tmp_path):
    fin = rt.run([shared_images[0], "-o", tmp_path / "a.glb", "--wait-free", "99.99%",
                  "--start-timeout", "0.5"])
    assert fin.last()["kind"] == "guard_timeout" and fin.returncode == 4
    states = [e["state"] for e in fin.events if e["event"] == "guard"]
    assert states[0] == "waiting" and states[-1] == "timeout" and "started" not in states
    assert not (tmp_path / "a.glb").exists()
    # the job never started: no trace is left behind, and the error says there is none
    assert fin.last()["trace"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(rt, tmp_path):
    """A 1 MiB tmpfs: the GLB (several MB) cannot fit, the up-front probe file can."""
    folder = tmp_path / "tiny disk"
    folder.mkdir()
    with rt.mounted_tmpfs(folder, "size=1m", "; the ENOSPC mapping is covered by "
                          "test_enospc_anywhere_in_the_chain_is_disk_full"):
        yield folder


def test_disk_full_while_writing(rt, shared_images, tmp_path, tiny_disk):
    """A real ENOSPC from a full file system while the worker writes the GLB: kind disk_full,
    exit 22, the partial file removed (the disk is empty again), the trace (elsewhere) kept."""
    out = tiny_disk / "goblin.glb"
    trace = tmp_path / "goblin.trace.jsonl"
    fin = rt.run([shared_images[0], "-o", out, "--trace", trace])
    err = fin.last()
    assert err["kind"] == "disk_full" and fin.returncode == 22, (err, fin.stderr[-2000:])
    assert err["hint"].startswith("Free disk space")
    # a known kind: one human line on stderr, no traceback (PROTOCOL.md)
    assert "Traceback" not in fin.stderr and "runner: disk_full: No space left" in fin.stderr
    assert os.listdir(tiny_disk) == []
    assert json.loads(trace.read_text().splitlines()[-1])["kind"] == "disk_full"
    assert any(e["event"] == "stage" and e["stage"] == "export" for e in fin.events)


def test_enospc_anywhere_in_the_chain_is_disk_full():
    """Unit check of the mapping used above (runs everywhere, also without root)."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/x/out.glb")
        except OSError as inner:
            raise RuntimeError("export failed") from inner
    except RuntimeError as exc:
        err = _classify(exc, None)
    assert err.kind == "disk_full" and "/x/out.glb" in err.message
    assert _classify(ValueError("boom"), None).kind == "backend_failed"


def test_backend_refusals_have_their_kinds(rt, tmp_path):
    """The built-in backend's own exceptions (no plain border; nothing but background) arrive
    as their kinds, with the backend's hint, not as backend_failed."""
    rng = np.random.default_rng(0)
    noise = tmp_path / "noise.png"
    Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(noise)
    plain = tmp_path / "plain.png"
    Image.new("RGB", (96, 96), (250, 250, 250)).save(plain)
    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lambda p: rt.run([p, "-o", tmp_path / f"{p.stem}.glb"]), [noise, plain])
    for fin, kind in ((a, "background_not_plain"), (b, "empty_matte")):
        err = fin.last()
        assert err["kind"] == kind and fin.returncode == KINDS[kind].exit_code, \
            (err, fin.stderr[-1500:])
        assert err["hint"] and "Traceback" not in fin.stdout
        # a known kind: one clear line on stderr, never a traceback (PROTOCOL.md)
        assert "Traceback" not in fin.stderr, fin.stderr[-2000:]
        assert f"runner: {kind}: {err['message']}" in fin.stderr
    assert not list(tmp_path.glob("*.glb")) and not list(tmp_path.glob(".*partial*"))
