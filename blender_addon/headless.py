"""Headless Image to Mesh: image → GLB → Blender scene → .blend and/or preview PNG.

Two ways to run it, same options::

    blender -b -P headless.py -- IMAGE [--blend OUT.blend] [--glb OUT.glb] [--preview OUT.png]
                                       [--backend builtin|pixal3d] [--seed N] [--texture-size N]
    python headless.py IMAGE …          (an interpreter with the ``bpy`` module, e.g. the .venv)

Synchronous: Blender's timers do not fire in background mode, so this script reads the runner's
events itself, blocking, and prints one progress line per stage on stderr. Exit status 0 on
success; on failure one line ``image-to-mesh: error: …`` on stderr and a non-zero status (the
runner's own exit code when it failed, 2 for bad options). Existing output files are not
overwritten unless ``--overwrite`` is given.
"""
from __future__ import annotations

import argparse
import importlib
import math
import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PREFIX = "image-to-mesh"


def _package():
    """Import this add-on's package (``blender_addon`` in a checkout, ``image_to_mesh`` when
    installed as an extension) by its folder name, without registering anything."""
    if str(PACKAGE_DIR.parent) not in sys.path:
        sys.path.insert(0, str(PACKAGE_DIR.parent))
    name = PACKAGE_DIR.name
    return {m: importlib.import_module(f"{name}.{m}")
            for m in ("config", "process", "state")}


class Failure(Exception):
    """A failure to report as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Options after ``--`` (Blender) or after the script name (plain Python)."""
    ap = argparse.ArgumentParser(
        prog="headless.py", description="Image → textured mesh in a .blend / GLB / preview PNG.")
    ap.add_argument("image", type=Path, help="picture of a character (PNG, JPEG, WebP …)")
    ap.add_argument("--glb", type=Path, help="keep the runner's GLB here")
    ap.add_argument("--blend", type=Path, help="save a .blend with the imported object here")
    ap.add_argument("--preview", type=Path, help="render the object to this PNG")
    ap.add_argument("--trace", type=Path, help="memory trace (JSONL; default next to the GLB)")
    ap.add_argument("--backend", default="builtin", choices=("builtin", "pixal3d"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--texture-size", type=int, default=1024, help="pixels (default 1024)")
    ap.add_argument("--pipeline-type", default="1024_cascade", help="Pixal3D pipeline type")
    ap.add_argument("--pixal3d-dir", default="", help="Pixal3D-mac checkout (pixal3d backend)")
    ap.add_argument("--python", default="",
                    help="interpreter that runs the runner (default: this Python when it is not "
                         "Blender's, else the project's .venv, else python3 on PATH)")
    ap.add_argument("--resolution", type=int, default=768, help="preview size in pixels")
    ap.add_argument("--overwrite", action="store_true", help="replace existing output files")
    ns = ap.parse_args(argv)
    if not (ns.glb or ns.blend or ns.preview):
        ap.error("give at least one of --glb, --blend, --preview")
    return ns


def script_argv() -> list[str]:
    """This script's own arguments: after ``--`` under Blender, else ``sys.argv[1:]``."""
    if "--" in sys.argv:
        return sys.argv[sys.argv.index("--") + 1:]
    return sys.argv[1:]


def _interpreter(ns, config, inside_blender: bool) -> str:
    if ns.python:
        return config.resolve_interpreter(ns.python)
    if not inside_blender:  # an ordinary interpreter with the bpy module: it runs the runner too
        return sys.executable
    return config.resolve_interpreter("")


def run_runner(ns, glb: Path, trace: Path, mods, python: str) -> dict:
    """Run the runner to completion, blocking; return the final state's ``result`` event.
    Raises :class:`Failure` with the runner's message and hint."""
    config, process, state = mods["config"], mods["process"], mods["state"]
    spec = config.JobSpec(image=ns.image, output=glb, trace=trace, backend=ns.backend,
                          seed=ns.seed, texture_size=ns.texture_size,
                          pipeline_type=ns.pipeline_type, pixal3d_dir=ns.pixal3d_dir,
                          overwrite=ns.overwrite)
    runtime = config.runtime_dir(PACKAGE_DIR)
    job = process.RunnerProcess(spec.argv(python), process.runner_env(runtime), cwd=runtime)
    st = state.JobState()
    st.begin(str(ns.image))
    try:
        job.start()
    except process.SpawnError as exc:
        raise Failure(str(exc)) from None
    shown = None
    try:
        for kind, payload in job.iter_blocking():
            if kind == process.EVENT:
                st.apply(payload)
                if payload.get("event") == "stage" and payload.get("stage") != shown:
                    shown = payload.get("stage")
                    print(f"{PREFIX}: stage {shown} ({int(payload.get('index', 0)) + 1}/"
                          f"{payload.get('count') or '?'})", file=sys.stderr, flush=True)
                elif payload.get("event") == "guard" and payload.get("state") == "waiting":
                    print(f"{PREFIX}: {st.guard_text()}", file=sys.stderr, flush=True)
            elif kind == process.BAD_LINE:
                print(f"{PREFIX}: warning: {payload}", file=sys.stderr)
    except KeyboardInterrupt:
        job.cancel(block=True)
        raise Failure("cancelled", 130) from None
    st.finish_process(job.poll(), job.stderr_tail())
    if st.status == state.FAILED:
        err = st.error or {}
        text = err.get("message") or "the runner failed"
        if err.get("hint"):
            text += f" {err['hint']}"
        raise Failure(text, int(err.get("exit_code") or job.poll() or 1))
    return st


def setup_preview(obj, resolution: int, bpy, mathutils) -> None:
    """Camera framing ``obj`` from the front-left (distance: its bounding sphere fills the
    field of view, tightened by 10 % because a character does not reach its box's corners), a
    sun light, a light-grey world, Workbench with textures (renders without a GPU)."""
    scene = bpy.context.scene
    corners = [obj.matrix_world @ mathutils.Vector(c) for c in obj.bound_box]
    lo = mathutils.Vector(tuple(min(c[i] for c in corners) for i in range(3)))
    hi = mathutils.Vector(tuple(max(c[i] for c in corners) for i in range(3)))
    center, radius = (lo + hi) / 2, max((hi - lo).length / 2, 1e-3)
    cam_data = bpy.data.cameras.new("Preview Camera")
    cam_data.lens = 50.0
    cam = bpy.data.objects.new("Preview Camera", cam_data)
    scene.collection.objects.link(cam)
    # glTF +Z (the character's front) is Blender's -Y: look from -Y, a little from the left/above.
    direction = mathutils.Vector((-0.45, -1.0, 0.25)).normalized()
    fov = 2 * math.atan(cam_data.sensor_width / 2 / cam_data.lens)
    cam.location = center + direction * (radius / math.sin(fov / 2) * 0.9)
    cam.rotation_euler = (-direction).to_track_quat("-Z", "Y").to_euler()
    scene.camera = cam
    sun_data = bpy.data.lights.new("Preview Sun", "SUN")
    sun_data.energy = 3.0
    sun = bpy.data.objects.new("Preview Sun", sun_data)
    sun.rotation_euler = (math.radians(50), 0, math.radians(-30))
    scene.collection.objects.link(sun)
    if scene.world is None:
        scene.world = bpy.data.worlds.new("World")
    scene.world.color = (0.8, 0.8, 0.8)
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.display.shading.light = "STUDIO"
    scene.display.shading.color_type = "TEXTURE"
    scene.render.resolution_x = scene.render.resolution_y = resolution
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"


def main(argv: list[str] | None = None) -> int:
    """Run the whole headless job; returns the exit status (see the module docstring)."""
    try:
        ns = parse_args(script_argv() if argv is None else argv)
    except SystemExit as exc:  # argparse already printed usage and one error line
        return int(exc.code or 0)
    inside_blender = "bpy" in sys.modules  # `blender -b -P` has imported it before this script
    mods = _package()
    config = mods["config"]
    tmp = None
    try:
        try:
            ns.image = config.validate_image(ns.image)
        except config.ConfigError as exc:
            raise Failure(str(exc), 11) from None
        ns.glb, ns.blend, ns.preview = (p.expanduser().resolve() if p else None
                                        for p in (ns.glb, ns.blend, ns.preview))
        for p in (ns.glb, ns.blend, ns.preview):
            if p and p.exists() and not ns.overwrite:
                raise Failure(f"{p} exists; choose another name or pass --overwrite.", 20)
            if p and not p.parent.is_dir():
                raise Failure(f"Output folder {p.parent} does not exist.", 21)
        if ns.glb:
            glb = ns.glb
        else:
            tmp = Path(tempfile.mkdtemp(prefix="image-to-mesh-"))
            glb = tmp / f"{ns.image.stem}.glb"
        trace = ns.trace or glb.with_name(f"{glb.stem}.trace.jsonl")
        try:
            python = _interpreter(ns, config, inside_blender)
        except config.ConfigError as exc:
            raise Failure(str(exc), 30) from None
        st = run_runner(ns, glb, trace, mods, python)

        import bpy  # heavy: only once there is a mesh to import
        import mathutils

        importer = importlib.import_module(f"{PACKAGE_DIR.name}.importer")
        bpy.ops.wm.read_factory_settings(use_empty=True)
        coll = importer.ensure_collection(bpy.context.scene)
        meta = {"backend": ns.backend, "seed": ns.seed, "peak": st.peak,
                "trace": str(trace) if ns.glb or ns.trace else "", "image": str(ns.image)}
        try:
            obj = importer.import_glb(glb, ns.image.stem, (0.0, 0.0, 0.0), coll, meta)
        except importer.MeshImportError as exc:
            raise Failure(str(exc)) from None
        setup_preview(obj, ns.resolution, bpy, mathutils)
        if ns.blend:
            # No "OUT.blend1" backup next to the requested file when --overwrite replaces it.
            paths = bpy.context.preferences.filepaths
            versions, paths.save_version = paths.save_version, 0
            try:
                bpy.ops.wm.save_as_mainfile(filepath=str(ns.blend), check_existing=False,
                                            compress=True)
            finally:
                paths.save_version = versions
            print(f"{PREFIX}: saved {ns.blend}", file=sys.stderr)
        if ns.preview:
            bpy.context.scene.render.filepath = str(ns.preview)
            bpy.ops.render.render(write_still=True)
            if not ns.preview.is_file():
                raise Failure(f"the preview render did not write {ns.preview}")
            print(f"{PREFIX}: rendered {ns.preview}", file=sys.stderr)
        if ns.glb:
            print(f"{PREFIX}: wrote {ns.glb}", file=sys.stderr)
        print(f"{PREFIX}: done: {obj.name}, peak footprint "
              f"{mods['state'].human_bytes(st.peak)}", file=sys.stderr)
        return 0
    except Failure as exc:
        print(f"{PREFIX}: error: {exc}", file=sys.stderr, flush=True)
        return exc.code
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
