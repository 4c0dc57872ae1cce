"""A watcher that stops the command's process group when its guard dies, however it dies.

Without it, ``python -m stageload guard`` SIGKILLed while its command ran would leave the
command running with no memory watch. The guard cannot catch SIGKILL, so something else must notice:
a pipe whose write end only the guard holds (``os.pipe`` descriptors are not inherited, and the
command is started before the watcher) and a small watcher process, in a session of its own,
blocked reading the other end. The kernel closes the write end when the guard dies; the read
returns end-of-file, and the watcher sends SIGTERM to the command's process group, then SIGKILL
after ``grace`` seconds to whatever is left. When the guard finishes normally it writes
``done`` first (:meth:`DeathWatch.release`) and the watcher exits without touching anything.

Why not ``PR_SET_PDEATHSIG``: Linux only, it fires when the *thread* that forked the child
ends (not the process), and it reaches only the direct child, not its group. Pipes and
``killpg`` are plain POSIX, so this is the same code on macOS (where the alternative would be a
kqueue ``EVFILT_PROC``/``NOTE_EXIT`` watcher); only Linux was run here.

The watcher checks before signalling that the group still exists and is still a session led by
the same number (the command is started with ``start_new_session``, so its pgid is its sid):
a number reused by an unrelated group since is left alone. Costs one small Python process per
guarded command (a few MB, outside the command's tree, so not in its footprint).
"""
from __future__ import annotations

import os
import subprocess
import sys

#: The watcher, run as ``python -c WATCHER FD PGID GRACE`` (standard library only).
WATCHER = r"""
import os, signal, sys, time
fd, pgid, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)  # only the guard's end of the pipe decides
try:
    said = os.read(fd, 16)
except OSError:
    said = b""
if said.startswith(b"done"):
    sys.exit(0)

def alive():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # not ours (any more)
    try:
        return os.getsid(pgid) == pgid
    except OSError:
        return True  # the leader is gone but its group is not: still the command's
if not alive():
    sys.exit(0)
try:
    os.killpg(pgid, signal.SIGTERM)
except OSError:
    sys.exit(0)
end = time.monotonic() + grace
while time.monotonic() < end:
    try:
        os.killpg(pgid, 0)
    except OSError:
        sys.exit(0)
    time.sleep(0.05)
try:
    os.killpg(pgid, signal.SIGKILL)
except OSError:
    pass
"""


class DeathWatch:
    """The watcher of one command's process group ``pgid`` (see the module docstring).
    ``start()`` launches it (raises ``OSError`` when it cannot be started); ``release()`` tells
    it the guard is done (idempotent); ``pid`` is the watcher's."""

    def __init__(self, pgid: int, grace: float = 1.0, python: str | None = None):
        self.pgid, self.grace = int(pgid), float(grace)
        self.python = python or sys.executable
        self._write: int | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> "DeathWatch":
        read, write = os.pipe()  # both non-inheritable: the command never holds either end
        try:
            self.proc = subprocess.Popen(
                [self.python, "-c", WATCHER, str(read), str(self.pgid), str(self.grace)],
                pass_fds=(read,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._write = write
        return self

    def release(self) -> None:
        """The guard ends normally: the watcher exits without signalling anything."""
        if self._write is None:
            return
        try:
            os.write(self._write, b"done")
        except OSError:
            pass
        os.close(self._write)
        self._write = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
