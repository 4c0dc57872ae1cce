"""Where the runner lives, which Python runs it, and the command line of a job. No bpy.

The add-on never imports ``runner`` or ``stageload`` into Blender's process: it runs
``<interpreter> -m runner …`` with ``PYTHONPATH`` set to a *runtime folder* that holds the two
packages:

- installed extension: ``<extension folder>/runtime/`` (the build step copies them there);
- repository checkout (``blender_addon/`` next to ``runner/``, as ``make demo`` uses it): the
  repository root.

The default interpreter is, in order: the ``.venv`` Python of the repository the zip was built
from (recorded in ``runtime/build_info.json`` by the build step) or of the checkout the add-on
runs from, when that file exists; else ``python3`` found on PATH. Blender's own bundled Python is
never chosen: it has no torch.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_INFO = "build_info.json"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")
BACKENDS = ("builtin", "pixal3d")


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


def build_info(package_dir: Path = PACKAGE_DIR) -> dict:
    """The build step's record (``runtime/build_info.json``: ``version``, ``venv_python``,
    ``source``), or ``{}`` when running from a checkout or the file is unreadable."""
    try:
        return json.loads((package_dir / "runtime" / BUILD_INFO).read_text("utf-8"))
    except (OSError, ValueError):
        return {}


def _venv_python(root: Path) -> Path:
    return root / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def default_interpreter(package_dir: Path = PACKAGE_DIR) -> str:
    """The interpreter used when the preference is empty (see the module docstring for the order).

    Returns a path or a bare command name (``"python3"``); never raises.
    """
    recorded = build_info(package_dir).get("venv_python")
    candidates = [Path(recorded)] if recorded else []
    candidates.append(_venv_python(package_dir.parent))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("python3") or "python3"


PREFERENCE = "Edit › Preferences › Add-ons › Image to Mesh › Runner Python"
"""Where the add-on's user sets the runner's interpreter (named in ``resolve_interpreter``'s
messages)."""


def resolve_interpreter(setting: str, package_dir: Path = PACKAGE_DIR, *,
                        name: str = "Runner Python", where: str = PREFERENCE) -> str:
    """The interpreter to run: ``setting`` (a path, ``~`` expanded, or a command on PATH) or the
    default when it is blank. Raises :class:`ConfigError` with a clear message when it does not
    exist, is a folder, is not executable or is not on PATH — before anything is spawned.

    ``name`` is what the message calls the interpreter and ``where`` the setting it tells the
    user to change: the add-on's preference by default; the headless script passes
    ``where="--python"`` (a command-line user has no preferences window).
    """
    text = (setting or "").strip()
    if not text:
        text = default_interpreter(package_dir)
    venv = "the Python of the project's .venv (…/.venv/bin/python after `make setup`)"
    path = Path(os.path.expanduser(text))
    if os.sep in text or (os.altsep and os.altsep in text):
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
                          "e.g. the project's .venv/bin/python.")
    return found


@dataclass
class GuardSettings:
    """Guard defaults from the preferences, turned into runner options (``stageload.guard``).

    ``wait_free_percent``: start only with this much of total memory available (0 = off);
    ``kill_free_percent``: stop the job under this (0 = off); ``swap_budget_gb``: stop when swap
    grows by more than this many GB (1024**3 bytes, the guard's unit; 0 = off); ``start_timeout``: seconds to wait
    for admission (0 = for ever); ``busy``: regular expression of other jobs to wait for;
    ``quiet_for``: seconds without ``busy`` before starting.
    """
    wait_free_percent: float = 0.0
    kill_free_percent: float = 10.0
    swap_budget_gb: float = 8.0
    start_timeout: float = 0.0
    busy: str = ""
    quiet_for: float = 0.0

    def argv(self) -> list[str]:
        """The runner's guard options for these settings."""
        out: list[str] = []
        if self.wait_free_percent > 0:
            out += ["--wait-free", f"{self.wait_free_percent:g}%"]
        out += ["--kill-free", f"{self.kill_free_percent:g}%" if self.kill_free_percent > 0 else "off"]
        out += ["--swap-budget",
                f"{self.swap_budget_gb:g}G" if self.swap_budget_gb > 0 else "off"]
        if self.start_timeout > 0:
            out += ["--start-timeout", f"{self.start_timeout:g}"]
        if self.busy.strip():
            out += ["--busy", self.busy.strip(), "--quiet-for", f"{self.quiet_for:g}"]
        return out


@dataclass
class JobSpec:
    """One image → GLB job: what the panel or the headless script asks the runner to do.

    ``texture_size`` is in pixels (a side of the square base-colour texture); ``pixal3d_dir`` and
    ``pipeline_type`` matter only for the ``pixal3d`` backend.
    """
    image: Path
    output: Path
    trace: Path
    backend: str = "builtin"
    seed: int = 0
    texture_size: int = 1024
    pipeline_type: str = "1024_cascade"
    pixal3d_dir: str = ""
    overwrite: bool = False
    guard: GuardSettings = field(default_factory=GuardSettings)

    def argv(self, python: str) -> list[str]:
        """The full command line: ``python -m runner IMAGE -o OUT …``."""
        # --cancel-on-stdin-eof: the add-on keeps the runner's stdin open as a pipe and closes
        # it to cancel (runner/PROTOCOL.md "Cancel"); the runner reads stdin only when asked.
        out = [python, "-m", "runner", str(self.image), "-o", str(self.output),
               "--backend", self.backend, "--seed", str(int(self.seed)),
               "--texture-size", str(int(self.texture_size)), "--trace", str(self.trace),
               "--cancel-on-stdin-eof"]
        if self.backend == "pixal3d":
            out += ["--pipeline-type", self.pipeline_type]
            if self.pixal3d_dir.strip():
                out += ["--pixal3d-dir", absolute_folder(self.pixal3d_dir)]
        if self.overwrite:
            out.append("--overwrite")
        return out + self.guard.argv()


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


def resolve_output_dir(text: str, blend_file: str = "",
                       package_dir: Path = PACKAGE_DIR) -> Path:
    """The output folder preference ``text`` as an absolute path, resolved once here so the
    runner (whose working folder is the runtime folder inside the extension) gets absolute
    paths.

    ``~`` is expanded; ``//…`` is relative to the saved .blend file ``blend_file`` (Blender's
    convention, as ``bpy.path.abspath`` reads it). Raises :class:`ConfigError` saying what to
    set when ``text`` is a plain relative path (relative to what would be unclear: Blender's
    working folder or the runner's), ``//…`` while the .blend is not saved (``blend_file``
    empty), or a folder inside the add-on's install folder ``package_dir`` (Blender replaces that
    folder on every update, and the runner must never write into its own runtime).
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
    return path


def free_output_paths(folder: Path, stem: str) -> tuple[Path, Path]:
    """``(folder/stem.glb, folder/stem.trace.jsonl)``, with ``_2``, ``_3`` … appended to the stem
    when either exists, so a run never overwrites an earlier result. Creates ``folder``.

    Raises :class:`ConfigError` when the folder cannot be created."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot create the output folder {folder}: {exc.strerror or exc}. "
                          "Choose another folder in the add-on preferences.") from None
    n = 1
    while True:
        name = stem if n == 1 else f"{stem}_{n}"
        glb, trace = folder / f"{name}.glb", folder / f"{name}.trace.jsonl"
        if not glb.exists() and not trace.exists():
            return glb, trace
        n += 1


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
    if isinstance(torch, dict):
        torch = torch.get("version") or torch.get("reason") or torch.get("error") or "missing"
    lines.append(f"Python {py or '?'} · torch {torch or 'not found'}")
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
    return "\n".join(lines)
