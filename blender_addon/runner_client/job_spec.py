"""The add-on's one job description: settings → :class:`JobSettings` → :class:`JobSpec` → the
runner's command line. No bpy.

Every launch goes this way — Generate, Run Batch and ``headless.py`` alike:

A job is of one :data:`KINDS`: ``run`` (one image), ``batch`` (a folder) or ``export`` (the
add-on's Re-export: ``python -m runner export`` on a kept asset, with the panel's levers that
the bounded export engine takes).

1. :func:`settings_from` reads every option of the runner's options table that the add-on shows
   (``meshfacts/options.py``, imported by ``runner_client.facts``) from the panel's scene
   settings and the preferences (or from ``headless.py``'s parsed arguments, which the same
   table made);
2. :class:`JobSettings` (one field per such option, made from the table) checks each value as
   the runner would (``ConfigError`` saying what to change) — before anything is spawned;
3. :class:`JobSpec` adds the paths; :meth:`JobSpec.argv` / :meth:`JobSpec.batch_argv` give the
   command line (``option_views.job_argv``: an option of another backend, or one left at the
   runner's default, is not passed).

Adding an option to the table adds a field here, a property to the panel or the preferences, an
argument to ``headless.py`` and its words on the command line, with no edit in this file.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from . import option_views
from .config import ConfigError
from .facts import options

#: The kinds of job (:attr:`JobSpec.kind`): the runner's command each runs.
KINDS = ("run", "batch", "export")

#: The runner's backends (the options table's ``--backend`` choices; a contract test pins them
#: to the runner's registry).
BACKENDS: tuple[str, ...] = tuple(options.get("backend").choices)


def _check(self) -> None:
    """``JobSettings.__post_init__``: every value checked (and normalised: ``"1024"`` → 1024)
    against the table. Raises :class:`ConfigError` naming the setting and what to give."""
    for f in dataclasses.fields(self):
        try:
            value = option_views.addon_value(options.get(f.name), getattr(self, f.name))
        except ValueError as exc:
            raise ConfigError(f"{exc} Change it in the panel or the add-on preferences.") from None
        object.__setattr__(self, f.name, value)


def _values(self) -> dict:
    """``JobSettings.values()``: option name → value."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _make_settings_class() -> type:
    """:class:`JobSettings`, one field per add-on option of the table (its add-on default)."""
    fields = [(opt.name, object, field(default=options.addon_default(opt)))
              for opt in options.addon_options()]
    doc = ("The settings of one job, one field per option of the runner's options table that "
           "the add-on shows (" + ", ".join(name for name, _t, _f in fields) + "); each value "
           "in the add-on's type (a checkbox's bool, 0 for \"not given\"), checked on "
           "creation. Raises ConfigError.")
    return dataclasses.make_dataclass(
        "JobSettings", fields, frozen=True,
        namespace={"__post_init__": _check, "values": _values, "__doc__": doc,
                   "__module__": __name__})


JobSettings = _make_settings_class()


def settings_from(*sources, command: str | None = None, **overrides) -> "JobSettings":
    """:class:`JobSettings` from objects holding the options as attributes (the panel's scene
    settings, the preferences, an argparse namespace), the first that has a name winning, and
    ``overrides``. Names no source has keep the add-on's default; with ``command`` (``run`` /
    ``batch``), so do the options that command does not take (Generate never reads, nor is
    stopped by, the batch's cluster address). Raises :class:`ConfigError`."""
    values = {}
    for opt in options.addon_options(command=command):
        for source in sources:
            if hasattr(source, opt.name):
                values[opt.name] = getattr(source, opt.name)
                break
    values.update(overrides)
    return JobSettings(**values)


@dataclass(frozen=True)
class JobSpec:
    """One job: ``image`` (a batch: the folder; an export: the asset ``.npz``), ``output``
    (GLB; a batch: the output folder), ``trace``, ``settings`` (:class:`JobSettings`),
    ``overwrite`` (replace existing outputs), ``kind`` (:data:`KINDS`). Raises
    ``ValueError`` for an unknown kind."""

    image: Path
    output: Path
    trace: Path
    settings: JobSettings = field(default_factory=JobSettings)
    overwrite: bool = False
    kind: str = "run"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown job kind {self.kind!r}; one of {', '.join(KINDS)}")

    @property
    def backend(self) -> str | None:
        """The job's backend: the settings' one; None for an export (``runner export`` runs
        no backend)."""
        return None if self.kind == "export" else self.settings.backend

    @property
    def seed(self) -> int:
        return self.settings.seed

    def argv(self, python: str) -> list[str]:
        """The full command line: ``python -m runner IMAGE -o OUT --trace TRACE …``; a batch's
        as :meth:`batch_argv`; an export's ``python -m runner export ASSET -o OUT --trace
        TRACE …`` (only the options ``runner export`` takes: the bounded engine's levers and
        the guard's)."""
        if self.kind == "batch":
            return self.batch_argv(python, self.image, self.output)
        command = ["export"] if self.kind == "export" else []
        return [python, "-m", "runner", *command, str(self.image), "-o", str(self.output),
                "--trace", str(self.trace), *self.options(self.kind)]

    def batch_argv(self, python: str, folder: Path, out_dir: Path) -> list[str]:
        """``python -m runner batch FOLDER -o OUT_DIR …``: every image of ``folder`` with these
        settings, resumable through the runner's manifest ``OUT_DIR/manifest.json`` (an image
        done by an earlier batch with the same settings is skipped). ``image``, ``output`` and
        ``trace`` are not used."""
        return [python, "-m", "runner", "batch", str(folder), "-o", str(out_dir),
                *self.options("batch")]

    @property
    def cluster(self) -> str:
        """The Ray address a batch runs on ("" = this machine)."""
        return self.settings.cluster

    def options(self, command: str | None = None) -> list[str]:
        """The runner options of the runner's ``command`` (``run``, ``batch`` or ``export``;
        default: this job's kind): the options table's that it takes
        (``option_views.job_argv``), cancel, overwrite."""
        # --cancel-on-stdin-eof: the add-on keeps the runner's stdin open as a pipe and closes
        # it to cancel (runner/PROTOCOL.md "Cancel"); the runner reads stdin only when asked.
        out = option_views.job_argv(self.settings.values(), self.backend,
                                    command or self.kind)
        out.append("--cancel-on-stdin-eof")
        if self.overwrite:
            out.append("--overwrite")
        return out
