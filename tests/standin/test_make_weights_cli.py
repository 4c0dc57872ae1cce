"""``python standin/port/make_weights.py DIR``: a folder with spaces and non-ASCII letters is
printed as it is, in shell lines that, pasted into a shell, point at the weights written (the
lines a user copies; JSON escapes turned ``nü`` into ``n\\u00fc``, which pointed nowhere)."""
from __future__ import annotations

import json
import subprocess
import sys

from standin import PORT_DIR

SCRIPT = PORT_DIR / "make_weights.py"


def test_the_printed_shell_lines_point_at_the_weights(tmp_path):
    root = tmp_path / "my nü weights"
    out = subprocess.run([sys.executable, str(SCRIPT), str(root), "--scale", "1e-6"],
                         capture_output=True, text=True, encoding="utf-8", check=True).stdout
    assert "nü" in out and "\\u00fc" not in out
    exports = "".join(line + "\n" for line in out.splitlines() if line.startswith("export "))
    shown = subprocess.run(["sh", "-c", exports + 'printf "%s\\n%s" "$HF_HOME" "$TORCH_HOME"'],
                           capture_output=True, text=True, encoding="utf-8", check=True).stdout
    hf_home, torch_home = shown.split("\n")
    assert hf_home == str(root / "hf") and torch_home == str(root / "torch")
    assert (root / "hf" / "hub" / "models--TencentARC--Pixal3D").is_dir()
    assert "--pixal3d-dir" in out and str(PORT_DIR) in out
    assert "python -m runner check --backend pixal3d --deep --pixal3d-dir" in out


def test_json_for_programs_keeps_the_paths_as_they_are(tmp_path):
    root = tmp_path / "nü"
    out = subprocess.run([sys.executable, str(SCRIPT), str(root), "--scale", "1e-6", "--json"],
                         capture_output=True, text=True, encoding="utf-8", check=True).stdout
    assert "\\u00fc" not in out
    assert json.loads(out)["env"]["HF_HOME"] == str(root / "hf")
