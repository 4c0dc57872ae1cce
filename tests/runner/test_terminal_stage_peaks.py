"""At a terminal, each stage's ``done … peak`` line gives the peak ``python -m stageload
summary`` gives that stage for the same run's trace (runner/PROTOCOL.md, ``memory``): a real
builtin run through a pipe, its events replayed into the terminal view."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from meshfacts.units import format_size
from runner.commands.console import ProgressView
from stageload.summary import summarize
from stageload.trace import iter_lines


def test_the_terminal_and_the_summary_give_each_stage_the_same_peak(tmp_path, shared_images,
                                                                    repo_root):
    image = next(p for p in shared_images if p.name == "character_1.png")
    trace = tmp_path / "run.trace.jsonl"
    proc = subprocess.run([sys.executable, "-m", "runner", str(image), "-o",
                           str(tmp_path / "run.glb"), "--trace", str(trace)],
                          capture_output=True, text=True, cwd=repo_root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    view = ProgressView(clock=lambda: 0.0)
    shown = {}
    for line in proc.stdout.splitlines():
        for text in view.lines(json.loads(line)):
            found = re.match(r"\[\d+/\d+\] (\w+) done [\d.]+ s(?:, peak (.+))?$", text)
            if found:
                shown[found.group(1)] = found.group(2)
    summary = summarize(iter_lines(trace))
    expected = {st["stage"]: format_size(st["peak"]) if st["peak"] is not None else None
                for st in summary["stages"]}
    assert shown == expected
