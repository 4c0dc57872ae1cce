"""Stopping a whole process tree: group members, a child that called setsid, a double-forked
daemon, a child that ignores SIGTERM — and an unrelated twin the test started stays alive."""
import os
import signal

import pytest
from guard_helpers import alive, procs, wait_for_file

from stageload.guard import Guard, GuardConfig, ProcessTree


def test_stop_reaches_escaped_descendants_and_spares_a_twin(tmp_path, tag, env):
    twin = __import__("subprocess").Popen(procs("sleeper", tag), env=env)
    try:
        guard = Guard(GuardConfig(grace=0.5), human=None)
        pidfile = tmp_path / "pids"
        guard.start(procs("tree", pidfile, tag), env=env)
        pids = [int(line) for line in wait_for_file(pidfile).split()]
        leader, plain, stubborn, escaped, daemon = pids
        assert leader == guard.tree.pid
        # The setsid'd ones really left the command's process group.
        assert os.getpgid(escaped) != guard.tree.pgid and os.getpgid(daemon) != guard.tree.pgid
        assert os.getpgid(plain) == guard.tree.pgid
        assert all(alive(p) for p in pids)

        report = guard.stop("test stop")

        assert [p for p in pids if alive(p)] == [], "a process of the command survived"
        assert report.survivors == []
        assert stubborn in report.killed, "the SIGTERM-ignoring child must need SIGKILL"
        assert set(pids) <= set(report.terminated)
        assert report.seconds >= 0.5  # it waited the grace period for the stubborn one
        assert alive(twin.pid), "the guard signalled a process it did not start"
        assert twin.pid not in report.terminated + report.killed
        stopped = [d for d in guard.decisions if d["state"] == "stopped"]
        assert stopped and stopped[0]["reason"] == "test stop"
        assert guard.tree.popen.returncode == -signal.SIGTERM
    finally:
        twin.kill()
        twin.wait()


def test_popen_options_that_defeat_the_group_are_refused():
    with pytest.raises(ValueError, match="process group"):
        ProcessTree(["true"], start_new_session=False)
    with pytest.raises(ValueError, match="own session"):
        ProcessTree(["true"], preexec_fn=lambda: None)


def test_command_in_own_session_and_group(env):
    tree = ProcessTree(["sleep", "5"], env=env)
    try:
        assert os.getpgid(tree.pid) == tree.pid != os.getpgid(0)
        assert os.getsid(tree.pid) == tree.pid
    finally:
        tree.stop(0.5)
    assert tree.poll() == -signal.SIGTERM
