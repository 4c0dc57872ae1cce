"""System limits said as such: real resource limits set with ``prlimit`` on
real runs. Open files (RLIMIT_NOFILE, which binds root too) → ``resource_limit`` naming it,
whether the supervisor or the worker's start hits it (the address-space limit:
tests/pixal3d/test_memory_limit.py). The
process/thread limit (RLIMIT_NPROC) does not bind root, who runs these tests here, so that case
is checked on the exception Python's ``threading`` raises, with the limit really set."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

PRLIMIT = shutil.which("prlimit")
needs_prlimit = pytest.mark.skipif(PRLIMIT is None, reason="util-linux prlimit not installed")


def _run(limit, args, cwd, env=None, timeout=300):
    proc = subprocess.run([PRLIMIT, limit, sys.executable, "-m", "runner", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@needs_prlimit
@pytest.mark.parametrize("files", [6, 10])
def test_too_few_open_files_is_resource_limit(character, tmp_path, files, repo_root):
    """6: the supervisor itself runs out (it was an internal traceback); 10: starting the
    worker does (it was no_torch, 'check the interpreter path')."""
    proc, events = _run(f"--nofile={files}", [character, "-o", tmp_path / "a.glb"], repo_root)
    err = events[-1]
    assert err["kind"] == "resource_limit" and proc.returncode == 48, (err, proc.stderr[-2000:])
    assert f"(RLIMIT_NOFILE, `ulimit -n`) of {files}" in err["message"], err["message"]
    assert err["details"]["limit"] == "RLIMIT_NOFILE" and "ulimit -n" in err["hint"]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


@needs_prlimit
def test_thread_start_failure_names_the_process_limit(repo_root):
    code = ("import json\n"
            "from runner.job.limits import resource_error\n"
            "err = resource_error([RuntimeError(\"can't start new thread\")], 'The worker')\n"
            "print(json.dumps(err.fields()))\n")
    proc = subprocess.run([PRLIMIT, "--nproc=4000", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60, cwd=repo_root)
    fields = json.loads(proc.stdout)
    assert fields["kind"] == "resource_limit" and fields["exit_code"] == 48
    assert "(RLIMIT_NPROC, `ulimit -u`) of 4000" in fields["message"], fields
