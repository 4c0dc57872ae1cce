"""The options table's view on the runner's command line: :func:`add_arguments` puts the
entries of ``meshfacts/options.py`` that a command takes on its argparse parser (``python -m
runner``, ``batch``, ``check``: ``runner/commands/cli.py``, ``runner/commands/check.py``;
``export``:
``runner/commands/export.py``). Runner-only (the add-on never builds this command line), so,
unlike ``options.py``, it is imported as part of the ``runner`` package, never by path.
"""
from __future__ import annotations

import argparse

from meshfacts import options
from meshfacts.job_options import job_fields


def _argparse_type(opt: options.Option):
    """An argparse ``type`` that reports ``convert``'s message (not a bare 'invalid value')."""
    def convert(text):
        try:
            return opt.convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = opt.flag
    return convert


def add_arguments(parser, command: str = "run") -> None:
    """The table's options that ``command`` takes (``options.COMMANDS``) on ``parser`` (argparse):
    job options at the top level, backends' own options in a "backend options" group — for
    ``export``, which has no backend, an "export levers" group. A field of the job's
    ``meshfacts.job_options.JobOptions`` is read as text, default None (not given): the job's
    options are checked and defaulted once, by ``JobOptions.parse``, which also refuses
    another backend's option given. The other options (``--backend``, ``--cluster`` …) are
    converted here. Each help line is ``command``'s (``help_text``). Guard options are left to
    ``stageload.guard.add_guard_arguments``."""
    if command not in options.COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    parsed_later = {o.dest for o in job_fields()}
    group = None
    for opt in options.table():
        if command not in opt.commands or opt.group == "guard":
            continue
        if opt.dest in parsed_later:
            target = parser
            if opt.group != "job":
                if group is None:
                    group = parser.add_argument_group("export levers" if command == "export"
                                                      else "backend options")
                target = group
            _add_raw(target, opt, command)
            continue
        kwargs = {"type": _argparse_type(opt)} if opt.kind not in ("choice", "text") else {}
        parser.add_argument(opt.flag, dest=opt.dest, default=opt.default,
                            choices=opt.choices or None, metavar=opt.metavar,
                            help=opt.help_text(command), **kwargs)


def _add_raw(target, opt: options.Option, command: str) -> None:
    """``opt`` on ``target`` as given (text, or True for a switch), default None; a choice
    shows its values as argparse would (``{lean,port}``) and is checked by ``JobOptions``."""
    if opt.switch:
        target.add_argument(opt.flag, dest=opt.dest, default=None, action="store_const",
                            const=True, help=opt.help_text(command))
        return
    metavar = opt.metavar
    if opt.choices and metavar is None:
        metavar = "{" + ",".join(map(str, opt.choices)) + "}"
    target.add_argument(opt.flag, dest=opt.dest, default=None, metavar=metavar,
                        help=opt.help_text(command))


def given(ns: argparse.Namespace) -> dict:
    """The job's options as given on the command line (``dest`` → text; None: not given), for
    ``JobOptions.parse``."""
    return {o.dest: getattr(ns, o.dest, None) for o in job_fields()}
