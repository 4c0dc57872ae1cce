"""The add-on's views of the runner's options table (``meshfacts/options.py``, loaded by
``runner_client.facts``): each add-on option's value checked in the add-on's types
(:func:`addon_value`), its words on the runner's command line (:func:`job_argv`), its Blender
property (:func:`property_spec`) and its ``headless.py`` argument (:func:`add_addon_arguments`).
Pure: no bpy (the panel calls ``getattr(bpy.props, name)(**kwargs)``).

An option's add-on value is what the panel holds: a checkbox's bool for a two-choice option
(``Panel.switch``), ``Panel.unset`` (e.g. 0 faces) for "not given", an enum's text for a number.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from .facts import options


def addon_value(opt, value):
    """``value`` as the add-on holds it (a checkbox's bool, 0 for "not given", an enum's text
    for a number), checked like the runner checks it: returns the value in the add-on's type.
    Raises ``ValueError`` naming the setting and what to give."""
    panel = opt.panel
    label = panel.label if panel is not None else opt.name
    if panel is not None and panel.switch is not None or opt.kind == "switch":
        if not isinstance(value, bool):
            raise ValueError(f"{label} must be on or off, not {value!r}")
        return value
    if panel is not None and is_unset(panel, value):
        return value
    if opt.kind in ("int", "float") and isinstance(value, str) and opt.kind == "int" \
            and panel is not None and panel.items:
        value = value.strip()  # an enum's identifier ("1024")
    try:
        converted = opt.convert(value)
    except ValueError as exc:
        text = str(exc).replace(opt.flag, label, 1)
        extra = ""
        if panel and panel.unset not in (None, ""):  # what the "not given" value means
            unset = f"{panel.unset:g}" if isinstance(panel.unset, float) else panel.unset
            extra = f", or {unset} for {'off' if panel.off else 'the default'}"
        raise ValueError(f"{text}{extra}.") from None
    if opt.kind == "int" and isinstance(value, float):
        raise ValueError(f"{label} {value!r} is not a whole number.")
    return converted


def runner_words(opt, value, backend: str | None, engine: str | None = None) -> list[str]:
    """The runner's command-line words for the add-on value ``value`` of ``opt`` in a
    ``backend`` job (None: ``runner export``, which has none: the command's own options
    apply) exporting with ``engine`` (None: any) ([] when it is not passed: another backend's
    or engine's option, "not given", or at the runner's default)."""
    panel = opt.panel
    if backend is not None and not opt.applies_to(backend, engine):
        return []
    if panel is not None and is_unset(panel, value):
        return [opt.flag, panel.off] if panel.off else []
    if panel is not None and panel.switch is not None:
        value = panel.switch[0] if value else panel.switch[1]
    if opt.kind == "switch":
        return [opt.flag] if value else []
    if value is None or (not (panel and panel.always) and _same(value, opt.default)):
        return []
    if opt.kind == "path":
        value = os.path.abspath(os.path.expanduser(str(value).strip()))
    text = (panel.format if panel is not None else "{}").format(value)
    return [opt.flag, text]


def is_unset(panel, value) -> bool:
    """Whether the add-on value ``value`` means "not given" (``panel.unset``; a bool only
    matches a bool, so 0 faces is not a checkbox's False)."""
    return panel.unset is not None and value == panel.unset and \
        isinstance(value, bool) == isinstance(panel.unset, bool)


def _same(value, default) -> bool:
    return value == default or (default is not None and str(value) == str(default))


def job_engine(values: Mapping[str, Any], command: str = "run") -> str | None:
    """The export engine of a job: the ``export_engine`` of ``values`` (its add-on default
    when missing); None for ``runner export``, whose options are its own (the command's)."""
    if command == "export":
        return None
    return str(values.get("export_engine", options.addon_default(options.get("export_engine"))))


def job_argv(values: Mapping[str, Any], backend: str | None, command: str = "run") -> list[str]:
    """The runner options for the add-on ``values`` (name → add-on value; missing names take
    the add-on's default) of a ``backend`` job (None for ``export``) of the runner's
    ``command`` (``run`` / ``batch`` / ``export``, :data:`options.COMMANDS`), in table order:
    only the options ``command`` takes (the table's ``commands``), of ``backend`` and of the
    job's export engine
    (:func:`job_engine`; the table's ``engines``) — a port lever left set in the panel is not
    passed to a bounded export, which would refuse it."""
    engine = job_engine(values, command)
    out: list[str] = []
    for opt in options.addon_options(command=command):
        value = values.get(opt.name, options.addon_default(opt))
        needs = opt.panel.requires
        if needs is not None:
            need = options.get(needs)
            if not runner_words(need, values.get(needs, options.addon_default(need)), backend,
                                engine):
                continue
        out += runner_words(opt, value, backend, engine)
    return out


def property_spec(opt) -> tuple[str, dict]:
    """The Blender property of ``opt`` as ``(bpy.props function name, keyword arguments)``:
    ``EnumProperty`` with items, ``IntProperty``/``FloatProperty`` with min/max,
    ``BoolProperty``, ``StringProperty`` (``DIR_PATH`` for a path, or the panel's ``subtype``, e.g.
    ``FILE_PATH``); name, default and
    description from the table. Pure: the add-on calls ``getattr(bpy.props, name)(**kw)``."""
    panel = opt.panel
    kw: dict = {"name": panel.label, "description": _description(opt)}
    default = options.addon_default(opt)
    if panel.switch is not None or opt.kind == "switch":
        return "BoolProperty", {**kw, "default": bool(default)}
    if panel.items or opt.kind == "choice":
        items = panel.items or tuple((c, str(c), "") for c in opt.choices)
        kw["items"] = [(str(v), label, desc or opt.advice.get(str(v)) or opt.help)
                       for v, label, desc in items]
        return "EnumProperty", {**kw, "default": str(default)}
    if opt.kind in ("int", "float"):
        low = opt.low
        if panel.unset is not None and (low is None or panel.unset < low):
            low = panel.unset
        if low is not None:
            kw["min"] = low
        if opt.high is not None:
            kw["max"] = opt.high
        if panel.subtype:
            kw["subtype"] = panel.subtype
        cast = int if opt.kind == "int" else float
        return ("IntProperty" if opt.kind == "int" else "FloatProperty"), \
            {**kw, "default": cast(default)}
    if opt.kind == "path":
        kw["subtype"] = panel.subtype or "DIR_PATH"
    return "StringProperty", {**kw, "default": str(default or "")}


def _description(opt) -> str:
    """One line for the tooltip: the help, the unset meaning and the backends."""
    text = opt.help[:1].upper() + opt.help[1:]
    panel = opt.panel
    if panel is not None and panel.unset not in (None, "") and panel.off is None and \
            panel.switch is None and not panel.items:
        text += f" ({panel.unset}: not given)"
    elif panel is not None and panel.off is not None:
        text += f" ({panel.unset}: off)"
    if opt.backends and opt.group != "job":
        text += f". {' / '.join(opt.backends)} only"
    return text


def addon_argument_type(opt):
    """An argparse ``type`` for ``headless.py``: text → the add-on value (a checkbox option
    takes its two words, e.g. ``on``/``off``). Raises ``argparse.ArgumentTypeError``."""
    import argparse

    def convert(text):
        panel = opt.panel
        try:
            if panel is not None and panel.switch is not None:
                if text not in panel.switch:
                    raise ValueError(f"{text!r} is not one of {', '.join(panel.switch)}")
                return text == panel.switch[0]
            value = addon_value(opt, text if opt.kind not in ("int", "float")
                                else opt._number(text))
            return value
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = opt.flag
    return convert


def add_addon_arguments(parser) -> None:
    """Every add-on option on ``parser`` (argparse) as ``--name-with-dashes``, with the
    add-on's default and its value type (``headless.py``); the runner options follow from
    :func:`job_argv`."""
    for opt in options.addon_options():
        flag = "--" + opt.name.replace("_", "-")
        default = options.addon_default(opt)
        help_text = opt.help
        if not (default is None or default is False or default == ""):
            shown = f"{default:g}" if isinstance(default, float) else default
            if opt.panel.switch is not None:
                shown = opt.panel.switch[0] if default else opt.panel.switch[1]
            help_text += f" (default: {shown})"
        if opt.panel.unset not in (None, "") and opt.panel.switch is None \
                and not opt.panel.items:
            unset = f"{opt.panel.unset:g}" if isinstance(opt.panel.unset, float) \
                else opt.panel.unset
            help_text += f"; {unset}: {'off' if opt.panel.off else 'not given'}"
        if opt.backends and opt.group != "job":
            help_text += f"; {' / '.join(opt.backends)} only"
        help_text = help_text.replace("%", "%%")
        if opt.kind == "switch":
            parser.add_argument(flag, dest=opt.name, action="store_true", help=help_text)
            continue
        choices = None
        if opt.panel.switch is not None:
            choices, metavar = None, "|".join(opt.panel.switch)
        elif opt.kind == "choice":
            choices = [str(v) for v in opt.choices]
            metavar = "|".join(choices)
        else:
            metavar = opt.metavar
        parser.add_argument(flag, dest=opt.name, default=default, metavar=metavar,
                            choices=choices, type=addon_argument_type(opt), help=help_text)
