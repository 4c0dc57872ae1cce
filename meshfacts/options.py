"""Every job option a person can set, in one table (:data:`TABLE`), and the views made from it.

Standard library only: every process imports it by name through the ``meshfacts`` package —
the runner, stageload, and the Blender add-on, which keeps torch out of Blender's process.
The Pixal3D figures (the pipeline types, the 1536_cascade advice, the export profiles, the
decimation limit: the options shared with ``python -m stageload.pixal3d run``) are written once,
in :mod:`meshfacts.choices`.

Views of the table:

- the runner's command line: ``runner/commands/option_args.py`` ``add_arguments`` (``python -m
runner``,
  ``batch``, ``check``, ``export``; each option names the commands that take it,
  :data:`COMMANDS`);
- the backend registry's options (``runner/backends``): :func:`backend_options`;
- the add-on (``blender_addon/runner_client/option_views.py``, over :func:`addon_options` and each
entry's
  :class:`Panel`): the panel's and the preferences' properties, the job description and its
  validation (``blender_addon/runner_client/job_spec.py``), its command line, and ``headless.py``'s
  arguments;
- ``python -m stageload.pixal3d run``: the same ``choices.SHARED_OPTIONS`` entries.

Adding an option is one :class:`Option` entry here (plus what it does): it then appears in the
runner's ``--help`` (and is refused for a backend it does not belong to), in the panel (when it
has a :class:`Panel`), in ``headless.py --help`` and on the add-on's command line.
tests/runner/test_options_table.py walks the table and checks each view both ways.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from . import choices
from . import units as _units

KINDS = ("choice", "int", "float", "text", "path", "size", "switch")
"""An option's value: one of ``choices``; a whole number; a finite number; text; a folder (made
absolute before it reaches the runner); bytes (``1000000000`` or ``1G``,
``meshfacts.units.parse_size``); a switch (given or not)."""
COMMANDS = ("run", "batch", "check", "export")
"""The commands an option can belong to: a single run (``python -m runner IMAGE``), ``batch``,
``check``, and ``python -m runner export ASSET.npz`` (the export levers)."""
JOB = ("run", "batch")
JOB_AND_CHECK = ("run", "batch", "check")
"""A backend's own options are taken by ``check`` too (it checks the backend with them)."""
GUARDED = ("run", "batch", "export")
"""The commands that run a guarded job (``stageload.guard.add_guard_arguments`` is on their
command lines): the ``guard`` group's entries belong to these."""
ENGINES = ("bounded", "port")
"""The export engines (``--export-engine``; each the name of an export step,
``runner.job.export_step``): ``bounded`` (``bounded_export``, also ``python -m runner
export``) and ``port`` (the port's own ``to_glb``)."""
GROUPS = ("job", "backend", "guard")
"""``job``: a field of every job (backend, seed, texture size, height); ``backend``: a backend's
own option (forwarded to it; refused with another backend); ``guard``: an option of
``stageload.guard``'s own command line (``add_guard_arguments``), listed here for the add-on."""



@dataclass(frozen=True)
class Panel:
    """How the add-on shows an option and turns its value into the runner's.

    ``label``: the property's name; ``where``: ``scene`` (the panel's settings, saved with the
    .blend) or ``preferences``; ``section``: ``main``, ``export`` (the Export sub-panel),
    ``guard`` (the preferences' memory guard box) or ``cluster`` (the batch's cluster, in the
    preferences and the panel's Batch box); ``default``: how a Blender property holds "not
    given" for an option whose runner default is None (``""``, ``0``, ``False``) — never a
    value of its own over the runner's default (tests/runner/test_options_table.py holds
    this), so the command line, the panel and ``headless.py`` share each default; ``unset``:
    the add-on value meaning "not given" (not passed, e.g. 0 faces), ``off``: the runner's
    word for it when it must be said (``--kill-free off``);
    ``items``: enum items ``(value, label, description)`` (description "" = the advice or the
    option's help); ``switch``: ``(on, off)`` — a checkbox for a two-choice option;
    ``format``: the runner's text for a value (``"{:g}%"``); ``always``: passed even at the
    runner's default; ``requires``: passed only when that option is given too; ``subtype``:
    Blender's property subtype (e.g. ``PERCENTAGE``)."""

    label: str
    where: str = "scene"
    section: str = "main"
    default: Any = None
    unset: Any = None
    off: str | None = None
    items: tuple = ()
    switch: tuple[str, str] | None = None
    format: str = "{}"
    always: bool = False
    requires: str | None = None
    subtype: str = ""


@dataclass(frozen=True)
class Option:
    """One job option. ``name``: its identifier (argparse dest unless ``dest_name`` says
    otherwise, the add-on's property, the job description's field); ``help``: one line for
    people, without the default (views append it); ``kind`` (:data:`KINDS`); ``default``: the
    runner's when not given (None: not given — the backend's or the port's own); ``choices``;
    ``low``/``high``: inclusive range; ``unit`` (``px``, ``m``, ``faces``, ``bytes``, ``s``, ``%``,
    ``GiB``); ``backends``: the backends it applies to (empty: every one); ``engines``: the
    export engines (:data:`ENGINES`, ``--export-engine``) an export lever applies to (empty:
    whatever the engine; the add-on's Export sub-panel shows, and passes, only the levers of
    the chosen engine); ``commands`` (:data:`COMMANDS`); ``advice``: value → a warning for
    people; ``flag``: the runner's (default ``--`` + name with dashes); ``metavar``;
    ``affects_output``: False when it changes how, not what, is computed (batch resume
    ignores it); ``group`` (:data:`GROUPS`);
    ``panel``: how the add-on shows it (None: not in the add-on); ``default_text``: the
    runner's default in words when it is not one value (``the backend's: …``);
    ``command_help``: command → ``(help, default_text)`` where that command's ``--help`` must
    say something else (``runner export`` has no backend: its levers are the bounded
    engine's); ``check``: for text, a function that raises ``ValueError`` (what is wrong,
    without the flag) for a value the runner would refuse (e.g. :func:`parse_ray_address`);
    ``choices_by``: backend name (or ``export``, the command without a backend) → the only
    values it takes within the range (the port's texture sides)."""

    name: str
    help: str
    kind: str = "text"
    default: Any = None
    choices: tuple = ()
    low: Any = None
    high: Any = None
    unit: str = ""
    backends: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    commands: tuple[str, ...] = JOB
    advice: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    flag: str = ""
    dest_name: str = ""
    metavar: str | None = None
    affects_output: bool = True
    group: str = "backend"
    panel: Panel | None = None
    default_text: str = ""
    command_help: Mapping[str, tuple[str, str]] = field(default_factory=dict, hash=False,
                                                        compare=False)
    check: Callable[[str], Any] | None = field(default=None, hash=False, compare=False)
    choices_by: Mapping[str, tuple] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS or self.group not in GROUPS:
            raise ValueError(f"option {self.name}: kind {self.kind!r} / group {self.group!r}")
        if not set(self.commands) <= set(COMMANDS):
            raise ValueError(f"option {self.name}: unknown commands {self.commands}")
        if not set(self.engines) <= set(ENGINES):
            raise ValueError(f"option {self.name}: unknown export engines {self.engines}")
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))

    @property
    def dest(self) -> str:
        """The argparse destination (and the backend's keyword)."""
        return self.dest_name or self.name

    @property
    def switch(self) -> bool:
        """True for an option given without a value."""
        return self.kind == "switch"

    @property
    def parse(self) -> Callable[[Any], Any] | None:
        """``convert`` for the kinds that need checking (the backend registry calls it on a
        value as given), None for free text and folders."""
        return None if self.kind in ("text", "path", "switch") else self.convert

    def applies_to(self, backend: str, engine: str | None = None) -> bool:
        """Whether a job with ``backend`` (and, when given, the export engine ``engine``)
        takes this option."""
        if engine is not None and self.engines and engine not in self.engines:
            return False
        return not self.backends or backend in self.backends

    def takes(self, command: str) -> bool:
        """Whether the runner's ``command`` (:data:`COMMANDS`) takes this option (``--cluster``
        is a batch's and a check's, never a single run's)."""
        return command in self.commands

    def convert(self, value):
        """The runner's value of ``value`` (text as typed, or a value of the right type):
        checked against the kind, the choices and the range. Raises ``ValueError`` with a
        message for a person naming the flag and what to give."""
        if self.kind == "switch":
            return bool(value)
        if self.kind == "choice":
            text = str(value)
            if text not in [str(c) for c in self.choices]:
                raise ValueError(f"{self.flag} {value!r} is not one of "
                                 f"{', '.join(map(str, self.choices))}")
            return text
        if self.kind == "size":
            try:
                return _units.parse_size(value)
            except ValueError as exc:
                raise ValueError(f"{self.flag} {value!r}: {exc}") from None
        if self.kind in ("text", "path"):
            if self.check is not None:
                try:
                    self.check(str(value))
                except ValueError as exc:
                    raise ValueError(f"{self.flag} {value!r} {exc}") from None
            return str(value)
        number = self._number(value)
        if (self.low is not None and number < self.low) or \
                (self.high is not None and number > self.high):
            raise ValueError(f"{self.flag} {number:,} {self.range_text()}")
        return number

    def _number(self, value):
        what = "a whole number" if self.kind == "int" else "a finite number"
        unit = f" of {self.unit}" if self.unit and self.unit not in ("%", "px", "m") else ""
        if isinstance(value, bool):
            raise ValueError(f"{self.flag} {value!r} is not {what}{unit}")
        try:
            if self.kind == "int":
                if isinstance(value, float):
                    raise ValueError
                number = int(str(value).replace(",", "").replace("_", "").strip())
            else:
                number = float(value)
        except ValueError:
            raise ValueError(f"{self.flag} {value!r} is not {what}{unit}") from None
        if self.kind == "float" and not math.isfinite(number):
            raise ValueError(f"{self.flag} {value!r} is not {what}{unit}")
        return number

    def range_text(self) -> str:
        """``must be from 0.01 to 100 m`` (or ``at least …``/``at most …``)."""
        unit = f" {self.unit}" if self.unit else ""
        if self.low is not None and self.high is not None:
            return f"must be from {self.low:,} to {self.high:,}{unit}"
        if self.low is not None:
            return f"must be at least {self.low:,}{unit}"
        return f"must be at most {self.high:,}{unit}"

    def help_text(self, command: str | None = None) -> str:
        """The help line with the default (when there is one) and any advice; ``command``'s own
        wording (``command_help``) where it has one."""
        text, default_text = self.command_help.get(command, (self.help, self.default_text))
        if default_text:
            text += f" (default: {default_text})"
        elif self.default not in (None, "", False):
            text += f" (default: {self.default})"
        for advice in self.advice.values():
            text += f". {advice}"
        return text.replace("%", "%%")  # argparse formats help with %


def parse_ray_address(text: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address ``HOST:PORT`` or ``ray://HOST:PORT`` (port 1-65535; an
    IPv6 host in brackets), None for ``auto`` (the cluster this machine belongs to). The forms
    Ray's ``ray.init(address=…)`` takes (Ray's "Starting Ray" and "Ray Client" docs). Raises
    ``ValueError`` saying what to give (the runner's ``--cluster`` and the add-on's preference
    both check with this)."""
    if text == "auto":
        return None
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 \
            or any(c.isspace() for c in host):
        raise ValueError("is not a Ray address; give auto, HOST:PORT (e.g. 192.168.1.20:6379) "
                         "or ray://HOST:10001")
    return host.strip("[]"), int(port)


def _shared(name: str, **overrides) -> Option:
    """The Pixal3D option ``name`` of ``choices.SHARED_OPTIONS`` (shared with stageload's own
    command line) as an :class:`Option` of the ``pixal3d`` backend, with ``overrides``."""
    entry = dict(next(e for e in choices.SHARED_OPTIONS if e["name"] == name))
    entry.setdefault("choices", ())
    entry.update(backends=("pixal3d",), commands=JOB_AND_CHECK, **overrides)
    if "choices" in entry:
        entry["choices"] = tuple(entry["choices"])
    return Option(**entry)


def _items(*triples) -> tuple:
    return tuple(triples)


PIXAL3D = ("pixal3d",)
MAX_TEXTURE_SIZE = 4096
"""The largest texture side (px) any backend takes (the built-in backend's
``runner.backends.builtin.texture.MAX_TEXTURE_SIZE``, which a test pins; the port's largest)."""
_PORT_SIZES = ", ".join(map(str, choices.TEXTURE_SIZES))

TABLE: tuple[Option, ...] = (
    Option("backend", "which image-to-mesh method runs", kind="choice", default="builtin",
           choices=("builtin", "pixal3d"), group="job", commands=JOB,
           panel=Panel("Backend", always=True, items=_items(
               ("builtin", "Built-in (silhouette inflation)",
                "Inflates the character's silhouette into a rounded, textured body: no "
                "weights, CPU, seconds. Not Pixal3D"),
               ("pixal3d", "Pixal3D (staged)",
                "TencentARC's Pixal3D through Pixal3D-mac, loading one stage's models at a "
                "time; needs the Pixal3D-mac folder in the preferences")))),
    Option("seed", "random seed; 42 is Pixal3D-mac's own default, so a Pixal3D run with the "
           "defaults draws the noise the port's own script draws (the built-in backend is "
           "deterministic and does not use it)", kind="int", default=choices.DEFAULT_SEED,
           low=0, metavar="N", group="job", panel=Panel("Seed", always=True)),
    Option("texture_size", "base-colour texture side in pixels; 1024 for every backend and "
           "the add-on alike: Pixal3D-mac's own 2048 bakes and stores four times the texels",
           kind="int", default=choices.DEFAULT_TEXTURE_SIZE, low=1, high=MAX_TEXTURE_SIZE,
           unit="px", metavar="PX", group="job", commands=(*JOB, "export"),
           choices_by={"pixal3d": choices.TEXTURE_SIZES, "export": choices.TEXTURE_SIZES},
           default_text=f"{choices.DEFAULT_TEXTURE_SIZE}; builtin takes 1-{MAX_TEXTURE_SIZE} "
                        f"(sizes under 512 are raised to 512), pixal3d one of {_PORT_SIZES}",
           command_help={"export": (f"base-colour texture side in pixels, one of {_PORT_SIZES}",
                                    str(choices.DEFAULT_TEXTURE_SIZE))},
           # the sides every backend takes (the port's; the built-in one takes any up to the
           # largest of them): Generate and Re-export offer them all
           panel=Panel("Texture", always=True, items=tuple(
               (s, f"{s} px", f"Base-colour texture of {s} × {s} pixels")
               for s in choices.TEXTURE_SIZES))),
    Option("height", "height of the mesh in metres, 0.01-100 (builtin only)",
           default=1.0, kind="float", low=0.01, high=100.0, unit="m", metavar="M",
           dest_name="height_m", backends=("builtin",), group="job"),
    Option("stall_timeout", "stop the job (kind stalled) once the worker has been stalled - "
           "stopped (state T) for 10 s, or no CPU time and no event for 60 s - this many "
           "seconds (default: off; a Pixal3D stage can run minutes without an event)",
           kind="float", low=1.0, unit="s", metavar="SECONDS", group="job",
           affects_output=False),
    Option("cluster", "run every image as a guarded job on a node of this Ray cluster "
           "(batch), or check its nodes (check): auto, HOST:6379 or ray://HOST:10001; needs "
           "the cluster extra (docs/cluster.md)", kind="text", metavar="ADDRESS", group="job",
           commands=("batch", "check"), affects_output=False, check=parse_ray_address,
           panel=Panel("Cluster address", where="preferences", section="cluster", default="",
                       unset="")),
    Option("cluster_token_file", "the file holding the token of a Ray cluster started with "
           "RAY_AUTH_MODE=token (the token itself is never given on a command line)",
           default_text="Ray's own: $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token",
           kind="path", metavar="FILE", group="job", commands=("batch", "check"),
           affects_output=False,
           panel=Panel("Cluster token file", where="preferences", section="cluster",
                       default="", unset="", requires="cluster", subtype="FILE_PATH")),
    Option("pixal3d_dir", "folder of the Pixal3D-mac checkout (default: $PIXAL3D_DIR)",
           kind="path", metavar="DIR", backends=PIXAL3D, commands=JOB_AND_CHECK,
           panel=Panel("Pixal3D-mac folder", where="preferences", default="", unset="")),
    _shared("pipeline_type", panel=Panel("Pipeline", always=True, items=_items(
        ("1024_cascade", "1024_cascade", "Pixal3D pipeline type 1024_cascade (recommended)"),
        ("1536_cascade", "1536_cascade (not recommended on Mac)", "")))),
    _shared("load", affects_output=False),
    _shared("keep_resident", affects_output=False),
    _shared("prefetch", affects_output=False),
    _shared("working_memory", panel=Panel("Working memory", items=_items(
        ("lean", "Lean", "Compute the stages' largest temporaries in bands and chunks (NAF "
         "upsampling, projection, attention, decoder rows): much lower peaks, same result "
         "within a stated bound (docs/pixal3d.md, Working memory)"),
        ("port", "Port", "The port's own computations, unchanged (for comparison)")))),
    Option("export_process", "own: export in a fresh process once the model process has "
           "exited (its memory back); in-process: in the model process, as the port does",
           kind="choice", default="own", choices=("own", "in-process"), backends=PIXAL3D,
           engines=("port",), commands=JOB_AND_CHECK, affects_output=False,
           panel=Panel("Export in", section="export", items=_items(
               ("own", "Own process", "Export in a fresh process once the model process has "
                "exited and given all its memory back (the runner's default)"),
               ("in-process", "In the model process",
                "Export in the model process, as the port does")))),
    _shared("export_profile", engines=("port",), panel=Panel("Profile", section="export",
                                                             items=_items(
        ("port", "Port", "The port's own export values"),
        ("fit", "Fit", "The low-memory export a peer validated on a 36 GB Mac: remesh at "
         "min(512, grid), free temporaries between steps")))),
    Option("export_engine", "bounded: the export engine that fits a memory budget (CPU, no "
           "torch, in a process of its own; no remesh); port: the port's own export (its "
           "remesh and levers)", kind="choice", default="bounded", choices=ENGINES,
           backends=PIXAL3D, commands=JOB_AND_CHECK,
           panel=Panel("Export engine", section="export", items=_items(
               ("bounded", "Bounded", "The export engine that fits the memory budget below: "
                "CPU, no remesh, in a process of its own (the default)"),
               ("port", "Port", "The port's own export with its remesh and levers (about 70 "
                "GB on a 1024 run, SPEC §1)")))),
    Option("export_budget", "memory the bounded export engine plans its pieces for, e.g. 2G; "
           "an asset that cannot fit is refused before it is read", default_text="3G",
           kind="size", unit="bytes", metavar="SIZE", backends=PIXAL3D, engines=("bounded",),
           commands=(*JOB_AND_CHECK, "export"),
           command_help={"export": ("memory the bounded export engine plans its pieces for, "
                                    "e.g. 2G, at least 256M; an asset that cannot fit is "
                                    "refused before it is read", "3G")},
           panel=Panel("Export budget", section="export", default="", unset="")),
    Option("keep_asset", "keep the decoded asset beside the GLB as NAME.asset.npz, to export "
           "it again with other levers (python -m runner export ASSET.npz)",
           kind="switch", backends=PIXAL3D, affects_output=False,
           panel=Panel("Keep asset for re-export", section="export", default=False)),
    replace(_shared("decimation_target", panel=Panel(
        "Decimation target", section="export", default=0, unset=0)),
        commands=(*JOB_AND_CHECK, "export"),
        command_help={"export": ("faces the bounded export engine decimates the mesh to",
                                 "1,000,000")}),
    _shared("remesh", engines=("port",), panel=Panel("Remesh", section="export",
                                                     switch=("on", "off"), default=True,
                                                     unset=True)),
    _shared("remesh_resolution", engines=("port",), panel=Panel(
        "Remesh resolution", section="export", default="grid", unset="grid", items=_items(
        ("grid", "Grid", "Remesh at the pipeline's grid resolution (the port's way)"),
        ("512", "512", "Remesh at min(512, grid): 4x fewer faces into cleanup; refused with "
         "the reason where the port cannot do it")))),
    _shared("allow_dense_grid_sample", affects_output=False, engines=("port",),
            panel=Panel("Allow dense grid sample", section="export", default=False)),
    Option("strict_export", "fail (export_fallback) instead of writing the port's fallback "
           "export when its native export fails (without it: a warning event says so)",
           kind="switch", backends=PIXAL3D, engines=("port",), commands=JOB_AND_CHECK,
           affects_output=False,
           panel=Panel("Strict export (no fallback)", section="export", default=False)),
    # The guard's own options (stageload.guard.add_guard_arguments defines their command line
    # and defaults); here how the add-on's preferences set them.
    Option("wait_free_percent", "Start only when this much of total memory is available",
           kind="float", low=0.0, high=95.0, unit="%", flag="--wait-free", group="guard",
           commands=GUARDED, metavar="PERCENT",
           panel=Panel("Wait for free memory", where="preferences", section="guard",
                       default=0.0, unset=0.0, format="{:g}%", subtype="PERCENTAGE")),
    Option("kill_free_percent", "Stop the job when available memory stays under this",
           kind="float", low=0.0, high=90.0, unit="%", flag="--kill-free", group="guard",
           commands=GUARDED, default=10.0, metavar="PERCENT",
           panel=Panel("Stop under free memory", where="preferences", section="guard",
                       unset=0.0, off="off", format="{:g}%", always=True,
                       subtype="PERCENTAGE")),
    Option("swap_budget_gb", "Stop the job when swap grows by more than this many GiB "
           "(1024³ bytes)", kind="float", low=0.0, unit="GiB", flag="--swap-budget",
           group="guard", commands=GUARDED, default=8.0, metavar="GIB",
           panel=Panel("Swap budget (GiB)", where="preferences", section="guard", unset=0.0,
                       off="off", format="{:g}G", always=True)),
    Option("start_timeout", "Give up waiting for memory after this many seconds",
           kind="float", low=0.0, unit="s", group="guard", commands=GUARDED, metavar="SECONDS",
           panel=Panel("Admission timeout (s)", where="preferences", section="guard",
                       default=0.0, unset=0.0, format="{:g}")),
    Option("busy", "Regular expression of other heavy jobs' command lines (e.g. ffmpeg|python "
           "train); start only after none has run for the quiet time", kind="text",
           group="guard", commands=GUARDED, metavar="REGEX",
           panel=Panel("Wait for jobs matching", where="preferences", section="guard",
                       default="", unset="")),
    Option("quiet_for", "Seconds without a matching job before starting", kind="float",
           low=0.0, unit="s", group="guard", commands=GUARDED, metavar="SECONDS",
           panel=Panel("Quiet time (s)", where="preferences", section="guard", default=0.0,
                       format="{:g}", always=True, requires="busy")),
)

_BY_NAME = {opt.name: opt for opt in TABLE}


def get(name: str) -> Option:
    """The option called ``name``. Raises ``KeyError`` naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown option {name!r}; known: {', '.join(_BY_NAME)}") from None


def table() -> tuple[Option, ...]:
    """The table as it is now (a test may extend :data:`TABLE` before the views read it)."""
    return TABLE


def backend_options(backend: str) -> tuple[Option, ...]:
    """The ``backend``'s own options (group ``backend``), in table order."""
    return tuple(o for o in table() if o.group == "backend" and backend in o.backends)


# ---------------------------------------------------------------- the add-on's views
def addon_options(where: str | None = None, section: str | None = None,
                  command: str | None = None) -> list[Option]:
    """The options the add-on shows (those with a :class:`Panel`), optionally only those of
    ``where`` (``scene`` / ``preferences``), ``section``, and those the runner's ``command``
    (:data:`COMMANDS`: Generate is ``run``, Run Batch ``batch``) takes."""
    return [o for o in table() if o.panel is not None
            and (where is None or o.panel.where == where)
            and (section is None or o.panel.section == section)
            and (command is None or o.takes(command))]


def addon_default(opt: Option):
    """The add-on's default value of ``opt``."""
    panel = opt.panel
    if panel is not None and panel.default is not None:
        return panel.default
    if panel is not None and panel.switch is not None:
        return opt.default == panel.switch[0]
    return opt.default
