"""Add-on preferences: runner interpreter (with Check), Pixal3D-mac folder, output folder, guard.

``bl_idname`` is the add-on's package name, as Blender requires for an extension's preferences.
The "Check" button runs ``<interpreter> -m runner check`` on a worker thread and shows its
answer; a timer copies the answer into the preferences on the main thread. With "Deep" on, the
Pixal3D interpreter's check is the deep self-check (``runner_client.self_check``: each lean part
against the port, its report a new file in the output folder).
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import bpy
from bpy.props import BoolProperty, StringProperty

from ..runner_client import config, option_views, self_check
from ..runner_client.facts import options
from ..runner_client.job_spec import BACKENDS
from ..runner_client.process import SpawnError, run_quick, runner_env

#: The add-on's package name (``blender_addon`` in a checkout, ``bl_ext.<repo>.image_to_mesh``
#: installed): this module's package's parent.
ADDON_ID = __package__.rpartition(".")[0]


def get_prefs(context=None) -> "ImageToMeshPreferences":
    """This add-on's preferences (raises KeyError when the add-on is not enabled)."""
    context = context or bpy.context
    return context.preferences.addons[ADDON_ID].preferences


def default_output_dir() -> Path:
    """Where results go when the Output folder preference is empty — a place uninstalling the
    extension never deletes (Blender removes ``extension_path_user`` with the extension):
    ``image_to_mesh/`` next to the saved .blend; for an unsaved file ``~/Documents/Image to
    Mesh`` (``~/Image to Mesh`` when there is no Documents folder)."""
    if bpy.data.filepath:
        return Path(os.path.dirname(os.path.abspath(bpy.data.filepath))) / "image_to_mesh"
    home = Path(os.path.expanduser("~"))
    docs = home / "Documents"
    return (docs if docs.is_dir() else home) / "Image to Mesh"


def output_dir(prefs) -> Path:
    """The output folder in use, absolute: the preference when set (``//`` relative to the
    saved .blend, read with ``bpy.path.abspath``), else :func:`default_output_dir`. Raises
    :class:`config.ConfigError` for a relative folder, ``//`` in an unsaved file, or a folder
    inside the add-on's own or inside Blender's per-extension user folder (both deleted on
    uninstall; ``config.resolve_output_dir``)."""
    text = prefs.output_dir.strip() or str(default_output_dir())
    if text.startswith("//") and bpy.data.filepath:
        text = bpy.path.abspath(text)  # absolute now; Blender's own reading of "//"
    return config.resolve_output_dir(text, bpy.data.filepath, forbidden=_extension_user_dir())


def _extension_user_dir() -> Path | None:
    """Blender's per-extension user folder (``bpy.utils.extension_path_user``), removed when the
    extension is uninstalled; None when loaded as a legacy add-on."""
    try:
        return Path(bpy.utils.extension_path_user(ADDON_ID, create=False))
    except (ValueError, TypeError):
        return None


def wheel_site_packages() -> str | None:
    """The folder Blender installs extension wheels into (``config.wheel_site`` of
    ``bpy.utils.user_resource("EXTENSIONS")``), or None when it does not exist."""
    try:
        return config.wheel_site(bpy.utils.user_resource("EXTENSIONS"))
    except (ValueError, TypeError):
        return None


def interpreter_for(prefs, backend: str) -> config.Interpreter:
    """The interpreter for a ``backend`` job with these preferences
    (``config.choose_interpreter``: Runner Python, else Blender's own Python with the wheels for
    the built-in backend, else the Pixal3D-mac folder's venv). Raises
    :class:`config.ConfigError` saying what to set."""
    return config.choose_interpreter(backend, prefs.python, prefs.pixal3d_dir, sys.executable,
                                     wheel_site_packages())


_PREFLIGHT: dict = {}
"""The last interpreter answer of :func:`preflight_error`: ``{"key": inputs, "error": text}``."""


def preflight_error(context) -> str:
    """The message that stops Generate right now ("" when none): no usable interpreter for the
    chosen backend, a missing runtime, an output folder that is relative or inside the add-on.
    The panel shows it before the user presses anything.

    The interpreter is resolved again only when something it depends on changes (the Runner
    Python and Pixal3D-mac folder preferences, the backend, the wheels folder), not on every
    redraw; :func:`forget_preflight` drops the answer (the Check button does), and Generate
    always resolves afresh (``operators.make_launch``)."""
    try:
        prefs = get_prefs(context)
        backend = context.scene.image_to_mesh.backend
        key = (prefs.python, prefs.pixal3d_dir, backend, wheel_site_packages())
        if _PREFLIGHT.get("key") != key:
            try:
                interpreter_for(prefs, backend)
                error = ""
            except config.ConfigError as exc:
                error = str(exc)
            _PREFLIGHT.update(key=key, error=error)
        if _PREFLIGHT["error"]:
            return _PREFLIGHT["error"]
        config.runtime_dir()
        output_dir(prefs)
    except config.ConfigError as exc:
        return str(exc)
    return ""


def forget_preflight() -> None:
    """Resolve the interpreter again at the next :func:`preflight_error`."""
    _PREFLIGHT.clear()


def cluster_problem(prefs) -> str:
    """Why the cluster preferences cannot be used ("" when the address is empty — a local
    batch — or a Ray address: ``auto``, ``HOST:PORT``, ``ray://HOST:PORT``, and the token file
    is empty or a file): the address checked as the runner checks ``--cluster`` (the options
    table's ``parse_ray_address``); a token file that is not a file would be the runner's
    ``cluster_auth`` refusal, said here before the batch starts."""
    try:
        option_views.addon_value(options.get("cluster"), prefs.cluster)
    except ValueError as exc:
        return f"{exc} Leave it empty to run the batch on this machine."
    token_file = getattr(prefs, "cluster_token_file", "").strip()
    if prefs.cluster.strip() and token_file:
        path = os.path.abspath(os.path.expanduser(token_file))  # as the runner is given it
        if not os.path.isfile(path):
            return (f"Cluster token file {path} is not a file. Give the file holding the "
                    "cluster's token (~/.ray/auth_token on the head), or leave it empty to use "
                    "Ray's own places (docs/cluster.md).")
    return ""


class _CheckResult:
    """Answer of the last Check, handed from the worker thread to the main thread."""
    lock = threading.Lock()
    pending = False
    text = ""


def check_plan(prefs) -> list[tuple[str, config.Interpreter | str]]:
    """For each backend, the interpreter a job would use (:func:`interpreter_for`) or the
    message saying why there is none."""
    plan = []
    for backend in BACKENDS:
        try:
            plan.append((backend, interpreter_for(prefs, backend)))
        except config.ConfigError as exc:
            plan.append((backend, str(exc)))
    return plan


def _run_check(interpreter: config.Interpreter, runtime: Path, pixal3d_dir: str,
               report: Path | None = None) -> str:
    """``runner check`` with one interpreter (with ``report``: the deep check, writing its
    report there; ``self_check.check_argv``), summarised (``config.summarize_check``), or a
    line starting ``ERROR:``."""
    folder = config.absolute_folder(pixal3d_dir) if pixal3d_dir.strip() else ""
    argv = self_check.check_argv(interpreter.python, folder, report)
    limit = self_check.DEEP_TIMEOUT if report is not None else self_check.QUICK_TIMEOUT
    try:
        rc, out, err = run_quick(argv, runner_env(runtime, interpreter.extra_path), cwd=runtime,
                                 timeout=limit)
    except SpawnError as exc:
        return f"ERROR: {exc}"
    if rc is None:
        return f"ERROR: `runner check` did not answer within {limit} s."
    try:
        return config.summarize_check(out)
    except (ValueError, AttributeError):
        tail = (err.strip().splitlines() or out.strip().splitlines() or [""])[-1]
        return f"ERROR: `runner check` failed (exit {rc}): {tail}"


def _check_worker(plan, runtime: Path, pixal3d_dir: str, report: Path | None = None) -> None:
    """Check every backend's interpreter (each distinct one once; with ``report``, pixal3d's
    with the deep check) and compose the report: per backend, which interpreter and why, its
    Python/torch line and whether the backend is ready (and the deep check's lines). The
    report starts with ``ERROR:`` when the built-in backend cannot run."""
    answers: dict = {}
    lines, builtin_ok = [], False
    for backend, interp in plan:
        if isinstance(interp, str):
            lines.append(f"{backend}: not available — {interp}")
            continue
        deep = report if backend == "pixal3d" else None
        if (interp, deep) not in answers:
            answers[(interp, deep)] = _run_check(interp, runtime, pixal3d_dir, deep)
        summary = answers[(interp, deep)].splitlines() or [""]
        lines.append(f"{backend}: runs with {interp.python} ({interp.why})")
        mine = [ln for ln in summary[1:] if ln.startswith(f"{backend}: ")]
        if deep is not None:  # the deep check's lines follow the backends'
            at = next((i for i, ln in enumerate(summary) if ln.startswith("Deep check")), None)
            mine += summary[at:] if at is not None else []
        lines += [f"  {summary[0]}"] + [f"  {ln}" for ln in mine]
        builtin_ok |= backend == "builtin" and mine == ["builtin: ready"]
    text = "\n".join(lines)
    if not builtin_ok:
        text = "ERROR: the built-in backend cannot run (below)\n" + text
    with _CheckResult.lock:
        _CheckResult.text = text
        _CheckResult.pending = False


def check_poll() -> float | None:
    """Timer callback: copy a finished Check's answer into the preferences."""
    with _CheckResult.lock:
        if _CheckResult.pending:
            return 0.2
        text = _CheckResult.text
    try:
        get_prefs().check_report = text
    except KeyError:
        return None
    for win in bpy.context.window_manager.windows:
        for area in win.screen.areas:
            area.tag_redraw()
    return None


def check_pending() -> bool:
    """True while a Check runs."""
    with _CheckResult.lock:
        return _CheckResult.pending


class IMAGE_TO_MESH_OT_check(bpy.types.Operator):
    """Run `runner check` with the configured interpreter and show what it can run"""
    bl_idname = "image_to_mesh.check"
    bl_label = "Check"

    def execute(self, context):
        prefs = get_prefs(context)
        try:
            if prefs.python.strip():  # a wrong preference is the one thing to fix first
                config.resolve_interpreter(prefs.python)
            runtime = config.runtime_dir()
        except config.ConfigError as exc:
            prefs.check_report = f"ERROR: {exc}"
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if check_pending():
            return {"CANCELLED"}
        report = None
        if prefs.check_deep:
            try:
                # the report's folder as Generate makes it: a first Check may come first
                report = self_check.report_path(config.make_output_folder(output_dir(prefs)))
            except config.ConfigError as exc:
                prefs.check_report = f"ERROR: the deep check's report: {exc}"
                self.report({"ERROR"}, str(exc))
                return {"CANCELLED"}
        forget_preflight()  # the panel resolves the interpreter again
        with _CheckResult.lock:
            _CheckResult.pending = True
        plan = check_plan(prefs)
        prefs.check_report = "Checking " + ", ".join(
            sorted({i.python for _, i in plan if not isinstance(i, str)})) + (
            " with the deep check (about two minutes on an M-series Mac) …" if report
            else " …")
        threading.Thread(target=_check_worker, args=(plan, runtime, prefs.pixal3d_dir, report),
                         daemon=True,
                         name="image-to-mesh-check").start()
        bpy.app.timers.register(check_poll, first_interval=0.2)
        return {"FINISHED"}


def table_properties(where: str) -> dict:
    """The Blender properties of the options table's add-on options shown in ``where``
    (``scene`` / ``preferences``): name → property (``option_views.property_spec``)."""
    out = {}
    for opt in options.addon_options(where):
        kind, kwargs = option_views.property_spec(opt)
        out[opt.name] = getattr(bpy.props, kind)(**kwargs)
    return out


class ImageToMeshPreferences(bpy.types.AddonPreferences):
    """Preferences of the Image to Mesh extension: the runner's interpreter and the output
    folder, and the options table's preference options (the Pixal3D-mac folder, the guard)."""
    bl_idname = ADDON_ID

    python: StringProperty(
        name="Runner Python", subtype="FILE_PATH", default="",
        description="Python interpreter that runs the runner, for every backend. Empty: the "
                    "built-in backend uses Blender's own Python with the extension's bundled "
                    "wheels; Pixal3D uses the virtual environment (.venv or venv) inside the "
                    "Pixal3D-mac folder")
    output_dir: StringProperty(
        name="Output folder", subtype="DIR_PATH", default="",
        description="Where GLBs, traces and charts are written. Empty: image_to_mesh next to "
                    "the saved .blend, else Documents/Image to Mesh in your home folder")
    check_report: StringProperty(name="Check", default="")
    check_deep: BoolProperty(
        name="Deep", default=False,
        description="Check also runs the deep self-check: each lean part of the Pixal3D path "
                    "against the port's own, on your port, weights and device (about two "
                    "minutes on an M-series Mac); its report goes to the output folder")
    __annotations__.update(table_properties("preferences"))

    def draw(self, context):
        layout = self.layout
        col = layout.column()
        row = col.row(align=True)
        row.prop(self, "python")
        row.operator(IMAGE_TO_MESH_OT_check.bl_idname, icon="CHECKMARK")
        row.prop(self, "check_deep", toggle=True)
        for backend, interp in check_plan(self):
            if isinstance(interp, str):
                if backend == "builtin" or self.python.strip():
                    box = col.box()
                    box.alert = True
                    wrap_label(box, interp, icon="ERROR")
                    break
                wrap_label(col, f"{backend}: {interp}", icon="INFO")
            else:
                wrap_label(col, f"{backend}: {interp.python} ({interp.why})", icon="INFO")
        if self.check_report:
            box = col.box()
            box.alert = self.check_report.startswith("ERROR")
            for i, line in enumerate(self.check_report.splitlines()):
                wrap_label(box, line, icon="INFO" if i == 0 else "BLANK1")
        col.prop(self, "pixal3d_dir")
        col.prop(self, "output_dir")
        try:
            folder = output_dir(self)
        except config.ConfigError as exc:
            box = col.box()
            box.alert = True
            wrap_label(box, str(exc), icon="ERROR")
        else:
            if not self.output_dir.strip():
                wrap_label(col, f"Using {folder}", icon="INFO")
        box = layout.box()
        box.label(text="Batch on a Ray cluster (docs/cluster.md)", icon="NETWORK_DRIVE")
        draw_cluster_address(box, self)
        box = layout.box()
        box.label(text="Memory guard (defaults for every run)", icon="MEMORY")
        grid = box.grid_flow(columns=2, even_columns=True)
        for opt in options.addon_options("preferences", "guard"):
            grid.prop(self, opt.name)


def draw_cluster_address(layout, prefs, width: int = 70) -> str:
    """The cluster address preference(s) of the options table on ``layout``, and under them,
    in red, what is wrong with the address (``cluster_problem``), wrapped at ``width``.
    Returns that problem ("" when the address is fine or empty)."""
    for opt in options.addon_options("preferences", "cluster"):
        layout.prop(prefs, opt.name)
    problem = cluster_problem(prefs)
    if problem:
        sub = layout.column()
        sub.alert = True
        wrap_label(sub, problem, icon="ERROR", width=width)
    return problem


def wrap_label(layout, text: str, icon: str = "NONE", width: int = 70) -> None:
    """Draw ``text`` as labels of at most ``width`` characters (Blender labels do not wrap)."""
    import textwrap
    # break_on_hyphens=False: a package, a path or an option (image-to-mesh[cluster],
    # --export-budget) stays whole on its line, so it can be read and typed as shown
    for i, line in enumerate(textwrap.wrap(text, width, break_on_hyphens=False) or [""]):
        layout.label(text=line, icon=icon if i == 0 else "BLANK1")


CLASSES = (IMAGE_TO_MESH_OT_check, ImageToMeshPreferences)
