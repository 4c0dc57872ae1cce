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
    job options at the top level, backends' own options in a "backend options" group (value
    as given, default None = not given, so another backend's option can be told apart and
    refused; defaults are applied by the backend registry) — for ``export``, which has no
    backend, an "export levers" group. Each help line is ``command``'s (``help_text``). Guard
    options are left to ``stageload.guard.add_guard_arguments``."""
    if command not in options.COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    group = None
    for opt in options.table():
        if command not in opt.commands or opt.group == "guard":
            continue
        if opt.group == "job":
            kwargs = {"type": _argparse_type(opt)} if opt.kind not in ("choice", "text") else {}
            parser.add_argument(opt.flag, dest=opt.dest, default=opt.default,
                                choices=opt.choices or None, metavar=opt.metavar,
                                help=opt.help_text(command), **kwargs)
            continue
        if group is None:
            group = parser.add_argument_group("export levers" if command == "export"
                                              else "backend options")
        if opt.switch:
            group.add_argument(opt.flag, dest=opt.dest, default=None, action="store_const",
                               const=True, help=opt.help_text(command))
        else:
            group.add_argument(opt.flag, dest=opt.dest, default=None,
                               choices=[str(c) for c in opt.choices] or None,
                               metavar=opt.metavar, help=opt.help_text(command))
