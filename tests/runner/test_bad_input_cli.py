"""Each bad input and output of SPEC §3 through the real command: its own error kind, a message
and a hint, the documented exit code, `hello` then `error` and nothing else on stdout (no
traceback), an existing output left byte for byte as it was, no trace written."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager

import pytest

from meshfacts.errors import KINDS

SENTINEL = b"not touched by the runner\n"


def check_refused(fin, kind: str, *, output=None) -> dict:
    assert fin.kinds() == ["hello", "error"], (fin.kinds(), fin.stderr[-2000:])
    err = fin.last()
    assert err["kind"] == kind, err
    assert fin.returncode == KINDS[kind].exit_code == err["exit_code"]
    assert err["message"] and err["hint"] and err["hint"] != err["message"]
    assert "Traceback" not in fin.stdout and "Traceback" not in fin.stderr
    if output is not None:
        assert output.read_bytes() == SENTINEL
        assert not output.with_suffix(".trace.jsonl").exists()
        assert not list(output.parent.glob(".*partial*"))
    return err


@pytest.mark.parametrize("name, kind", [
    ("zero", "input_empty"), ("text", "not_an_image"), ("truncated", "image_truncated"),
    ("bomb", "image_too_large"), ("tiny", "image_too_small"),
    ("transparent", "image_transparent"),
])
def test_bad_image(rt, samples, sentinel_output, name, kind):
    fin = rt.run([samples[name], "-o", sentinel_output, "--overwrite"])
    err = check_refused(fin, kind, output=sentinel_output)
    assert samples[name].name in err["message"]


def test_missing_file(rt, tmp_path, sentinel_output):
    fin = rt.run([tmp_path / "no such ö.png", "-o", sentinel_output, "--overwrite"])
    check_refused(fin, "input_missing", output=sentinel_output)


def test_output_exists(rt, samples, sentinel_output):
    fin = rt.run([samples["unicode"], "-o", sentinel_output])
    err = check_refused(fin, "output_exists", output=sentinel_output)
    assert "--overwrite" in err["hint"]


def test_output_not_glb(rt, samples, tmp_path):
    fin = rt.run([samples["unicode"], "-o", tmp_path / "mesh.obj"])
    check_refused(fin, "output_invalid")
    assert not (tmp_path / "mesh.obj").exists()


def test_usage_error_is_an_event(rt, samples):
    fin = rt.run([samples["unicode"], "--no-such-option"])
    check_refused(fin, "usage")


def test_guard_log_in_a_missing_folder_is_refused_before_anything_is_written(rt, samples,
                                                                              sentinel_output,
                                                                              tmp_path):
    """The guard opens its --log only once the job starts; a folder that does not exist is a
    usage error up front, so no trace file is left behind by a run that never started."""
    log = tmp_path / "no such folder" / "guard.log"
    fin = rt.run([samples["unicode"], "-o", sentinel_output, "--overwrite", "--log", log])
    err = check_refused(fin, "usage", output=sentinel_output)
    assert str(log.parent) in err["message"] and not log.parent.exists()


def test_version_is_printed(rt):
    from runner.job.run import RUNNER_VERSION

    done = subprocess.run([rt.PY, "-m", "runner", "--version"], capture_output=True, text=True,
                          env=rt.env(), cwd=rt.REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"python -m runner {RUNNER_VERSION}"


@contextmanager
def read_only_folder(rt, tmp_path):
    """A folder nobody can write to: a read-only tmpfs when we are root (root ignores mode
    bits), mode 0o500 otherwise."""
    folder = tmp_path / "read only"
    folder.mkdir()
    if os.geteuid() == 0:
        with rt.mounted_tmpfs(folder, "ro,size=1m"):
            yield folder
        return
    folder.chmod(0o500)
    try:
        yield folder
    finally:
        folder.chmod(0o700)


def test_unwritable_output_folder(rt, samples, tmp_path):
    with read_only_folder(rt, tmp_path) as folder:
        fin = rt.run([samples["unicode"], "-o", folder / "goblin.glb"])
        err = check_refused(fin, "output_unwritable")
        assert str(folder) in err["message"]
        assert os.listdir(folder) == []
