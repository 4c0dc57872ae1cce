"""docs/runner.md's command synopsis names every option each command's ``--help`` has: the
parsers are the ones ``python -m runner`` builds, so an option added to the options table or the
guard shows up here until the synopsis lists it too."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner.commands import batch, cli
from runner.commands import check as check_command
from runner.commands import export as export_command

REPO = Path(__file__).resolve().parents[2]


def _synopsis() -> str:
    """The ```sh block under docs/runner.md's "## Commands"."""
    text = (REPO / "docs" / "runner.md").read_text(encoding="utf-8")
    section = text.split("\n## Commands\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/runner.md's Commands section has no ```sh block"
    return block.group(1)


@pytest.mark.parametrize("build", [cli.build_parser, export_command.build_parser,
                                   batch.build_parser, check_command.build_parser],
                         ids=["run", "export", "batch", "check"])
def test_the_synopsis_names_every_option_of_the_help(build):
    synopsis = _synopsis()
    named = set(re.findall(r"(?<![\w-])--?[a-z0-9][a-z0-9-]*", synopsis))
    missing = sorted(action.option_strings[-1] for action in build()._actions
                     if action.option_strings and "--help" not in action.option_strings
                     and not named.intersection(action.option_strings))
    assert not missing, f"docs/runner.md's synopsis lacks {missing}"
