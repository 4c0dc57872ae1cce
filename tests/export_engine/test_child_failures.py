"""How a step's child process (``stoppable.call``) failing is said: a ``MemoryError`` in the
child (numpy's ``_ArrayMemoryError`` under a real ``RLIMIT_AS``) is ``out_of_memory`` naming
the step; a signal the engine did not send (a real ``SIGKILL``, what the out-of-memory killer
sends) is ``worker_killed`` naming the step and the signal; and through ``python -m runner
export`` such a kill ends with that kind, one line and no traceback."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from bounded_export.errors import StepKilled, StepOutOfMemory
from bounded_export.steps import Steps
from bounded_export.stoppable import call

TARGETS = "tests.export_engine.child_targets"


def _steps(step: str) -> Steps:
    steps = Steps()
    steps.begin(step)
    return steps


def test_a_memory_error_in_the_child_is_out_of_memory_naming_the_step(tmp_path):
    limit = 1 << 30
    with pytest.raises(StepOutOfMemory) as caught:
        call(f"{TARGETS}:allocate_under_limit", None, {"limit": limit, "nbytes": 4 * limit},
             tmp_path, _steps("cleanup"))
    err = caught.value
    assert err.kind == "out_of_memory" and err.details == {"step": "cleanup"}
    assert err.message.startswith("The export's cleanup step ran out of memory")
    assert "(MemoryError: Unable to allocate 4.00 GiB" in err.message  # numpy's _ArrayMemoryError
    assert "--export-budget" in err.hint and "another image" not in err.hint
    assert os.listdir(tmp_path) == []  # the hand-over and failure files are removed


def test_a_plain_bug_in_the_child_stays_an_unexpected_error(tmp_path):
    with pytest.raises(RuntimeError) as caught:
        call(f"{TARGETS}:fail_plainly", None, {}, tmp_path, _steps("decimate"))
    assert not isinstance(caught.value, (StepOutOfMemory, StepKilled))
    assert "ValueError: a plain bug" in str(caught.value)


def _wait_for(path, proc_or_none=None, timeout=60):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.02)
    return int(path.read_text())


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_drive_in_the_child_is_disk_full_naming_the_step(tmp_path):
    """A step's child whose write fails with ENOSPC (a real one: ``/dev/full``) is raised again
    as that OSError, which the worker says as ``disk_full`` — it was ``backend_failed`` with a
    traceback before."""
    import errno

    from runner.worker.run import _classify
    with pytest.raises(OSError) as caught:
        call(f"{TARGETS}:write_to_a_full_drive", None, {"path": "/dev/full", "nbytes": 1 << 16},
             tmp_path, _steps("decimate"))
    assert caught.value.errno == errno.ENOSPC and caught.value.filename is None
    assert "the export's decimate step" in str(caught.value)
    said = _classify(caught.value, None)
    assert said.kind == "disk_full" and said.exit_code == 22
    assert list(tmp_path.iterdir()) == []  # the call's files are gone


def test_a_sigkill_the_engine_did_not_send_names_the_step_and_the_oom_killer(tmp_path):
    pid_file = tmp_path / "child.pid"
    caught: list = []

    def run():
        try:
            call(f"{TARGETS}:sleep_then_return", None,
                 {"pid_file": str(pid_file), "seconds": 60}, tmp_path, _steps("decimate"))
        except BaseException as exc:  # noqa: B902 - handed to the test thread
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    pid = _wait_for(pid_file)
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=30)
    assert not thread.is_alive() and len(caught) == 1
    err = caught[0]
    assert isinstance(err, StepKilled) and err.kind == "worker_killed"
    assert f"The export's decimate step was killed in its child process (pid {pid}) by " \
           "SIGKILL" in err.message
    assert "possibly the system's out-of-memory killer" in err.message
    assert err.details == {"step": "decimate", "signal": "SIGKILL"}
    assert "another image" not in err.hint


def test_a_crash_signal_is_worker_crashed(tmp_path):
    pid_file = tmp_path / "child.pid"
    caught: list = []

    def run():
        try:
            call(f"{TARGETS}:sleep_then_return", None,
                 {"pid_file": str(pid_file), "seconds": 60}, tmp_path, _steps("uv_unwrap"))
        except BaseException as exc:  # noqa: B902
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    os.kill(_wait_for(pid_file), signal.SIGSEGV)
    thread.join(timeout=30)
    assert caught and isinstance(caught[0], StepKilled) and caught[0].kind == "worker_crashed"
    assert "uv_unwrap step crashed" in caught[0].message and "SIGSEGV" in caught[0].message


def test_runner_export_says_a_killed_step_child_in_one_line_without_a_traceback(tmp_path,
                                                                               repo_root):
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "mid.npz", subdivisions=7, resolution=128)
    out = tmp_path / "o" / "mid.glb"
    sup = subprocess.Popen([sys.executable, "-m", "runner", "export", str(asset), "-o", str(out),
                            "--texture-size", "512", "--decimation-target", "20000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=repo_root)
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(json.loads(x) for x in sup.stdout),
                              daemon=True)
    reader.start()
    deadline, victim = time.monotonic() + 120, None
    while victim is None:  # the first step child (cleanup's) to appear
        assert sup.poll() is None and time.monotonic() < deadline, events[-3:]
        for proc in psutil.Process(sup.pid).children(recursive=True):
            try:
                if "bounded_export.stoppable" in proc.cmdline():
                    victim = proc
            except psutil.Error:
                pass
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    stderr = sup.stderr.read()
    assert sup.wait(timeout=60) == 41
    reader.join(timeout=10)
    error = events[-1]
    assert error["event"] == "error" and error["kind"] == "worker_killed"
    assert f"(pid {victim.pid}) by SIGKILL" in error["message"]
    assert "possibly the system's out-of-memory killer" in error["message"]
    assert "Traceback" not in stderr and "another image" not in stderr
    assert "runner: worker_killed: The export's " in stderr
    assert not out.exists()


def test_runner_export_under_an_address_space_limit_is_out_of_memory_naming_it(tmp_path,
                                                                              repo_root):
    """A real ``RLIMIT_AS`` (``ulimit -v``) on the whole ``runner export``: 440 MiB lets the
    supervisor and the export process start but not the cleanup child's arrays of a
    327,680-face asset (measured: 410-449 MiB fail there, 500 MiB succeeds)."""
    import resource

    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "mid.npz", subdivisions=7, resolution=128)
    out = tmp_path / "mid.glb"
    limit = 440 << 20

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "runner", "export", str(asset), "-o", str(out),
                           "--texture-size", "512", "--decimation-target", "20000"],
                          capture_output=True, text=True, timeout=120, cwd=repo_root,
                          preexec_fn=cap)
    error = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 47 and error["kind"] == "out_of_memory", proc.stderr[-2000:]
    # the parenthesis names the Python error the failed allocation surfaced as: MemoryError,
    # or SystemError where a C extension's allocation failed without setting one
    assert "step ran out of memory under the address-space limit (RLIMIT_AS, `ulimit -v`) " \
           "of 440.0 MiB (" in error["message"]
    assert "ulimit -v unlimited" in error["hint"] and "another image" not in error["hint"]
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.parametrize("limit", [None, 1 << 40])
def test_a_system_error_is_an_allocation_failure_only_under_a_memory_limit(tmp_path, limit,
                                                                           repo_root):
    """Under an address-space limit an import whose allocation fails surfaces as the import
    machinery's ``SystemError`` (seen in the export's child); the child's failure file says
    ``memory`` then, so the runner says out of memory, not a bug. Without a limit a
    ``SystemError`` stays what it is. A real ``RLIMIT_AS`` (1 TiB: set, never reached)."""
    import resource

    code = ("import sys\nfrom pathlib import Path\n"
            "from bounded_export.stoppable import _write_failure\n"
            "exc = SystemError('<function _find_and_load> returned a result with an exception "
            "set')\n"
            "_write_failure(Path(sys.argv[1]), exc)\n")
    out = tmp_path / "step.npz"

    def cap():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          timeout=60, cwd=repo_root, preexec_fn=cap)
    assert proc.returncode == 0, proc.stderr
    said = json.loads((tmp_path / "step.failure.json").read_text())
    assert said["type"] == "SystemError" and said["memory"] is (limit is not None), said
