"""The headless script as ``make demo`` runs it: ``python blender_addon/headless.py …`` with the
bpy module of the .venv and the real runner (built-in backend).

``blender -b -P headless.py -- …`` (the Blender application) is not tested here: this machine
has only the bpy module, no Blender binary.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image

pytestmark = pytest.mark.blender
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "blender_addon" / "headless.py"
PY = sys.executable

READ_BLEND = """
import bpy, json, sys
bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
print("BLEND " + json.dumps([{"name": o.name, "type": o.type,
    "collections": [c.name for c in o.users_collection],
    "props": {k: o[k] for k in o.keys() if k.startswith("image_to_mesh_")}}
    for o in bpy.data.objects]))
"""


def run(*args, timeout=180):
    return subprocess.run([PY, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_headless_writes_glb_blend_and_a_preview_of_the_character(tmp_path, shared_images):
    src = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    glb, blend, png = tmp_path / "g.glb", tmp_path / "g.blend", tmp_path / "g.png"
    proc = run(src, "--glb", glb, "--blend", blend, "--preview", png, "--texture-size", 512,
               "--resolution", 384)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert glb.stat().st_size > 10_000 and glb.read_bytes()[:4] == b"glTF"
    assert (tmp_path / "g.trace.jsonl").stat().st_size > 0

    out = subprocess.run([PY, "-c", READ_BLEND, str(blend)], capture_output=True, text=True,
                         timeout=60)
    objs = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("BLEND "))[6:])
    meshes = [o for o in objs if o["type"] == "MESH"]
    assert [m["name"] for m in meshes] == [src.stem]
    assert meshes[0]["collections"] == ["Image to Mesh"]
    assert meshes[0]["props"]["image_to_mesh_backend"] == "builtin"
    assert not [o for o in objs if o["type"] == "EMPTY"]

    # The preview shows a textured character, not an empty or grey frame: many pixels differ
    # from the background (the corner colour) and the goblin's green dominates them.
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert rgb.shape == (384, 384, 3)
    bg = rgb[2, 2]
    fg = np.abs(rgb - bg).sum(axis=2) > 40
    assert 0.08 < fg.mean() < 0.8, fg.mean()
    r, g, b = (rgb[..., i][fg].mean() for i in range(3))
    assert g > r and g > b, (r, g, b)
    # The character is framed: its bounding box is not cut by the image border.
    ys, xs = np.nonzero(fg)
    assert ys.min() > 0 and xs.min() > 0 and ys.max() < 383 and xs.max() < 383


def _matte_mean(path: Path) -> np.ndarray:
    """Mean RGB (0-255) of the picture's opaque pixels (alpha > 127): its matte."""
    rgba = np.asarray(Image.open(path).convert("RGBA")).astype(float)
    return rgba[..., :3][rgba[..., 3] > 127].mean(axis=0)


def _character_mean(png: Path) -> np.ndarray:
    """Mean RGB (0-255) of the character in a preview: pixels that differ from the background
    (the corner colour), eroded by 3 px so edge pixels blended with the background do not
    count."""
    from scipy import ndimage

    rgb = np.asarray(Image.open(png).convert("RGB")).astype(float)
    fg = ndimage.binary_erosion(np.abs(rgb - rgb[2, 2]).sum(axis=2) > 40, iterations=3)
    assert fg.mean() > 0.03, "no character in the preview"
    return rgb[fg].mean(axis=0)


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["typical_humanoid_goblin", "typical_humanoid_dwarf"])
def test_preview_colours_match_the_picture(tmp_path, shared_images, stem):
    """The preview shows the picture's colours: the character's mean colour is within 4 % of
    the full scale (10 of 255) of the picture's matte mean, per channel. With Blender's
    default AgX view transform and studio lighting the goblin came out 13-16 % darker."""
    src = next(p for p in shared_images if p.stem == stem)
    png = tmp_path / "p.png"
    proc = run(src, "--preview", png, "--texture-size", 512, "--resolution", 320)
    assert proc.returncode == 0, proc.stderr[-3000:]
    picture, preview = _matte_mean(src), _character_mean(png)
    assert np.abs(preview - picture).max() <= 0.04 * 255, (picture.round(1), preview.round(1))


@pytest.mark.parametrize("content, code", [
    (b"this is not a picture\n" * 100, 10),                  # not_an_image
    (b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 100, 13),      # image_truncated
])
def test_corrupt_image_gives_one_clear_line_and_nonzero_exit(tmp_path, content, code):
    bad = tmp_path / "broken.png"
    bad.write_bytes(content)
    proc = run(bad, "--blend", tmp_path / "out.blend", timeout=120)
    assert proc.returncode == code, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("image-to-mesh: error:")]
    assert len(errors) == 1, proc.stderr
    assert "broken.png" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out.blend").exists()


def test_existing_output_is_not_overwritten(tmp_path, shared_images):
    blend = tmp_path / "keep.blend"
    blend.write_bytes(b"user's file")
    proc = run(shared_images[0], "--blend", blend, timeout=60)
    assert proc.returncode == 20
    assert proc.stderr.strip().splitlines()[-1].startswith("image-to-mesh: error:")
    assert "--overwrite" in proc.stderr
    assert blend.read_bytes() == b"user's file"


def test_missing_outputs_is_a_usage_error(tmp_path, shared_images):
    proc = run(shared_images[0], timeout=60)
    assert proc.returncode == 2
    assert "give at least one of --glb, --blend, --preview" in proc.stderr


def test_headless_runs_from_the_unpacked_extension(tmp_path):
    """Inside the installed extension the package is named image_to_mesh and the runner comes
    from its runtime/ folder; a missing image is refused there with the same single line."""
    import zipfile

    dist = tmp_path / "dist"
    built = subprocess.run([PY, "-m", "blender_addon.packaging.build", "--out", str(dist),
                            "--platform", "linux-x64"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    ext = tmp_path / "extensions" / "image_to_mesh"
    zipfile.ZipFile(built.stdout.strip()).extractall(ext)
    proc = subprocess.run([PY, str(ext / "headless.py"), str(tmp_path / "nope.png"), "--glb",
                           str(tmp_path / "x.glb")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 11
    assert proc.stderr.strip().splitlines() == [
        f"image-to-mesh: error: Input image not found: {tmp_path / 'nope.png'}"]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import image_to_mesh.runner_client.config as c; print(c.runtime_dir())")
    where = subprocess.run([PY, "-c", code, str(ext.parent)], capture_output=True, text=True,
                           timeout=60)
    assert where.stdout.strip() == str(ext / "runtime")


# -- options checked before anything runs ---------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--preview", "p.gif"], ["--preview", ".gif", ".png", ".jpg"]),
    (["--preview", "p"], ["--preview", "without a suffix", ".png"]),
    (["--preview", "p.png", "--resolution", "0"], ["--resolution 0", "64 to 8192"]),
    (["--preview", "p.png", "--resolution", "63"], ["--resolution 63", "64 to 8192"]),
    (["--preview", "p.png", "--resolution", "8193"], ["--resolution 8193", "64 to 8192"]),
    (["--preview", "p.png", "--resolution", "100000"], ["--resolution 100000", "64 to 8192"]),
])
def test_preview_name_and_resolution_are_refused_before_the_run(tmp_path, shared_images, args,
                                                                 words):
    """A suffix Blender would not write as named, or a size outside 64..8192 px, is a usage
    error (exit 2) before the runner starts: no GLB, no trace, no stray render in the folder."""
    args = [str(tmp_path / a) if a.startswith("p") else a for a in args]
    proc = run(shared_images[0], "--glb", tmp_path / "g.glb", *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    for w in words:
        assert w in last, last
    assert "stage" not in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("outputs, words", [
    # an output that is the input picture, even with --overwrite
    ({"--blend": "in.png"}, ["--blend", "is the input image", "source picture"]),
    ({"--preview": "in.png"}, ["--preview", "is the input image"]),
    ({"--glb": "g.glb", "--trace": "in.png"}, ["--trace", "is the input image"]),
    ({"--glb": "link.png"}, ["--glb", "is the input image"]),  # a hard link to the input
    # two outputs, or an output and the runner's trace, on one file
    ({"--glb": "same.glb", "--blend": "same.glb"}, ["--blend", ".blend"]),
    ({"--glb": "t.glb", "--blend": "t.trace.jsonl"}, ["--blend", ".blend"]),
    ({"--glb": "t.glb", "--preview": "t.trace.png", "--trace": "t.trace.png"},
     ["--preview and --trace both name"]),
    ({"--blend": "b.blend", "--trace": "b.blend"}, ["--blend and --trace both name"]),
    ({"--glb": "t.glb", "--blend": "sub/../t.glb.blend", "--trace": "t.glb.blend"},
     ["--blend and --trace both name"]),
])
@pytest.mark.parametrize("overwrite", [False, True])
def test_outputs_that_clash_with_the_input_or_each_other_are_refused(tmp_path, shared_images,
                                                                      outputs, words, overwrite):
    """Exit 2 before the runner starts, whatever --overwrite says; the input and every file in
    the folder are byte-for-byte as before."""
    src = tmp_path / "in.png"
    src.write_bytes(shared_images[0].read_bytes())
    (tmp_path / "sub").mkdir()
    import os
    os.link(src, tmp_path / "link.png")
    (tmp_path / "same.glb").write_bytes(b"earlier GLB")
    (tmp_path / "t.trace.jsonl").write_bytes(b"earlier trace")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    args = [a for flag, name in outputs.items() for a in (flag, tmp_path / name)]
    proc = run(src, *args, *(["--overwrite"] if overwrite else []), timeout=60)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("image-to-mesh: error:"), last
    for w in words:
        assert w in last, last
    assert "stage" not in proc.stderr and "Traceback" not in proc.stderr
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before


def test_preview_format_follows_the_suffix_and_nothing_else_is_left(tmp_path, shared_images):
    """``--preview p.jpg`` writes a JPEG at that very name (no ``p.png`` beside it), at the
    smallest accepted resolution."""
    src = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    proc = run(src, "--preview", tmp_path / "p.jpg", "--texture-size", 512, "--resolution", 64,
               timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jpg"]
    with Image.open(tmp_path / "p.jpg") as img:
        assert img.format == "JPEG" and img.size == (64, 64)


RENDER = """
import sys
import time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import bpy
from blender_addon.background import cli as headless
out = Path(sys.argv[2])
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "BLENDER_WORKBENCH"
scene.render.resolution_x = scene.render.resolution_y = 64
bpy.ops.mesh.primitive_cube_add()
# 1. no camera: Blender refuses to render ("Cannot render, no camera")
try:
    headless.render_preview(scene, out / "nocam.png", bpy)
    print("NO FAILURE")
except headless.Failure as exc:
    print(f"FAILURE {exc.code} {exc}")
# 2. every accepted suffix, with a camera
cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
scene.collection.objects.link(cam)
scene.camera = cam
cam.location = (0, -8, 0)
cam.rotation_euler = (1.5708, 0, 0)
for suffix in headless.PREVIEW_FORMATS:
    headless.render_preview(scene, out / f"p{suffix}", bpy)
print("DONE")
"""


def test_render_failure_is_one_line_and_every_format_is_written(tmp_path):
    """``render_preview`` against the real bpy: a render Blender refuses becomes one
    ``Failure`` line naming the reason and what to do, with nothing left in the folder; each
    accepted suffix gives an image of the format it names, at exactly that name."""
    proc = subprocess.run([PY, "-c", RENDER, str(SCRIPT.parent), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert "DONE" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    failure = next(ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILURE", "NO ")))
    assert failure.startswith("FAILURE 1 The preview render failed: Cannot render, no camera."), \
        failure
    assert "--resolution" in failure
    pil = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".tif": "TIFF",
           ".tiff": "TIFF", ".bmp": "BMP"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"p{s}" for s in pil)
    for suffix, fmt in pil.items():
        with Image.open(tmp_path / f"p{suffix}") as img:
            assert (img.format, img.size) == (fmt, (64, 64))


def test_bad_python_names_the_command_line_option(tmp_path, shared_images):
    """From the command line the interpreter error points at ``--python``, not at the add-on's
    preferences window."""
    proc = run(shared_images[0], "--glb", tmp_path / "g.glb", "--python", tmp_path / "nope",
               timeout=60)
    assert proc.returncode == 30, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("image-to-mesh: error: --python not found: ")
    assert "Set --python to" in line
    assert "Preferences" not in line
    folder = run(shared_images[0], "--glb", tmp_path / "g.glb", "--python", tmp_path, timeout=60)
    assert folder.returncode == 30 and "--python" in folder.stderr


def test_a_runner_that_dies_gets_a_command_line_hint(tmp_path, shared_images):
    """An interpreter that exits without an answer is
    named with what to do from the command line, not the add-on's "Check" button and system
    console."""
    proc = run(shared_images[0], "--glb", tmp_path / "g.glb", "--python", "/bin/false",
               timeout=60)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "without reporting a result" in line
    assert "`/bin/false -m runner check`" in line and "--python" in line
    assert "preferences" not in line and "system console" not in line


def test_an_off_value_is_named_as_off(tmp_path, shared_images):
    """``--swap-budget-gb`` 0 means off (its help says so); the range message must agree."""
    proc = run(shared_images[0], "--glb", tmp_path / "g.glb", "--swap-budget-gb", "-3",
               timeout=60)
    assert proc.returncode == 2
    assert "or 0 for off" in proc.stderr and "for the default" not in proc.stderr
    assert "(default: 8); 0: off" in run("--help", timeout=60).stdout.replace("\n", " ")


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "Ctrl-C"),
                                             (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_stops_the_runner_with_one_line(tmp_path, shared_images, sig, code, name):
    """SIGINT and SIGTERM during the run: the runner and its worker are stopped, one line says
    what happened and what to do, status 128 + signal, no output written."""
    src = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    glb = tmp_path / "g.glb"
    proc = subprocess.Popen([PY, str(SCRIPT), str(src), "--glb", str(glb), "--texture-size",
                             "2048"], cwd=REPO, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:  # wait until the runner reports its first stage
        lines.append(line)
        if "stage" in line:
            break
    me = psutil.Process(proc.pid)
    children = me.children(recursive=True)
    assert children, "the runner should be running"
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == code, "".join(lines) + rest
    errors = [ln for ln in rest.splitlines() if ln.startswith("image-to-mesh: error:")]
    assert len(errors) == 1, rest
    assert f"cancelled by {name}" in errors[0] and "Run the same command again" in errors[0]
    assert "no output was written" in errors[0]
    assert "Traceback" not in rest
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, alive
    assert not glb.exists()


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "Ctrl-C"),
                                             (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_during_the_preview_render_is_prompt(tmp_path, shared_images, sig, code, name):
    """SIGINT and SIGTERM while the preview renders (they waited for the render,
    35 s at 4096 px): the render's own process is killed at once, the finished GLB is kept and
    named, no preview and no hidden render folder is left. 4096 px renders for about 9 s
    here (Mesa's software renderer); the signal goes right when the render starts."""
    src = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    glb, png = tmp_path / "g.glb", tmp_path / "g.png"
    proc = subprocess.Popen([PY, str(SCRIPT), str(src), "--glb", str(glb), "--preview", str(png),
                             "--texture-size", "512", "--resolution", "4096"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:  # wait until the render process says the render starts
        lines.append(line)
        if line.startswith("image-to-mesh: preview: rendering"):
            break
    renderers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                 if "preview_render.py" in " ".join(c.cmdline())]
    assert renderers, "".join(lines)
    sent = time.monotonic()
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == code, "".join(lines) + rest
    took = time.monotonic() - sent
    assert took < 5, took
    errors = [ln for ln in rest.splitlines() if ln.startswith("image-to-mesh: error:")]
    assert len(errors) == 1, rest
    assert f"cancelled by {name}" in errors[0] and f"finished outputs are kept: {glb}" in errors[0]
    assert "Traceback" not in rest
    _, alive = psutil.wait_procs(renderers, timeout=5)
    assert not alive, alive
    assert glb.read_bytes()[:4] == b"glTF"
    assert not png.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.glb", "g.trace.jsonl"]


def test_headless_prints_the_input_notes(tmp_path):
    """An EXIF-rotated JPEG: the runner's note reaches the headless script's stderr."""
    from PIL import ImageDraw

    stored = Image.new("RGB", (192, 128), (255, 255, 255))
    ImageDraw.Draw(stored).ellipse([40, 24, 150, 104], fill=(40, 140, 60))
    exif = Image.Exif()
    exif[0x0112] = 6
    src = tmp_path / "rotated.jpg"
    stored.save(src, exif=exif.tobytes(), quality=95)
    proc = run(src, "--glb", tmp_path / "r.glb", "--texture-size", 512)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "image-to-mesh: note: EXIF orientation 6 applied" in proc.stderr.splitlines(), \
        proc.stderr


@pytest.mark.slow
def test_headless_says_when_the_worker_stalls_and_resumes(tmp_path, shared_images):
    """A real worker SIGSTOPped for 11 s (the runner's threshold is 10 s), then SIGCONT: the
    headless script prints the runner's stalled and resumed events."""
    src = next(p for p in shared_images if p.stem == "typical_humanoid_goblin")
    proc = subprocess.Popen([PY, str(SCRIPT), str(src), "--glb", str(tmp_path / "g.glb")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        worker = None
        deadline = time.monotonic() + 60
        while worker is None and time.monotonic() < deadline:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if "runner.worker.run" in " ".join(child.cmdline()):
                        worker = child
                except psutil.Error:
                    continue
            time.sleep(0.05)
        assert worker is not None, "no worker started"
        worker.send_signal(signal.SIGSTOP)
        time.sleep(11.5)
        worker.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    lines = err.splitlines()
    stalled = [ln for ln in lines if ln.startswith("image-to-mesh: Stalled: the process")]
    assert len(stalled) == 1 and "is stopped" in stalled[0], err[-3000:]
    assert lines.index(stalled[0]) < lines.index("image-to-mesh: resumed: the worker moves again")


def test_missing_output_folders_are_created_as_the_runner_does(tmp_path, shared_images):
    """``--glb missing/deeper/x.glb`` makes the folders (the runner would make the GLB's), and
    the job writes its GLB and trace there."""
    glb = tmp_path / "missing" / "deeper" / "x.glb"
    proc = run(shared_images[0], "--glb", glb, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert glb.stat().st_size > 0 and glb.with_name("x.trace.jsonl").exists()


def test_an_output_folder_that_is_a_file_is_refused_before_the_run(tmp_path, shared_images):
    (tmp_path / "taken").write_bytes(b"a file")
    proc = run(shared_images[0], "--glb", tmp_path / "taken" / "x.glb", timeout=60)
    assert proc.returncode == 21, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("image-to-mesh: error: Cannot create the output folder"), error
    assert "a file, not a folder" in error and "Traceback" not in proc.stderr
    assert (tmp_path / "taken").read_bytes() == b"a file"


def test_a_batch_makes_the_folder_of_its_blend_before_the_work(tmp_path, shared_images):
    """``FOLDER --glb OUTDIR --blend missing/all.blend``: the folder is made before the first
    image runs (as the runner makes OUTDIR), so the .blend is saved after the work."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / shared_images[0].name).write_bytes(shared_images[0].read_bytes())
    blend = tmp_path / "missing" / "deeper" / "all.blend"
    proc = run(folder, "--glb", tmp_path / "out", "--blend", blend, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert blend.stat().st_size > 0


def test_a_batch_blend_under_a_file_is_refused_before_the_work(tmp_path, shared_images):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / shared_images[0].name).write_bytes(shared_images[0].read_bytes())
    (tmp_path / "taken").write_bytes(b"a file")
    proc = run(folder, "--glb", tmp_path / "out", "--blend", tmp_path / "taken" / "all.blend",
               timeout=60)
    assert proc.returncode == 21, proc.stderr
    assert "Cannot create the folder of --blend" in proc.stderr and "a file, not a folder" in \
        proc.stderr
    assert not (tmp_path / "out").exists()  # nothing ran
