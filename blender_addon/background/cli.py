"""Headless Image to Mesh, the command line of ``headless.py`` (the add-on's script): image →
GLB → Blender scene → .blend and/or preview PNG.

Two ways to run it, same options::

    blender -b -P headless.py -- IMAGE [--blend OUT.blend] [--glb OUT.glb] [--preview OUT.png]
                                       [--resolution 64..8192] [--python PATH] [job options]
    python headless.py IMAGE …          (an interpreter with the ``bpy`` module, e.g. the .venv)

A folder instead of an image runs the folder batch (:mod:`.folder`): ``FOLDER --glb
OUTDIR [--blend OUT.blend] [--cluster ADDRESS]``, ``--cluster`` running it on a Ray cluster
(docs/cluster.md); a single image refuses ``--cluster``.

The job options are the panel's and the preferences' (``--backend``, ``--seed``,
``--texture-size``, ``--pipeline-type``, ``--pixal3d-dir``, the export levers such as
``--decimation-target``, the guard settings such as ``--wait-free-percent``): made from the
runner's options table (``meshfacts/options.py``) and turned into the runner's command line by the
add-on's one job description (``runner_client/job_spec.py``), as Generate does.

Synchronous: Blender's timers do not fire in background mode, so this script reads the runner's
events itself, blocking, and prints one progress line per stage on stderr. Exit status 0 on
success; on failure one line ``image-to-mesh: error: …`` on stderr and a non-zero status (the
runner's own exit code when it failed, 2 for bad options, 130 Ctrl-C / SIGINT, 143 SIGTERM; the
full table is in docs/blender.md). Everything the options decide (preview format, resolution,
output folders, interpreter, outputs that would replace the input image or each other) is
checked before the runner starts. Existing output files are not
overwritten unless ``--overwrite`` is given.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..runner_client import config, facts, job_spec, option_views, process, state
from . import checks, folder, preview_scene

#: The add-on package's folder (``blender_addon`` in a checkout, the extension's when installed).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
PREFIX = "image-to-mesh"
# --preview suffix -> Blender's ``ImageFormatSettings.file_format``: the formats Blender writes
# that Pillow and browsers read back (Blender 4.5's enum also has EXR, TGA, DPX …, left out).
PREVIEW_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP",
                   ".tif": "TIFF", ".tiff": "TIFF", ".bmp": "BMP"}
# --resolution range, pixels per side. 64 px is the smallest preview that still shows a
# character; 8192 px (67 M pixels, ~1 GB per float RGBA buffer) rendered here with Mesa's
# software llvmpipe in 4 min 20 s at 5.4 GB peak RSS; 100000 px fails to allocate its buffers.
RESOLUTION_MIN, RESOLUTION_MAX = 64, 8192
# Exit status for a signal: 128 + its number, the shell's convention (130 SIGINT, 143 SIGTERM).
CANCEL_SIGNALS = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}


def _exit(kind: str) -> int:
    """The exit status of the runner's error ``kind`` (meshfacts/errors.py, read from the runtime
    through ``runner_client.facts``): the headless script exits like the runner for the same
    fault."""
    return facts.EXIT_CODES[kind]


class Failure(Exception):
    """A failure to report as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class Cancelled(BaseException):
    """Raised in the main thread by the SIGINT / SIGTERM handler (:func:`_on_signal`).

    A ``BaseException`` like ``KeyboardInterrupt``, so no ``except Exception`` swallows it.
    ``signum`` is the signal; the exit status is ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(CANCEL_SIGNALS.get(signum, f"signal {signum}"))
        self.signum = signum


_cancelling = False


def _on_signal(signum, _frame) -> None:
    """SIGINT/SIGTERM handler: raise :class:`Cancelled` once; a repeated signal while the runner
    is being stopped is ignored so that the stop (up to ~10 s) is not interrupted."""
    global _cancelling
    if _cancelling:
        return
    _cancelling = True
    raise Cancelled(signum)


def _install_signal_handlers() -> dict:
    """Route SIGINT and SIGTERM to :func:`_on_signal`; returns the previous handlers for
    :func:`_restore_signal_handlers`. Does nothing outside the main thread (where Python does not
    allow handlers)."""
    global _cancelling
    _cancelling = False
    old = {}
    try:
        for sig in CANCEL_SIGNALS:
            old[sig] = signal.signal(sig, _on_signal)
    except ValueError:  # not the main thread
        pass
    return old


def _restore_signal_handlers(old: dict) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Options after ``--`` (Blender) or after the script name (plain Python)."""
    ap = argparse.ArgumentParser(
        prog="headless.py", description="Image → textured mesh in a .blend / GLB / preview PNG.")
    ap.add_argument("image", type=Path, help="picture of a character (PNG, JPEG, WebP …), or a "
                    "folder of them: a batch into --glb OUTDIR (optionally --cluster ADDRESS)")
    ap.add_argument("--glb", type=Path, help="keep the runner's GLB here")
    ap.add_argument("--blend", type=Path, help="save a .blend with the imported object here")
    ap.add_argument("--preview", type=Path,
                    help="render the object to this image; the format follows the suffix: "
                         + ", ".join(PREVIEW_FORMATS) + ". It renders in a process of its own, "
                         "so Ctrl-C or SIGTERM stops the render at once")
    ap.add_argument("--trace", type=Path, help="memory trace (JSONL; default next to the GLB)")
    # every option of the runner's options table the add-on shows (meshfacts/options.py): the
    # panel's settings, the export levers, the preferences' guard settings
    option_views.add_addon_arguments(
        ap.add_argument_group("job options (as in the panel and the preferences)"))
    ap.add_argument("--python", default="",
                    help="interpreter that runs the runner (default: this Python when it is not "
                         "Blender's; inside Blender, Blender's own Python with the extension's "
                         "wheels, or for pixal3d the Pixal3D-mac folder's venv)")
    ap.add_argument("--resolution", type=int, default=768,
                    help=f"preview size in pixels, {RESOLUTION_MIN}–{RESOLUTION_MAX} "
                         "(default 768)")
    ap.add_argument("--overwrite", action="store_true", help="replace existing output files")
    ns = ap.parse_args(argv)
    if not (ns.glb or ns.blend or ns.preview):
        ap.error("give at least one of --glb, --blend, --preview")
    if ns.preview and ns.preview.suffix.lower() not in PREVIEW_FORMATS:
        got = f"a {ns.preview.suffix} file" if ns.preview.suffix else "a name without a suffix"
        ap.error(f"--preview {ns.preview}: cannot render to {got}; end the name in one of "
                 + ", ".join(PREVIEW_FORMATS) + " (the image format follows the suffix)")
    if not RESOLUTION_MIN <= ns.resolution <= RESOLUTION_MAX:
        ap.error(f"--resolution {ns.resolution} is out of range; give {RESOLUTION_MIN} to "
                 f"{RESOLUTION_MAX} pixels (default 768)")
    return ns


def script_argv() -> list[str]:
    """This script's own arguments: after ``--`` under Blender, else ``sys.argv[1:]``."""
    if "--" in sys.argv:
        return sys.argv[sys.argv.index("--") + 1:]
    return sys.argv[1:]


def _interpreter(ns, inside_blender: bool):
    """The runner's interpreter (a ``config.Interpreter``): ``--python`` (a relative path is
    taken from the current folder, where it was typed), else this Python when it is not
    Blender's, else the add-on's choice for the backend (``config.choose_interpreter``:
    Blender's own Python with the extension's wheels for the built-in backend, the Pixal3D-mac
    folder's venv for Pixal3D). Raises :class:`Failure` (exit 30) naming ``--python`` — a
    command-line user has no preferences window to go to."""
    try:
        if ns.python:
            return config.Interpreter(config.resolve_interpreter(
                ns.python, name="--python", where="--python", base_dir=os.getcwd()),
                (), "--python")
        # Inside an installed extension (its runtime/ folder) the script is what Blender's
        # `-P` runs, whether bpy was imported first or not: the panel's choice, with the wheels
        # Blender installed. From a checkout, an ordinary interpreter with bpy runs the runner.
        installed = config.runtime_dir() == config.PACKAGE_DIR / "runtime"
        if not inside_blender and not installed:
            return config.Interpreter(sys.executable, (), "the Python running this script")
        import bpy
        return config.choose_interpreter(ns.backend, "", ns.pixal3d_dir, sys.executable,
                                         config.wheel_site(bpy.utils.user_resource("EXTENSIONS")))
    except config.ConfigError as exc:
        raise Failure(str(exc) if ns.python else f"{exc} Or pass --python.",
                      _exit("no_torch")) from None


def run_runner(ns, glb: Path, trace: Path, interpreter):
    """Run the runner to completion, blocking, with ``interpreter`` (a ``config.Interpreter``);
    return the final ``state.JobState`` (its ``result`` is the runner's result event, ``peak``
    the peak footprint in bytes). Raises :class:`Failure` with the runner's message and hint."""
    try:  # the add-on's one job description, from the options the table gave this script
        settings = job_spec.settings_from(ns, command="run")
    except config.ConfigError as exc:
        raise Failure(str(exc), _exit("usage")) from None
    spec = job_spec.JobSpec(image=ns.image, output=glb, trace=trace, settings=settings,
                           overwrite=ns.overwrite)
    runtime = config.runtime_dir(PACKAGE_DIR)
    job = process.RunnerProcess(spec.argv(interpreter.python),
                                process.runner_env(runtime, interpreter.extra_path), cwd=runtime)
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
                elif payload.get("event") in ("stalled", "resumed"):
                    print(f"{PREFIX}: {st.stall_text or 'resumed: the worker moves again'}",
                          file=sys.stderr, flush=True)
                elif payload.get("event") == "input":
                    for note in st.input_notes:  # validated by st.apply
                        print(f"{PREFIX}: note: {note}", file=sys.stderr, flush=True)
                elif payload.get("event") == "warning" and payload.get("message"):
                    print(f"{PREFIX}: warning: {payload['message']}", file=sys.stderr,
                          flush=True)
            elif kind == process.BAD_LINE:
                print(f"{PREFIX}: warning: {payload}", file=sys.stderr)
    except Cancelled:
        job.cancel(block=True)  # SIGTERM + stdin closed, SIGKILL after 5 s; waits for the exit
        job.close()
        raise
    for note in ([st.protocol_note] if st.protocol_note else []) + st.warnings:
        print(f"{PREFIX}: warning: {note}", file=sys.stderr)
    st.finish_process(job.poll(), job.stderr_tail(),
                      hint=state.command_line_died_hint(interpreter.python))
    if st.status == state.FAILED:
        err = st.error or {}
        text = err.get("message") or "the runner failed"
        if err.get("hint"):
            text += f" {err['hint']}"
        raise Failure(text, int(err.get("exit_code") or job.poll() or 1))
    return st


def render_preview(scene, path: Path, bpy) -> None:
    """Render ``scene`` (set up by ``preview_scene.setup_preview``) and write the image to
    ``path``, in the format its suffix names (:data:`PREVIEW_FORMATS`).

    The render runs in a process of its own (``preview_render.py`` on a copy of the scene saved
    in a private temporary folder next to ``path``), because a render in this process would hold
    off Ctrl-C and SIGTERM until it ended: a cancel kills that process at once
    (:func:`_wait_render`). The image is renamed into place, so ``path`` is either the finished
    image or untouched, and nothing else is left in that folder, whatever fails. Raises
    :class:`Failure` (exit 1) with one line for a render Blender refuses (e.g. ``Failed to
    allocate GPU buffers``) or an image it cannot save; :class:`Cancelled` passes through.
    """
    fmt = PREVIEW_FORMATS[path.suffix.lower()]
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as exc:
        raise Failure(f"Cannot write to {path.parent}: {exc.strerror or exc}. Choose a folder "
                      "you can write to for --preview.", _exit("output_unwritable")) from None
    try:
        tmp = work / f"preview{path.suffix}"
        blend = work / "scene.blend"
        bpy.ops.wm.save_as_mainfile(filepath=str(blend), copy=True, compress=False,
                                    check_existing=False)
        size = scene.render.resolution_x
        print(f"{PREFIX}: rendering the preview ({size} px) in its own process; Ctrl-C stops "
              "it", file=sys.stderr, flush=True)
        if _wait_render(_render_command(bpy, blend, tmp, fmt)) != 0 or not tmp.is_file():
            error = tmp.with_name(tmp.name + ".error")
            reason = error.read_text(encoding="utf-8") if error.is_file() else ""
            if not reason:
                raise Failure(f"Blender rendered the preview but did not write {path.name}. "
                              "Try a .png name for --preview.")
            raise Failure(f"The preview render failed: {reason}. Try a smaller --resolution "
                          f"(now {size} px) or leave out --preview.")
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise Failure(f"Cannot write {path}: {exc.strerror or exc}. Choose a folder you "
                          "can write to for --preview.", _exit("output_unwritable")) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _render_command(bpy, blend: Path, out: Path, fmt: str) -> list[str]:
    """The command that renders ``blend`` to ``out``: the Blender application that runs this
    script (``bpy.app.binary_path``), or else this interpreter, which has the bpy module."""
    script = str(Path(__file__).with_name("preview_render.py"))
    tail = [str(out), fmt, str(os.getpid())]
    if bpy.app.binary_path:
        return [bpy.app.binary_path, "-b", "--factory-startup", str(blend),
                "--python-exit-code", "1", "-P", script, "--", *tail]
    return [sys.executable, script, str(blend), *tail]


def _wait_render(command: list[str]) -> int:
    """Run ``command`` in a process group of its own and return its exit status; on any
    exception while waiting (:class:`Cancelled` from the signal handler), kill the group,
    reap it, and re-raise. Its output goes to this process's stdout and stderr."""
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise


def import_into_scene(ns, glb: Path, trace: Path, st):
    """A fresh empty scene holding the GLB's object (collection "Image to Mesh", custom
    properties from ``st``, the runner's final ``JobState``) framed for the preview; returns
    the object. Raises :class:`Failure` when the mesh cannot be imported."""
    import bpy  # heavy: only once there is a mesh to import
    import mathutils

    from ..ui import importer  # imports bpy: only once there is a mesh to import
    bpy.ops.wm.read_factory_settings(use_empty=True)
    coll = importer.ensure_collection(bpy.context.scene)
    meta = {"backend": ns.backend, "seed": ns.seed, "peak": st.peak,
            "trace": str(trace) if ns.glb or ns.trace else "", "image": str(ns.image)}
    try:
        obj = importer.import_glb(glb, ns.image.stem, (0.0, 0.0, 0.0), coll, meta)
    except importer.MeshImportError as exc:
        raise Failure(str(exc)) from None
    preview_scene.setup_preview(obj, ns.resolution, bpy, mathutils)
    return obj


def save_outputs(ns, written: list[Path]) -> None:
    """Write ``--blend`` and ``--preview`` from the open scene, appending each to ``written``
    once it is complete. Raises :class:`Failure` for a failed render."""
    import bpy

    if ns.blend:
        # No "OUT.blend1" backup next to the requested file when --overwrite replaces it.
        paths = bpy.context.preferences.filepaths
        versions, paths.save_version = paths.save_version, 0
        try:
            bpy.ops.wm.save_as_mainfile(filepath=str(ns.blend), check_existing=False,
                                        compress=True)
        finally:
            paths.save_version = versions
        written.append(ns.blend)
        print(f"{PREFIX}: saved {ns.blend}", file=sys.stderr)
    if ns.preview:
        render_preview(bpy.context.scene, ns.preview, bpy)
        written.append(ns.preview)
        print(f"{PREFIX}: rendered {ns.preview}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the whole headless job; returns the exit status (see the module docstring).

    SIGINT (Ctrl-C) and SIGTERM stop the runner (and its worker) and end the job with one line
    and status 128 + the signal's number; outputs already finished are kept and named."""
    try:
        ns = parse_args(script_argv() if argv is None else argv)
    except SystemExit as exc:  # argparse already printed usage and one error line
        return int(exc.code or 0)
    inside_blender = "bpy" in sys.modules  # `blender -b -P` has imported it before this script
    tmp = None
    written: list[Path] = []
    trace = None
    old_handlers = _install_signal_handlers()
    try:
        try:
            if ns.image.is_dir():
                return _batch(ns, inside_blender)
            _check_single(ns)
            if ns.glb:
                glb = ns.glb
            else:
                tmp = Path(tempfile.mkdtemp(prefix="image-to-mesh-"))
                glb = tmp / f"{ns.image.stem}.glb"
            trace = ns.trace or glb.with_name(f"{glb.stem}.trace.jsonl")
            return _single(ns, glb, trace, inside_blender, written)
        except Cancelled as exc:
            raise Failure(_cancel_message(exc, written, trace if ns.glb or ns.trace else None),
                          128 + exc.signum) from None
    except Failure as exc:
        print(f"{PREFIX}: error: {exc}", file=sys.stderr, flush=True)
        return exc.code
    finally:
        _restore_signal_handlers(old_handlers)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_single(ns) -> None:
    """A single job's arguments and outputs, checked before anything runs
    (``checks.check_single``); raises :class:`Failure` with its exit status."""
    try:
        checks.check_single(ns, config, _exit)
    except checks.Refused as exc:
        raise Failure(str(exc), exc.code) from None


def _single(ns, glb: Path, trace: Path, inside_blender: bool, written: list[Path]) -> int:
    """Run the runner on the one image into ``glb`` (its memory trace at ``trace``), import the
    GLB into a fresh scene and write ``--blend`` / ``--preview``; each finished output is
    appended to ``written`` (so a cancel can name them). Returns 0; raises :class:`Failure`
    or :class:`Cancelled`."""
    interpreter = _interpreter(ns, inside_blender)
    st = run_runner(ns, glb, trace, interpreter)
    if ns.glb:
        written.append(ns.glb)

    obj = import_into_scene(ns, glb, trace, st)
    save_outputs(ns, written)
    if ns.glb:
        print(f"{PREFIX}: wrote {ns.glb}", file=sys.stderr)
    print(f"{PREFIX}: done: {obj.name}, peak footprint "
          f"{state.human_bytes(st.peak)}", file=sys.stderr)
    return 0


def _batch(ns, inside_blender: bool) -> int:
    """The folder batch (:mod:`.folder`); raises :class:`Failure`."""
    ns.image = ns.image.expanduser().resolve()
    ns.glb, ns.blend = (p.expanduser().resolve() if p else None for p in (ns.glb, ns.blend))
    try:
        folder.check_args(ns, _exit)
        interpreter = _interpreter(ns, inside_blender)
        return folder.run(ns, interpreter, config.runtime_dir(PACKAGE_DIR), _exit)
    except folder.BatchFailed as exc:
        raise Failure(str(exc), exc.code) from None
    except Cancelled as exc:
        raise Failure(f"cancelled by {exc}: the batch was stopped (every node's job too); the "
                      f"images it finished are in {ns.glb}. Run the same command again to do "
                      "the rest.", 128 + exc.signum) from None


def _cancel_message(exc: Cancelled, written: list[Path], trace: Path | None) -> str:
    """What a cancel did and what to do next, for the one error line."""
    text = f"cancelled by {exc}: the job was stopped"
    if written:
        text += "; finished outputs are kept: " + ", ".join(str(p) for p in written)
    else:
        text += " and no output was written"
    if trace is not None and trace.exists():
        text += f" (the memory trace so far is in {trace})"
    text += ". Run the same command again to start over"
    return text + (", with --overwrite to replace the kept files." if written else ".")
