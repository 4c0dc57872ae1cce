"""``python -m bench.pixal3d.decode_memory --extraction`` end to end at a tiny size (each case
in its own process, as at full size): the inputs are a closed surface (every quad whole, two
faces an intersected edge), both paths give the same bytes, lean's ``working_memory`` event is
the measured call's, and a second run refuses to overwrite the results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.pixal3d import extraction_memory

REPO = Path(__file__).resolve().parents[2]


def test_surface_inputs_make_a_closed_surface():
    coords, dual, flags, split = extraction_memory.surfaces(3000, "surface")
    assert 2700 < len(coords) < 3300 and not coords.dtype.is_floating_point
    assert 0.9 < flags.sum().item() / len(coords) < 1.1


def test_extraction_cases_in_their_own_processes(tmp_path):
    cmd = [sys.executable, "-m", "bench.pixal3d.decode_memory", "--extraction", "3000",
           "--flags", "surface", "--out-dir", str(tmp_path), "--name", "x"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "x.json").read_text())["rows"]
    assert row["same_output"] and row["faces"] == 2 * row["intersected_edges"]
    assert row["port_bytes"] > 0 and row["lean_bytes"] > 0
    (event,) = row["lean_events"]
    assert event["tool"] == "extraction_ranges" and event["chunk"] == 43_648
    assert (tmp_path / "x.md").read_text().startswith("| flags |")
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode != 0 and "exists: pass another --name" in again.stderr
