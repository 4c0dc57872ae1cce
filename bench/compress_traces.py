"""Compress the JSONL traces a benchmark left in its results folder (``*.jsonl`` → ``.jsonl.gz``).

Traces are kept as evidence beside each benchmark's numbers; compressed they take about a tenth
of the room (their keys repeat on every line), and every reader here reads them as they are
(``stageload.trace.iter_lines``: ``python -m stageload summary|plot``, the benchmarks' own
figures). A benchmark calls :func:`compress_folder` once its figures are taken; run it by hand on
an older folder::

    python -m bench.compress_traces bench/results/2026-12-04
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stageload.trace import compress_trace


def compress_folder(folder: Path) -> dict[str, str]:
    """Compress every ``*.jsonl`` under ``folder`` (recursively) in place; returns
    ``{old relative path: new relative path}`` so a caller can rewrite the names its results
    file records. A trace whose ``.gz`` already exists is left alone (never replaced)."""
    moved: dict[str, str] = {}
    for path in sorted(Path(folder).rglob("*.jsonl")):
        if path.with_name(path.name + ".gz").exists():
            continue
        new = compress_trace(path)
        moved[str(path.relative_to(folder))] = str(new.relative_to(folder))
    return moved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compress_traces",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            print(f"{folder} is not a folder", file=sys.stderr)
            return 2
        for old, new in compress_folder(folder).items():
            print(f"{folder / old} -> {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
