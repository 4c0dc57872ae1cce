"""Guards never count each other as busy (stageload/guard/peers.py): two real guards waiting with
the same --busy pattern, which both of their own command lines contain, run one after the other
instead of each waiting for the other for ever."""
import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from guard_helpers import guard_cmd

from stageload.guard.peers import Peers

JOB = ("import os, sys, time; out = sys.argv[2]; open(out + '.pid', 'w').write(str(os.getpid())); "
       "open(out + '.start', 'w').write(repr(time.time())); "
       "time.sleep(1.5); open(out + '.end', 'w').write(repr(time.time()))")


def _long_python(tmp_path):
    """This interpreter reached through a symlink in a folder about 200 characters deep, as in a
    clone whose path is longer than usual (the busy line then elides the middle of the command)."""
    folder = tmp_path.joinpath(*["a-folder-deeper-than-usual"] * 8)
    folder.mkdir(parents=True)
    link = folder / "python3"
    link.symlink_to(os.path.realpath(sys.executable))
    return str(link)


@pytest.mark.parametrize("wrapper", [[], ["timeout", "60"]], ids=["plain", "under-timeout"])
@pytest.mark.parametrize("interpreter", ["this", "long-path"])
def test_two_guards_with_the_same_busy_pattern_take_turns(env, tmp_path, tag, wrapper, interpreter):
    """Also when each guard runs under a wrapper (``timeout 60 python -m stageload guard …``),
    whose command line holds the pattern too; and whatever the length of the interpreter's path
    (the busy line is then shortened: the test checks the pid it names, not its wording)."""
    python = sys.executable if interpreter == "this" else _long_python(tmp_path)
    pattern = f"{tag}-job"
    quiet = 1.0
    logs = [tmp_path / f"{name}.jsonl" for name in "ab"]
    guards = [subprocess.Popen(
        wrapper + guard_cmd("--busy", pattern, "--quiet-for", str(quiet), "--poll", "0.1",
                  "--grace", "1", "--start-timeout", "20", "--log", str(log),
                  command=[python, "-c", JOB, pattern, str(tmp_path / name)]),
        env=env, stderr=subprocess.PIPE, text=True) for name, log in zip("ab", logs, strict=True)]
    try:
        errs = [g.communicate(timeout=40)[1] for g in guards]
    finally:
        for g in guards:
            if g.poll() is None:
                g.kill()
                g.wait()
    assert [g.returncode for g in guards] == [0, 0], errs
    runs = sorted((float((tmp_path / f"{n}.start").read_text()),
                   float((tmp_path / f"{n}.end").read_text()))
                  for n in "ab")
    (first_start, first_end), (second_start, second_end) = runs
    # never at the same time, and the second waited --quiet-for after the first one ended
    assert second_start >= first_end + quiet, runs
    # the second one waited because of the first one's *command*, never a guard's own line
    second = "a" if (tmp_path / "a.start").read_text() == repr(second_start) else "b"
    first = "b" if second == "a" else "a"
    decisions = [json.loads(line) for line in logs["ab".index(second)].read_text().splitlines()]
    busy = [b for d in decisions if d["state"] == "waiting" for b in d["readings"].get("busy", [])]
    assert busy and all(" -m stageload guard " not in b for b in busy), busy  # nor their wrappers
    # every busy line names the first job's process (``pid N: …``), never a guard or a wrapper
    first_pid = (tmp_path / f"{first}.pid").read_text()
    assert {b.split(":", 1)[0] for b in busy} == {f"pid {first_pid}"}, busy
    assert decisions[-1]["state"] == "exited" and decisions[-1]["exit_code"] == 0


def test_registry_lists_live_guards_and_drops_stale_entries(tmp_path):
    peers = Peers(tmp_path / "reg")
    peers.register()
    assert os.getpid() in peers.guard_pids()
    # a file left by a killed guard whose pid now belongs to another process (other creation time)
    (tmp_path / "reg" / f"{os.getppid()}-9").write_text("1.0")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "reg" / f"{dead.pid}-9").write_text(repr(time.time()))
    pids = peers.guard_pids()
    assert os.getppid() not in pids and dead.pid not in pids and os.getpid() in pids
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "reg").iterdir()
                  if p.name != "start.lock") == [str(os.getpid())]
    peers.unregister()
    assert peers.guard_pids() == set()


def test_start_lock_admits_one_guard_at_a_time(tmp_path):
    a, b = Peers(tmp_path / "reg"), Peers(tmp_path / "reg")
    assert a.try_lock()
    # flock locks belong to the open file description: a second one in another process is refused
    probe = subprocess.run([sys.executable, "-c",
                            "import sys; from stageload.guard.peers import Peers; "
                            "from pathlib import Path; "
                            "sys.exit(0 if Peers(Path(sys.argv[1])).try_lock() else 1)",
                            str(tmp_path / "reg")])
    assert probe.returncode == 1
    a.unlock()
    assert b.try_lock()
    b.unlock()
    assert psutil.Process().num_fds() >= 0


def test_the_runner_declares_its_own_entry_point():
    """stageload knows only its own guard command; ``python -m runner`` declares itself."""
    code = ("import sys\n"
            "from stageload.guard.peers import looks_like_guard\n"
            "argv = [sys.executable, '-m', 'runner', 'batch', 'a.png']\n"
            "before = looks_like_guard(argv)\n"
            "from runner.__main__ import main\n"
            "main(['check', '--backend', 'no-such-backend'])\n"
            "print('RESULT', before, looks_like_guard(argv))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert result == ["RESULT False True"], (done.stdout, done.stderr)


def test_register_entry_point_refuses_a_dotted_or_empty_name():
    from stageload.guard import register_entry_point

    for bad in ("", "runner.worker.run", None):
        with pytest.raises(ValueError, match="top-level module name"):
            register_entry_point(bad)


def test_guard_entry_points_are_recognised_but_their_commands_are_not(monkeypatch):
    from stageload.guard import peers
    from stageload.guard.peers import looks_like_guard, register_entry_point

    py = sys.executable
    monkeypatch.setattr(peers, "_ENTRY_POINTS", dict(peers._ENTRY_POINTS))  # undone after the test
    register_entry_point("runner")
    assert looks_like_guard([py, "-m", "stageload", "guard", "--busy", "x", "--", "sleep", "33"])
    assert looks_like_guard(["python3", "-u", "-m", "runner", "img.png", "-o", "a.glb",
                             "--busy", "runner"])
    assert looks_like_guard([py, "-m", "runner", "batch", "a.png"])
    assert not looks_like_guard([py, "-m", "runner.worker.run", "3"])  # the command a runner starts
    assert not looks_like_guard([py, "-m", "stageload", "summary", "t.jsonl"])
    assert not looks_like_guard(["sleep", "33"])
    assert not looks_like_guard(["sh", "-c", "python -m runner x"])
    assert not looks_like_guard([py, "train.py", "-m", "runner"])
