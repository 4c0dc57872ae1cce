"""The runner subprocess: spawn ``python -m runner``, read its events on a thread, cancel it.

No bpy here and no Blender data is touched: the reader thread only parses stdout lines and puts
them on a :class:`queue.Queue`; Blender's main thread drains the queue (a ``bpy.app.timers``
callback in the UI, a blocking loop in headless mode).

Cancel follows ``runner/PROTOCOL.md``: SIGTERM to the runner (the supervisor) and its stdin pipe
closed; the supervisor stops the worker's process group. If the supervisor itself has not exited
after a grace period it gets SIGKILL. The runner is started in a new session so that a Ctrl-C in
the terminal that launched Blender does not reach it behind the add-on's back; because its stdin
is a pipe held only by Blender, Blender dying for any reason closes the pipe and the runner stops.
"""
from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

from . import events as _events

# Item kinds put on the queue: ("event", dict), ("bad_line", str), ("eof", None).
EVENT, BAD_LINE, EOF = "event", "bad_line", "eof"
READ_CHUNK = 1 << 16  # bytes per read of the runner's stdout


STDERR_LINE = 1 << 16  # bytes: longer stderr lines are left out of the tail


def iter_lines(fd: int, max_line: int):
    """Lines (bytes, without the newline) read from file descriptor ``fd`` in chunks of
    :data:`READ_CHUNK` bytes until EOF; a line longer than ``max_line`` bytes is yielded once
    as None and its bytes are skipped (the buffer never holds more than ``max_line`` plus one
    chunk). Raises ``OSError`` when the descriptor fails."""
    buf, skipping = b"", False
    while True:
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            if skipping:  # the tail of an over-long line, already reported
                skipping = False
            else:
                yield raw
        if len(buf) > max_line:
            if not skipping:
                yield None
            buf, skipping = b"", True
    if buf and not skipping:
        yield buf


class SpawnError(RuntimeError):
    """The runner could not be started; the message says why and what to do."""


class RunnerProcess:
    """One ``python -m runner …`` subprocess and the thread that reads its stdout.

    ``argv``: the full command (interpreter first); ``env``: the complete environment;
    ``cwd``: its working folder. Nothing runs until :meth:`start`.
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | os.PathLike):
        self.argv = [str(a) for a in argv]
        self.env = env
        self.cwd = str(cwd)
        self.proc: subprocess.Popen | None = None
        self.events: queue.Queue = queue.Queue()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._threads: list[threading.Thread] = []
        self._cancel_requested = False

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Spawn the runner. Raises :class:`SpawnError` when the interpreter cannot be run."""
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=self.cwd, env=self.env, start_new_session=(os.name == "posix"),
                bufsize=0)
        except OSError as exc:
            raise SpawnError(f"Could not start the runner with {self.argv[0]}: "
                             f"{exc.strerror or exc}") from exc
        for target, name in ((self._read_stdout, "stdout"), (self._read_stderr, "stderr")):
            t = threading.Thread(target=target, name=f"image-to-mesh-runner-{name}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    @property
    def pid(self) -> int | None:
        """The runner (supervisor) process id, None before :meth:`start`."""
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        """The runner's exit code, or None while it runs (or was never started)."""
        return self.proc.poll() if self.proc else None

    @property
    def alive(self) -> bool:
        """True while the runner process exists and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def cancel_requested(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._cancel_requested

    def stderr_tail(self) -> str:
        """The last (up to 40) lines the runner wrote to stderr, joined with newlines."""
        return "\n".join(self._stderr_tail)

    # ------------------------------------------------------------------ reading
    def _read_stdout(self) -> None:
        """The reader thread: stdout in chunks (:func:`iter_lines`, not a system call per
        byte), each line parsed and checked (``events.parse_line``). It never dies on what the
        runner prints — a line too long, not JSON, nested too deeply — so stdout is always
        drained and the runner never blocks on a full pipe; EOF is queued last, always."""
        assert self.proc and self.proc.stdout
        try:
            for raw in iter_lines(self.proc.stdout.fileno(), _events.MAX_LINE):
                if raw is None:
                    self.events.put((BAD_LINE, f"runner printed a line longer than "
                                               f"{_events.MAX_LINE} bytes; skipped"))
                else:
                    self._put_line(raw)
        except (OSError, ValueError):
            pass  # pipe closed under us during cancel
        except Exception as exc:  # never let the reader die silently: say so, keep EOF
            self.events.put((BAD_LINE, f"the add-on's reader failed: {exc!r}"))
        finally:
            self.events.put((EOF, None))

    def _put_line(self, raw: bytes) -> None:
        try:
            ev = _events.parse_line(raw)
        except _events.EventError as exc:
            self.events.put((BAD_LINE, str(exc)))
            return
        if ev is not None:
            self.events.put((EVENT, ev))

    def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        try:
            for raw in iter_lines(self.proc.stderr.fileno(), STDERR_LINE):
                if raw is not None:
                    self._stderr_tail.append(raw.decode("utf-8", errors="replace").rstrip())
        except (OSError, ValueError):
            pass

    def drain(self) -> list[tuple[str, object]]:
        """Every queued item, without blocking (for the main-thread timer)."""
        items = []
        while True:
            try:
                items.append(self.events.get_nowait())
            except queue.Empty:
                return items

    def iter_blocking(self, poll_seconds: float = 0.25):
        """Yield queue items until EOF, blocking (for headless mode, where timers never fire).

        The EOF item itself is yielded last; after it the process is waited for."""
        while True:
            try:
                item = self.events.get(timeout=poll_seconds)
            except queue.Empty:
                continue
            yield item
            if item[0] == EOF:
                self.wait(timeout=30)
                self.close()
                return

    def close(self, timeout: float = 2.0) -> bool:
        """Close the runner's pipes explicitly once it has exited (not left to the garbage
        collector): waits up to ``timeout`` seconds for the reader threads to reach EOF, then
        closes stdin, stdout and stderr. A pipe whose reader is still blocked (a leftover
        process holding it open) is left open rather than closed under the reader. Returns
        True when every pipe was closed."""
        proc = self.proc
        if proc is None:
            return True
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        readers_done = not any(t.is_alive() for t in self._threads)
        closed = True
        for f, reader in ((proc.stdin, False), (proc.stdout, True), (proc.stderr, True)):
            if f is None or f.closed:
                continue
            if reader and not readers_done:
                closed = False
                continue
            try:
                f.close()
            except OSError:
                pass
        return closed

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds for the runner to exit; its code or None if it runs."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    # ------------------------------------------------------------------ cancel
    def cancel(self, grace: float = 5.0, block: bool = False) -> None:
        """Stop the runner: SIGTERM and stdin closed now, SIGKILL after ``grace`` seconds.

        ``block=False`` (the UI) escalates on a daemon thread so Blender never freezes;
        ``block=True`` (unregister, quit, headless) returns only once the runner has exited.
        """
        self._cancel_requested = True
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
        except (ProcessLookupError, OSError):
            pass
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        if block:
            self._escalate(grace)
        else:
            threading.Thread(target=self._escalate, args=(grace,), daemon=True,
                             name="image-to-mesh-runner-cancel").start()

    def _escalate(self, grace: float) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass
        try:
            # The runner runs in its own session, so its pid is its process group id.
            if os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def runner_env(runtime_dir: Path, extra_path=(), base: dict[str, str] | None = None
               ) -> dict[str, str]:
    """The runner's environment: ``base`` (default ``os.environ``) with ``PYTHONPATH`` set to
    ``runtime_dir`` then the folders of ``extra_path`` (e.g. the extension's wheels) — never
    the inherited ``PYTHONPATH``: Blender's (or the shell's) would put stale packages in front
    of the runner's — unbuffered output (each event reaches the add-on as it is printed), no
    user site-packages and no ``__pycache__`` written into the runtime folder."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(runtime_dir), *map(str, extra_path)])
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONNOUSERSITE"] = "1"
    # The runtime folder is inside the installed extension, which must not be written to.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Blender exports PYTHONHOME-like settings for its own interpreter on some platforms; they
    # would break a different Python.
    for key in ("PYTHONHOME", "PYTHONSTARTUP"):
        env.pop(key, None)
    return env


def run_quick(argv: list[str], env: dict[str, str], cwd: str | os.PathLike,
              timeout: float = 120.0) -> tuple[int | None, str, str]:
    """Run a short command (``runner check``, ``stageload plot``) to completion.

    Returns (exit code or None on timeout, stdout, stderr). On timeout the command's process
    group is killed. Raises :class:`SpawnError` when it cannot be started.
    """
    try:
        proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(cwd),
                                env=env, start_new_session=(os.name == "posix"))
    except OSError as exc:
        raise SpawnError(f"Could not start {argv[0]}: {exc.strerror or exc}") from exc
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL) if os.name == "posix" else proc.kill()
        except OSError:
            pass
        out, err = proc.communicate()
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
