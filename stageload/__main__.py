"""``python -m stageload summary|plot|guard …`` — dispatch to each command's own module.

Each sub-command lives in its own module and is imported only when asked for, so
``python -m stageload guard`` never imports torch.

Exit status: the sub-command's own (docs/meter.md, docs/guard.md); 2 for an unknown command;
141 (128 + SIGPIPE), without a message, when stdout was closed by its reader (``… | head``).
"""
import sys

COMMANDS = {
    "summary": ("stageload.summary",
                "summary of a JSONL trace: peaks, swap, time and loads per stage"),
    "plot": ("stageload.plot",
             "chart of footprint over time with stage bands, several runs overlaid"),
    "guard": ("stageload.guard.cli",
              "run one command only when there is memory, stop it before swap runs away"),
}


def _command(name: str):
    """The ``main`` of sub-command ``name`` (its module, :data:`COMMANDS`), imported now and
    only that one (``plot`` imports matplotlib, ``guard`` must start fast)."""
    if name == "summary":
        from stageload.summary import main
    elif name == "plot":
        from stageload.plot import main
    else:
        from stageload.guard.cli import main
    return main


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        lines = ["usage: python -m stageload {summary,plot,guard} ...", ""]
        lines += [f"  {name:8s} {text}" for name, (_, text) in COMMANDS.items()]
        print("\n".join(lines),
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        return _command(argv[0])(argv[1:])
    except BrokenPipeError:  # a print the command did not guard itself: exit as quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
