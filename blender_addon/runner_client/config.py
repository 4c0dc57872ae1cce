"""Where the runner lives, which Python runs it, where results go. No bpy (the job description
and its command line: ``job.py``).

The add-on never imports ``runner`` or ``stageload`` into Blender's process: it runs
``<interpreter> -m runner …`` in a separate process with ``PYTHONPATH`` set to a *runtime
folder* that holds the two packages (plus, for Blender's own Python, the folder where Blender
installed the extension's bundled wheels) — never Blender's own ``PYTHONPATH``:

- installed extension: ``<extension folder>/runtime/`` (the build step copies them there);
- repository checkout (``blender_addon/`` next to ``runner/``, as ``make demo`` uses it): the
  repository root.

Which interpreter runs a job (:func:`choose_interpreter`; the Check button says which and why):

- the **Runner Python** preference when it is set, for every backend;
- else, for the built-in backend: **Blender's own Python** with the extension's wheels (SciPy,
  Pillow, trimesh, psutil, matplotlib; NumPy comes with Blender) — nothing to install;
- else, for Pixal3D (needs PyTorch): the virtual environment inside the Pixal3D-mac folder
  (``.venv`` or ``venv``) when there is one; otherwise the job is refused, saying what to set.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .self_check import deep_lines

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the add-on package
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")
#: Backends that import torch, so cannot run in Blender's own Python (runner.backends'
#: ``needs_torch``; a contract test pins both copies).
TORCH_BACKENDS = ("pixal3d",)


class ConfigError(ValueError):
    """A setting that stops a job from starting; the message says what to change."""


def runtime_dir(package_dir: Path = PACKAGE_DIR) -> Path:
    """The folder to put on the runner's PYTHONPATH (it contains ``runner/`` and ``stageload/``).

    Raises :class:`ConfigError` when neither layout (installed or checkout) is present.
    """
    for candidate in (package_dir / "runtime", package_dir.parent):
        if (candidate / "runner" / "__main__.py").is_file() and (candidate / "stageload").is_dir():
            return candidate
    raise ConfigError(f"The runner is missing from {package_dir}: reinstall the extension from a "
                      "zip made by `make build` (it carries runner/ and stageload/).")


def _venv_python(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


PREFERENCE = "Edit › Preferences › Add-ons › Image to Mesh › Runner Python"
"""Where the add-on's user sets the runner's interpreter (named in ``resolve_interpreter``'s
messages)."""


@dataclass(frozen=True)
class Interpreter:
    """The Python that runs a job: ``python`` (absolute path), ``extra_path`` (folders put on
    the runner's ``PYTHONPATH`` after the runtime folder: the extension's wheels for Blender's
    own Python), ``why`` (for people: where the choice came from)."""
    python: str
    extra_path: tuple[str, ...] = ()
    why: str = ""


def resolve_interpreter(setting: str, *, name: str = "Runner Python", where: str = PREFERENCE,
                        base_dir: str | None = None) -> str:
    """The absolute path of the interpreter ``setting`` names: a path (``~`` expanded) or a
    command on PATH. A relative path with a folder in it (``venv/bin/python``) is made absolute
    against ``base_dir`` (the folder it was typed in, e.g. the shell's for ``--python``) or,
    without one, refused — a preference has no folder to be relative to. Raises
    :class:`ConfigError` with a clear message when it is blank, does not exist, is a folder, is
    not executable or is not on PATH — before anything is spawned.

    ``name`` is what the message calls the interpreter and ``where`` the setting it tells the
    user to change (the headless script passes ``where="--python"``)."""
    text = (setting or "").strip()
    venv = "the python of a virtual environment (e.g. /path/to/venv/bin/python)"
    if not text:
        raise ConfigError(f"{name} is empty. Set {where} to {venv}.")
    path = Path(os.path.expanduser(text))
    if os.sep in text or (os.altsep and os.altsep in text):
        if not path.is_absolute():
            if base_dir is None:
                raise ConfigError(f"{name} {text!r} is a relative path. Set {where} to a full "
                                  f"path, e.g. {os.path.abspath(text)}.")
            path = Path(base_dir) / path
        path = Path(os.path.abspath(path))
        if not path.exists():
            raise ConfigError(f"{name} not found: {path}. Set {where} to {venv}.")
        if path.is_dir():
            raise ConfigError(f"{name} is a folder, not a program: {path}. Point {where} "
                              "at the python file inside it (e.g. .venv/bin/python).")
        if not os.access(path, os.X_OK):
            raise ConfigError(f"{name} is not executable: {path}. Set {where} to {venv}.")
        return str(path)
    found = shutil.which(text)
    if not found:
        raise ConfigError(f"{name} {text!r} is not on PATH. Set {where} to a full path, "
                          f"e.g. {venv}.")
    return os.path.abspath(found)


def wheel_site(extensions_root: str) -> str | None:
    """The site-packages folder under Blender's user extensions folder ``extensions_root``
    (``bpy.utils.user_resource("EXTENSIONS")``) where Blender installs extension wheels —
    ``.local/lib/pythonX.Y/site-packages``, the layout of Blender's
    ``addon_utils._initialize_extensions_site_packages`` — or None when it does not exist."""
    site = Path(extensions_root, ".local", "lib", "python{}.{}".format(*sys.version_info[:2]),
                "site-packages")
    return str(site) if site.is_dir() else None


def pixal3d_venv(pixal3d_dir: str) -> Path | None:
    """The python of a virtual environment inside the Pixal3D-mac folder (``.venv`` or
    ``venv``), or None when there is none (or no folder is set)."""
    if not (pixal3d_dir or "").strip():
        return None
    root = Path(absolute_folder(pixal3d_dir))
    for name in (".venv", "venv"):
        py = _venv_python(root / name)
        if py.is_file() and os.access(py, os.X_OK):
            return py
    return None


def choose_interpreter(backend: str, setting: str, pixal3d_dir: str, blender_python: str,
                       wheel_site: str | None) -> Interpreter:
    """The interpreter for a ``backend`` job (the order is in the module docstring).

    ``setting``: the Runner Python preference; ``pixal3d_dir``: the Pixal3D-mac folder
    preference; ``blender_python``: Blender's own Python (``sys.executable`` inside Blender);
    ``wheel_site``: the site-packages folder Blender installs extension wheels into (None when
    it does not exist, e.g. running from a checkout). Raises :class:`ConfigError` saying what to
    set when the preference is unusable, or a torch backend has no interpreter."""
    if (setting or "").strip():
        return Interpreter(resolve_interpreter(setting), (), "the Runner Python preference")
    if backend in TORCH_BACKENDS:
        venv = pixal3d_venv(pixal3d_dir)
        if venv is not None:
            return Interpreter(str(venv), (), "the virtual environment in the Pixal3D-mac folder")
        where = (f"no .venv or venv in {absolute_folder(pixal3d_dir)}" if pixal3d_dir.strip()
                 else "no Pixal3D-mac folder is set")
        raise ConfigError(f"The Pixal3D backend needs a Python with PyTorch, and {where}. Set "
                          f"{PREFERENCE} to the Pixal3D-mac virtual environment's python (or "
                          "create one named .venv in the Pixal3D-mac folder).")
    if wheel_site:
        return Interpreter(blender_python, (wheel_site,),
                           "Blender's own Python with the extension's bundled wheels")
    checkout = _venv_python(PACKAGE_DIR.parent / ".venv")
    if (PACKAGE_DIR.parent / "runner").is_dir() and checkout.is_file():
        return Interpreter(str(checkout), (), "the .venv of the repository checkout this "
                           "add-on runs from (no bundled wheels installed)")
    return Interpreter(blender_python, (), "Blender's own Python (the extension's wheels were "
                       "not found: reinstall the extension zip for your platform)")


def batch_output_dir(output_dir: Path, folder: Path) -> Path:
    """Where a batch over ``folder`` writes its GLBs, traces and manifest:
    ``output_dir/<folder name>_meshes`` — one folder per input folder, so running the batch
    again resumes from its own manifest."""
    return output_dir / f"{folder.name or 'images'}_meshes"


def absolute_folder(text: str) -> str:
    """``text`` with ``~`` expanded, made absolute against this process's working folder.

    The runner runs with the extension's runtime folder as its working folder, so a relative
    path handed to it would name a folder inside the extension."""
    return os.path.abspath(os.path.expanduser(text.strip()))


def validate_image(path: str | os.PathLike) -> Path:
    """The absolute image path, or :class:`ConfigError` when it is blank or missing (the runner
    checks the content; this only avoids spawning for an obviously wrong path)."""
    if not str(path).strip():
        raise ConfigError("Choose an input image first (the folder icon next to Image).")
    p = Path(os.path.expanduser(str(path))).resolve()
    if p.is_dir():
        raise ConfigError(f"Input image {p} is a folder; choose an image file.")
    if not p.is_file():
        raise ConfigError(f"Input image not found: {p}")
    return p


OUTPUT_PREFERENCE = "Edit › Preferences › Add-ons › Image to Mesh › Output folder"


def resolve_output_dir(text: str, blend_file: str = "", package_dir: Path = PACKAGE_DIR,
                       forbidden: Path | None = None) -> Path:
    """The output folder preference ``text`` as an absolute path, resolved once here so the
    runner (whose working folder is the runtime folder inside the extension) gets absolute
    paths.

    ``~`` is expanded; ``//…`` is relative to the saved .blend file ``blend_file`` (Blender's
    convention, as ``bpy.path.abspath`` reads it). Raises :class:`ConfigError` saying what to
    set when ``text`` is a plain relative path (relative to what would be unclear: Blender's
    working folder or the runner's), ``//…`` while the .blend is not saved (``blend_file``
    empty), or a folder inside the add-on's install folder ``package_dir`` (Blender replaces that
    folder on every update, and the runner must never write into its own runtime), or inside
    ``forbidden`` (Blender's per-extension user folder, deleted on uninstall).
    """
    raw = text.strip()
    if raw.startswith("//"):
        if not blend_file:
            raise ConfigError(f"Output folder {raw!r} is relative to the .blend file, which is "
                              "not saved yet. Save the .blend first, or set an absolute folder "
                              f"in {OUTPUT_PREFERENCE}.")
        path = Path(os.path.dirname(os.path.abspath(blend_file))) / raw[2:]
    else:
        path = Path(os.path.expanduser(raw))
        if not path.is_absolute():
            raise ConfigError(f"Output folder {raw!r} is a relative path. Set an absolute folder "
                              f"(e.g. ~/image-to-mesh) in {OUTPUT_PREFERENCE}, or //folder next "
                              "to a saved .blend.")
    path = Path(os.path.realpath(path))
    install = Path(os.path.realpath(package_dir))
    if path == install or install in path.parents:
        raise ConfigError(f"Output folder {path} is inside the add-on's own folder {install}, "
                          "which Blender replaces on every update. Choose a folder outside it "
                          f"in {OUTPUT_PREFERENCE} (or leave it empty for the default).")
    user = Path(os.path.realpath(forbidden)) if forbidden is not None else None
    if user is not None and (path == user or user in path.parents):
        raise ConfigError(f"Output folder {path} is inside the extension's user folder {user}, "
                          "which Blender deletes when the extension is uninstalled. Choose a "
                          f"folder outside it in {OUTPUT_PREFERENCE} (or leave it empty for the "
                          "default).")
    return path


def make_output_folder(folder: Path) -> Path:
    """Create the output folder ``folder`` (and its parents) when missing; returns it. Raises
    :class:`ConfigError` saying what to do when it cannot be created."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot create the output folder {folder}: {exc.strerror or exc}. "
                          "Choose another folder in the add-on preferences.") from None
    return folder


def free_output_paths(folder: Path, stem: str) -> tuple[Path, Path]:
    """``(folder/stem.glb, folder/stem.trace.jsonl)``, with ``_2``, ``_3`` … appended to the stem
    when either exists, so a run never overwrites an earlier result — except a trace that is the
    leftover of a failed or cancelled run of that same GLB (``leftover_trace``): the runner
    replaces such a trace itself (its rule, docs/runner.md), so the name is reused rather than
    skipped. Creates ``folder``.

    Raises :class:`ConfigError` when the folder cannot be created."""
    make_output_folder(folder)
    n = 1
    while True:
        name = stem if n == 1 else f"{stem}_{n}"
        glb, trace = folder / f"{name}.glb", folder / f"{name}.trace.jsonl"
        if not glb.exists() and (not trace.exists() or leftover_trace(trace, glb)):
            return glb, trace
        n += 1


def _json_line(line: bytes) -> dict | None:
    try:
        obj = json.loads(line.decode("utf-8"))
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def leftover_trace(trace: Path, glb: Path) -> bool:
    """True when ``trace`` is the runner's leftover of an ended run on ``glb`` that wrote no
    GLB: a plain file whose first line is the runner's ``hello`` naming ``glb`` and whose last
    line is an ``error`` event (failed or cancelled), ``glb`` absent. The runner's own rule
    (``runner.job.outputs.failed_runs_trace``, which the add-on cannot import: it only spawns the
    runner) also checks that its pid is no live runner; a live run's trace does not end in an
    ``error`` line. If this guess is wrong the runner still refuses with ``output_exists``:
    nothing is overwritten. Reads the first and the last 64 KiB; never raises."""
    try:
        if trace.is_symlink() or not trace.is_file() or glb.exists():
            return False
        with open(trace, "rb") as f:
            first = _json_line(f.readline(65536))
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = [line for line in f.read().split(b"\n") if line.strip()]
    except OSError:
        return False
    last = _json_line(lines[-1]) if lines else None
    return (first is not None and first.get("event") == "hello" and "runner" in first
            and first.get("output") == str(glb.absolute()) and last is not None
            and last.get("event") == "error")


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Files in ``folder`` (not recursive) whose suffix is an image suffix, sorted by name.

    Files with those suffixes are listed even when damaged: the runner reports those, and the
    batch summary names them. Raises :class:`ConfigError` when the folder does not exist."""
    p = Path(os.path.expanduser(str(folder)))
    if not str(folder).strip() or not p.is_dir():
        raise ConfigError(f"Batch folder not found: {p}")
    return sorted((f for f in p.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES),
                  key=lambda f: f.name.lower())


def summarize_check(stdout: str) -> str:
    """Lines for people from the last JSON line ``runner check`` prints (its ``check`` event,
    runner/PROTOCOL.md): Python and torch versions, available devices, and each backend ready or
    not with the reason (unknown fields ignored); or ``"ERROR: …"`` when the runner answered
    with an ``error`` event. Raises ``ValueError`` when ``stdout`` holds no JSON object."""
    data = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    if not isinstance(data, dict):
        raise ValueError("runner check printed no JSON object")
    if data.get("event") == "error":  # e.g. the interpreter lacks Pillow: no check was made
        return f"ERROR: {data.get('message', '')} {data.get('hint', '')}".rstrip()
    lines = []
    py = data.get("python")
    if isinstance(py, dict):
        py = py.get("version") or py.get("executable")
    torch = data.get("torch")
    why = None
    if isinstance(torch, dict):
        why = torch.get("reason") or torch.get("error")
        torch = torch.get("version")
    if torch:
        lines.append(f"Python {py or '?'} · torch {torch}")
    else:  # the built-in backend needs none: say so rather than "torch <the reason>"
        lines.append(f"Python {py or '?'} · no torch (only the built-in backend can run)"
                     + (f": {why}" if why else ""))
    devices = data.get("devices")
    if isinstance(devices, dict):  # {"cpu": {"available": true, …}, "mps": {…}}
        names = [n for n, d in devices.items() if isinstance(d, dict) and d.get("available")]
        lines.append("devices: " + (", ".join(names) or "none"))
    backends = data.get("backends") or {}
    if isinstance(backends, dict):
        for name, info in backends.items():
            if isinstance(info, dict):
                ok = info.get("ok", info.get("available"))
                why = info.get("reason") or ""
                lines.append(f"{name}: {'ready' if ok else 'not available'}"
                             + (f" — {why}" if why and not ok else ""))
    if isinstance(data.get("deep"), dict):  # check --deep (runner_client/self_check.py)
        lines += deep_lines(data["deep"])
    return "\n".join(lines)
