"""Cancel sources of the supervisor, funnelled into one ``Cancel`` flag.

- SIGTERM, SIGINT, SIGHUP delivered to the supervisor;
- stdin reaching end-of-file — only when asked for (``--cancel-on-stdin-eof``, what the Blender
  add-on passes: it keeps stdin open as a pipe and closes it to cancel) and stdin is a pipe
  (FIFO) or a socket. Otherwise stdin is never read, so the runner inside a shell
  ``while read`` loop does not eat the loop's input;
- the parent process dying: the parent pid is polled every 0.2 s (a change means we were
  re-parented). ``PR_SET_PDEATHSIG`` is deliberately *not* used for the supervisor: on Linux it
  fires when the parent *thread* that spawned us exits, and an add-on may spawn from a thread
  that ends long before Blender does;
- the protocol stream breaking (the reader closed stdout): the supervisor calls ``cancel``.
"""
from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time

from meshfacts.errors import RunnerError

CANCEL_SIGNALS = tuple(s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None))
                       if s is not None)


class Cancel:
    """A thread-safe cancel flag with the first ``reason`` (str) kept.

    ``install()`` starts the sources listed in the module docstring (signal handlers need the
    main thread); ``uninstall()`` restores the previous signal handlers. ``wait(timeout)``
    returns True once cancelled.
    """

    def __init__(self):
        self._event = threading.Event()
        self.reason: str | None = None
        self.at: float | None = None
        self._lock = threading.Lock()
        self._old_handlers: dict = {}
        self._stop = threading.Event()
        self.listeners: list = []

    def __bool__(self) -> bool:
        return self._event.is_set()

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str) -> None:
        """Set the flag (first reason wins) and call each listener once."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self.at = time.time()
            self._event.set()
            listeners = list(self.listeners)
        for fn in listeners:
            try:
                fn(reason)
            except Exception:
                pass

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    # -- sources ------------------------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        self.cancel(f"signal {signal.Signals(signum).name}")

    def install(self, *, signals: bool = True, stdin: bool = False,
                parent: bool = True) -> "Cancel":
        """Start the cancel sources: signal handlers (main thread only), the stdin watch when
        ``stdin`` is True and stdin is a pipe or socket, the parent-pid poll. Returns self."""
        if signals and threading.current_thread() is threading.main_thread():
            for sig in CANCEL_SIGNALS:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if stdin and stdin_is_pipe():
            threading.Thread(target=self._watch_stdin, name="runner-stdin-watch",
                             daemon=True).start()
        if parent:
            parent_pid = os.getppid()
            if parent_pid > 1:
                threading.Thread(target=self._watch_parent, args=(parent_pid,),
                                 name="runner-parent-watch", daemon=True).start()
        return self

    def uninstall(self) -> None:
        self._stop.set()
        for sig, handler in self._old_handlers.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
        self._old_handlers.clear()

    def _watch_stdin(self) -> None:
        fd = sys.stdin.fileno()
        try:
            while not self._stop.is_set():
                chunk = os.read(fd, 4096)  # anything written is ignored; EOF means cancel
                if not chunk:
                    self.cancel("stdin closed")
                    return
        except OSError:
            self.cancel("stdin closed")

    def _watch_parent(self, parent_pid: int) -> None:
        while not self._stop.wait(0.2):
            if os.getppid() != parent_pid:
                self.cancel(f"parent process {parent_pid} died")
                return


_CANCEL_HINTS = (
    ("stdin", "stdin was closed and --cancel-on-stdin-eof was given (the Blender add-on's way "
              "to cancel). If you did not mean to cancel, leave that option out."),
    ("signal", "A signal stopped it (Ctrl-C, kill, or the terminal closing); run the command "
               "again when you want the result."),
    ("parent", "The program that started the runner exited; run the job again from a process "
               "that waits for it."),
    ("stdout", "The program reading the runner's output closed it; keep reading stdout until "
               "the last line."),
)
"""(reason prefix, hint) for ``cancel_error``: the first prefix the cancel reason starts with
picks the hint; another reason gets the kind's default hint."""


def cancel_error(cancel: Cancel, when: str):
    """The ``RunnerError('cancelled')`` for a job stopped by ``cancel``; ``when`` says at which
    point (e.g. ``"before the worker started"``). The hint fits the source: a closed stdin
    names ``--cancel-on-stdin-eof``, a signal says who usually sends it."""
    reason = cancel.reason or "cancelled"
    hint = next((text for prefix, text in _CANCEL_HINTS if reason.startswith(prefix)), None)
    return RunnerError("cancelled", f"Cancelled ({reason}) {when}.", hint)


def stdin_is_pipe() -> bool:
    """True when stdin is open and is a pipe or a socket (the add-on's case)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
