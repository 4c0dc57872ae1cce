"""Helpers for the runner's tests: start the real ``python -m runner`` as a subprocess, parse its
NDJSON stdout, and watch its process tree with psutil."""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

if TYPE_CHECKING:  # Pillow is imported where it is used, so the conftest stays light
    from PIL import Image

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Finished:
    """A finished runner process: exit status, parsed events, raw stdout/stderr."""

    returncode: int
    events: list
    stdout: str
    stderr: str

    def kinds(self) -> list[str]:
        return [e["event"] for e in self.events]

    def last(self) -> dict:
        return self.events[-1]

    def first(self, name: str) -> dict:
        return next(e for e in self.events if e["event"] == name)


def parse_stdout(text: str) -> list[dict]:
    """Every stdout line must be one JSON object with "v" and "event" (the protocol)."""
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        assert line.strip(), f"blank line {number} on stdout"
        obj = json.loads(line)  # raises if a line is not JSON
        assert isinstance(obj, dict) and obj.get("v") == 1 and "event" in obj, line
        events.append(obj)
    return events


WORKER_HOOK = Path(__file__).resolve().parent / "worker_hook"


def env(worker_hook: str | None = None, supervisor_hook: str | None = None) -> dict:
    """The runner's environment: this checkout first on ``PYTHONPATH``; with ``worker_hook``
    / ``supervisor_hook`` (Python code), the worker / the supervisor runs that code at start-up
    (``worker_hook/sitecustomize.py``)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    hooks = {"RUNNER_TEST_WORKER_HOOK": worker_hook, "RUNNER_TEST_SUPERVISOR_HOOK": supervisor_hook}
    if any(code is not None for code in hooks.values()):
        e["PYTHONPATH"] = str(WORKER_HOOK) + os.pathsep + e["PYTHONPATH"]
        e.update({name: code for name, code in hooks.items() if code is not None})
    return e


def run_runner(args: list, *, timeout: float = 180, python: str = PY, cwd=None,
               worker_hook: str | None = None) -> Finished:
    """Run ``python -m runner ARGS`` to its end (stdin /dev/null) and parse its stdout;
    ``worker_hook``: Python code the worker runs first (see ``env``)."""
    proc = subprocess.run([python, "-m", "runner", *map(str, args)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout,
                          env=env(worker_hook), cwd=cwd or REPO)
    return Finished(proc.returncode, parse_stdout(proc.stdout), proc.stdout, proc.stderr)


class Live:
    """A runner started in the background; events arrive in ``queue`` as parsed dicts."""

    def __init__(self, args: list, *, stdin=subprocess.PIPE, python: str = PY,
                 supervisor_hook: str | None = None):
        self.proc = subprocess.Popen([python, "-m", "runner", *map(str, args)], stdin=stdin,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env(supervisor_hook=supervisor_hook), cwd=REPO)
        self.events: list[dict] = []
        self.lines: list[str] = []
        self.queue: queue.Queue = queue.Queue()
        self.stderr = ""
        self._out = threading.Thread(target=self._read, daemon=True)
        self._out.start()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._err.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            obj = json.loads(line)
            self.events.append(obj)
            self.queue.put(obj)
        self.queue.put(None)

    def _read_err(self) -> None:
        self.stderr = self.proc.stderr.read()

    def wait_for(self, name: str, timeout: float = 120) -> dict:
        """Block until an event called ``name`` arrives; fail on end of stream or timeout."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            assert left > 0, f"no {name!r} event within {timeout} s; stderr: {self.stderr[-2000:]}"
            try:
                ev = self.queue.get(timeout=left)
            except queue.Empty:
                continue
            assert ev is not None, (f"stream ended before {name!r}: "
                                    f"{[e['event'] for e in self.events]}; "
                                    f"stderr: {self.stderr[-2000:]}")
            if ev["event"] == name:
                return ev

    def wait_for_any(self, names, timeout: float = 120) -> dict:
        """Block until an event whose name is in ``names`` arrives (see ``wait_for``)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            assert left > 0, (f"no {names} event within {timeout} s: "
                              f"{[e['event'] for e in self.events]}")
            try:
                ev = self.queue.get(timeout=left)
            except queue.Empty:
                continue
            assert ev is not None, f"stream ended before {names}; stderr: {self.stderr[-2000:]}"
            if ev["event"] in names:
                return ev

    def finish(self, timeout: float = 60) -> Finished:
        self.proc.wait(timeout=timeout)
        self._out.join(timeout=10)
        self._err.join(timeout=10)
        return Finished(self.proc.returncode, list(self.events), "".join(self.lines), self.stderr)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants now."""
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (zombies count as gone; pid reuse is detected)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(procs: list[psutil.Process], within: float) -> list[psutil.Process]:
    """Poll until every process in ``procs`` is gone or ``within`` seconds passed; returns the
    survivors."""
    end = time.monotonic() + within
    while True:
        left = alive(procs)
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)


@contextmanager
def mounted_tmpfs(folder: Path, options: str, instead: str = ""):
    """A real tmpfs mounted on ``folder`` (an existing, empty folder) with mount ``options``
    (e.g. ``size=1m`` for a nearly full disk, ``ro,size=1m`` for a read-only one) for the
    ``with`` block, unmounted afterwards. Skips the test when it cannot be mounted (not root,
    or no mount permission in this container); ``instead`` is added to the skip reason (where
    else the behaviour is covered)."""
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root{instead}")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode()[-200:]}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def sentinel_output(tmp_path):
    """An existing output file with known bytes, to prove a failing job leaves it untouched."""
    path = tmp_path / "existing.glb"
    path.write_bytes(b"not touched by the runner\n")
    return path


def _character(size=(128, 192), bg=(255, 255, 255), fg=(40, 90, 160)) -> Image.Image:
    """A simple opaque 'character' (ellipse body + head) on a plain background, RGB."""
    from PIL import Image, ImageDraw

    w, h = size
    im = Image.new("RGB", size, bg)
    d = ImageDraw.Draw(im)
    d.ellipse([w * 0.25, h * 0.30, w * 0.75, h * 0.95], fill=fg)
    d.ellipse([w * 0.35, h * 0.05, w * 0.65, h * 0.32], fill=(200, 150, 110))
    return im


@pytest.fixture(scope="session")
def samples(tmp_path_factory, shared_images):
    """Bad and odd input files (SPEC §3), made here with Pillow, in a folder whose name has
    spaces and non-ASCII characters. Name → path."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("inputs") / "Bilder mit Leerzeichen ü é 漢字"
    root.mkdir()
    s = {}
    s["zero"] = root / "zero.png"
    s["zero"].write_bytes(b"")
    s["text"] = root / "notes.png"  # an image suffix, text inside
    s["text"].write_text("these are my notes, not a picture\n")
    goblin = next(p for p in shared_images if p.name == "typical_humanoid_goblin.png")
    data = goblin.read_bytes()
    s["truncated"] = root / "truncated.png"
    s["truncated"].write_bytes(data[: len(data) // 2])
    s["bomb"] = root / "bomb.png"  # 12000 x 12000 = 144 M pixels > Pillow's 89.5 M limit
    Image.new("1", (12000, 12000), 0).save(s["bomb"])
    s["tiny"] = root / "tiny.png"
    Image.new("RGBA", (1, 1), (255, 0, 0, 255)).save(s["tiny"])
    s["transparent"] = root / "transparent.png"
    Image.new("RGBA", (64, 64), (255, 0, 0, 0)).save(s["transparent"])

    base = _character()
    s["gray"] = root / "gray.png"
    base.convert("L").save(s["gray"])
    s["palette"] = root / "palette.png"  # palette with a transparent background index
    rgba = base.convert("RGBA")
    px = np.asarray(rgba).copy()
    px[(px[..., :3] == 255).all(axis=2), 3] = 0
    Image.fromarray(px).quantize(colors=16, method=Image.Quantize.FASTOCTREE).save(s["palette"])
    s["gray16"] = root / "gray16.png"
    g = np.asarray(base.convert("L")).astype(np.uint16) * 257  # 0..65535
    g[0:8, 0:8] = 32768  # a patch exactly half-way: must become 128, not clip to 255
    Image.fromarray(g).save(s["gray16"])
    s["cmyk"] = root / "cmyk.jpg"
    base.convert("CMYK").save(s["cmyk"], quality=95)
    s["gif"] = root / "animated.gif"
    frames = [base, _character(fg=(200, 30, 30)), _character(fg=(30, 200, 30))]
    frames[0].save(s["gif"], save_all=True, append_images=frames[1:], duration=100, loop=0)
    s["webp"] = root / "animated.webp"
    frames[0].save(s["webp"], save_all=True, append_images=frames[1:], duration=100,
                   lossless=True)
    # Stored 192 wide x 128 tall with EXIF orientation 6 (display = rotate 90° clockwise), so the
    # upright picture is 128 x 192; the stored left edge (red bar) ends up at the top.
    stored = _character().transpose(Image.Transpose.ROTATE_90)
    from PIL import ImageDraw
    ImageDraw.Draw(stored).rectangle([0, 0, 7, stored.height - 1], fill=(255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6
    s["exif"] = root / "rotated.jpg"
    stored.save(s["exif"], exif=exif.tobytes(), quality=95)
    s["unicode"] = root / "goblin ö 漢字.png"
    s["unicode"].write_bytes(data)
    return s


@pytest.fixture
def character(tmp_path) -> Path:
    """A small opaque character on plain white (RGB PNG, 128 × 192), made here: the builtin
    backend keys it from the border and succeeds in a few seconds."""
    path = tmp_path / "character.png"
    _character().save(path)
    return path


@pytest.fixture
def noisy(tmp_path) -> Path:
    """Random RGB noise (96 × 96 PNG): the builtin backend's worker fails on it with
    ``background_not_plain`` (an ``error`` from the worker, exit 44)."""
    import numpy as np
    from PIL import Image

    path = tmp_path / "noise.png"
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture(scope="session")
def rt():
    """The helpers above as one object (test modules cannot import conftest under
    ``--import-mode=importlib``): ``rt.run``, ``rt.Live``, ``rt.tree``, ``rt.alive``,
    ``rt.wait_gone``, ``rt.parse``, ``rt.env``, ``rt.mounted_tmpfs``, ``rt.PY``, ``rt.REPO``."""
    import types

    return types.SimpleNamespace(run=run_runner, Live=Live, tree=tree, alive=alive,
                                 wait_gone=wait_gone, parse=parse_stdout, env=env, PY=PY,
                                 REPO=REPO, Finished=Finished, mounted_tmpfs=mounted_tmpfs)
