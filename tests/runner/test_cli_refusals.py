"""Refusals up front and clear messages from the command line: a batch whose backend cannot
run is refused as a whole before anything is written; a dangling symlink at the output path is
refused before the job runs; and the messages for odd paths, odd files and misplaced arguments
say what is really wrong."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HUMAN_PREFIX = "runner: "


def test_a_batch_whose_pixal3d_folder_is_missing_is_refused_up_front(rt, character, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(character, src / "one.png")
    shutil.copy(character, src / "two.png")
    out = tmp_path / "out"
    fin = rt.run(["batch", src, "-o", out, "--backend", "pixal3d",
                  "--pixal3d-dir", tmp_path / "nonexistent"])
    assert fin.returncode == 32, fin.stderr[-2000:]
    assert fin.kinds() == ["hello", "error"] and fin.last()["kind"] == "pixal3d_missing"
    assert str(tmp_path / "nonexistent") in fin.last()["message"]
    assert not out.exists()  # no folder, no manifest, no trace
    lines = [line for line in fin.stderr.splitlines() if line.startswith(HUMAN_PREFIX)]
    assert len(lines) == 1 and lines[0].startswith("runner: pixal3d_missing: "), fin.stderr


def test_a_dangling_symlink_at_the_output_is_refused_before_the_job(rt, character, tmp_path):
    link = tmp_path / "dangling.glb"
    os.symlink(tmp_path / "nonexistent_target.glb", link)
    fin = rt.run([character, "-o", link])
    assert fin.returncode == 20 and fin.last()["kind"] == "output_exists", fin.stderr[-2000:]
    assert fin.kinds() == ["hello", "error"]  # refused up front: no stage ran
    message = fin.last()["message"]
    assert "symbolic link" in message and "nonexistent_target.glb" in message
    assert "appeared while the job ran" not in message
    assert os.readlink(link) == str(tmp_path / "nonexistent_target.glb")
    assert not (tmp_path / "dangling.trace.jsonl").exists()
    assert not (tmp_path / "nonexistent_target.glb").exists()


def test_the_help_names_every_command(rt):
    proc = subprocess.run([sys.executable, "-m", "runner", "--help"], capture_output=True,
                          text=True, timeout=120, env=rt.env(), cwd=rt.REPO)
    assert proc.returncode == 0, proc.stderr
    for command in ("batch DIR -o OUTDIR", "export ASSET.npz -o OUT.glb", "check",
                    "run IMAGE -o OUT.glb"):
        assert f"python -m runner {command}" in proc.stdout, command


def test_each_commands_usage_error_points_to_its_own_help(rt, tmp_path):
    for command in ("batch", "export", "check"):
        fin = rt.run([command, "--no-such-option"])
        assert fin.returncode == 2 and fin.last()["kind"] == "usage", command
        assert fin.last()["hint"] == f"Run `python -m runner {command} --help` for the options."
        assert f"`python -m runner {command} --help`" in fin.stderr
    single = rt.run(["--no-such-option", tmp_path / "a.png", "-o", tmp_path / "a.glb"])
    assert single.last()["hint"] == "Run `python -m runner --help` for the options."


def test_negative_values_reach_their_range_check(rt, tmp_path):
    """``--wait-free -5%`` used to be argparse's "expected one argument"."""
    fin = rt.run(["--wait-free", "-5%", tmp_path / "a.png", "-o", tmp_path / "a.glb"])
    assert fin.returncode == 2, fin.stderr
    message = fin.last()["message"]
    assert "'-5%'" in message and "between 0% and 100%" in message
    assert "expected one argument" not in message
    export = rt.run(["export", tmp_path / "a.npz", "-o", tmp_path / "a.glb",
                     "--export-budget", "-1G"])
    assert export.returncode == 2 and "cannot be negative" in export.last()["message"]
    # an option name after an option is still the missing value it always was
    missing = rt.run([tmp_path / "a.png", "-o", tmp_path / "a.glb", "--trace", "--overwrite"])
    assert missing.returncode == 2 and "expected one argument" in missing.last()["message"]


def test_run_in_front_of_the_image_is_the_single_run(rt, character, tmp_path):
    fin = rt.run(["run", character, "-o", tmp_path / "a.glb"])
    assert fin.returncode == 0, fin.stderr[-2000:]
    assert fin.last()["event"] == "result" and (tmp_path / "a.glb").is_file()


def test_odd_output_paths_are_named_for_what_they_are(rt, character, tmp_path):
    cases = {
        ".glb": ("output_invalid", "has no name before .glb"),
        "": ("output_invalid", "The output path (-o) is empty"),
        str(tmp_path): ("output_invalid", f"The output {tmp_path} is a folder"),
    }
    if os.path.isdir("/proc"):  # exists, but takes no new files (ENOENT)
        cases["/proc/a.glb"] = ("output_unwritable", "/proc: that folder exists, but the system "
                                "does not let files be created in it")
    for output, (kind, words) in cases.items():
        fin = rt.run([character, "-o", output], cwd=tmp_path)
        assert fin.last()["kind"] == kind, (output, fin.last())
        assert words in fin.last()["message"], (output, fin.last()["message"])
        assert "does not end in .glb" not in fin.last()["message"]
        assert "No such file" not in fin.last()["message"]  # not what the sentence says
    assert sorted(os.listdir(tmp_path)) == ["character.png"]  # nothing written


def test_runner_export_names_its_input_an_asset_and_proc_a_folder_without_files(rt, tmp_path):
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "s.npz", subdivisions=3, resolution=32)
    same = rt.run(["export", asset, "-o", tmp_path / "e.glb", "--trace", asset])
    assert same.returncode == 2
    assert f"The trace path {asset} is the input asset;" in same.last()["message"]
    if os.path.isdir("/proc"):
        proc = rt.run(["export", asset, "-o", "/proc/x.glb"])
        assert proc.returncode == 21 and "/proc: that folder exists, but the system does not " \
            "let files be created in it" in proc.last()["message"]
        assert "No such file" not in proc.last()["message"]
    assert sorted(os.listdir(tmp_path)) == ["s.npz"]


def test_a_device_or_fifo_is_not_a_regular_file(rt, tmp_path):
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    for image, words in ((fifo, "named pipe"), (Path("/dev/zero"), "character device")):
        fin = rt.run([image, "-o", tmp_path / "a.glb"], timeout=60)
        assert fin.returncode == 10 and fin.last()["kind"] == "not_an_image", fin.stderr
        message = fin.last()["message"]
        assert "is not a regular file" in message and words in message
        assert "empty" not in message
    assert not (tmp_path / "a.glb").exists()


def test_batch_output_and_input_folders_are_named_for_what_they_are(rt, character, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(character, src / "one.png")
    a_file = tmp_path / "a_file.glb"
    a_file.write_bytes(b"mine")
    fin = rt.run(["batch", src, "-o", a_file])
    assert fin.returncode == 23 and fin.last()["kind"] == "output_invalid", fin.stderr
    assert "is a file, not a folder" in fin.last()["message"]
    assert a_file.read_bytes() == b"mine"
    empty = rt.run(["batch", src, "-o", ""], cwd=tmp_path)
    assert empty.last()["kind"] == "output_invalid"
    assert "output folder path (-o) is empty" in empty.last()["message"]
    missing = rt.run(["batch", tmp_path / "nowhere", "-o", tmp_path / "out"])
    assert missing.last()["kind"] == "input_missing"
    assert "folder" in missing.last()["hint"] and "the file must exist" not in \
        missing.last()["hint"]
    assert sorted(os.listdir(tmp_path)) == ["a_file.glb", "character.png", "in"]
