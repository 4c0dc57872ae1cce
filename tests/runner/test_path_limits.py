"""Output and trace paths the system cannot create: a name over the file
system's NAME_MAX, a path over PATH_MAX — counting the hidden partial GLB and job folder the
runner makes for an output — are ``output_invalid`` (exit 23) before any work, said why, never
an ``internal`` traceback. Real folders nested to ~3,900 and ~4,000 characters."""
from __future__ import annotations

import os


def _deep(root, length):
    """A real folder whose absolute path is ``length`` characters long (components of ≤ 200)."""
    path = str(root)
    while len(path) < length:
        path = os.path.join(path, "d" * min(200, length - len(path) - 1))
    os.makedirs(path)
    assert len(path) == length
    return path


def test_a_long_name_in_a_long_folder_is_output_invalid(rt, character, tmp_path):
    folder = _deep(tmp_path, 3900)
    fin = rt.run([character, "-o", os.path.join(folder, "n" * 240 + ".glb")])
    err = fin.last()
    assert err["kind"] == "output_invalid" and fin.returncode == 23, (err, fin.stderr[-2000:])
    assert "too long for the system" in err["message"] and "PATH_MAX" in err["message"]
    assert "Traceback" not in fin.stderr and fin.kinds() == ["hello", "error"]


def test_a_name_whose_partial_file_would_be_too_long(rt, character, tmp_path):
    fin = rt.run([character, "-o", tmp_path / ("n" * 240 + ".glb")])
    err = fin.last()
    assert err["kind"] == "output_invalid" and fin.returncode == 23, (err, fin.stderr[-2000:])
    assert "hidden partial file" in err["message"] and "229 bytes or fewer" in err["message"]
    assert "Traceback" not in fin.stderr and os.listdir(tmp_path) == ["character.png"]


def test_a_trace_name_over_name_max(rt, character, tmp_path):
    fin = rt.run([character, "-o", tmp_path / "a.glb",
                  "--trace", tmp_path / ("t" * 300 + ".jsonl")])
    err = fin.last()
    assert err["kind"] == "output_invalid" and "at most 255" in err["message"], err
    assert "Traceback" not in fin.stderr


def test_a_long_folder_within_the_limits_still_works(rt, character, tmp_path):
    folder = _deep(tmp_path, 4000)
    fin = rt.run([character, "-o", os.path.join(folder, "a.glb"),
                  "--trace", tmp_path / "a.trace.jsonl"])
    assert fin.returncode == 0, (fin.last(), fin.stderr[-2000:])
    assert os.listdir(folder) == ["a.glb"]
