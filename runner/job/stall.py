"""Notice a child process of a job that no longer moves: ``stalled`` and ``resumed`` events, and
the ``--stall-timeout`` that ends the job as ``stalled``.

A child is stalled when it is stopped — process state ``T`` (SIGSTOP, SIGTSTP, a debugger's
``t``), read with psutil — for :data:`STOPPED_AFTER` seconds, or when its process tree has used
no CPU time and sent no event for :data:`IDLE_AFTER` seconds (a deadlock, a wait that never
ends). It has resumed once it runs again and either uses CPU time or sends an event.
``--stall-timeout SECONDS`` (off by default: a Pixal3D stage may run for minutes without a
progress event, though never without CPU time) stops the job once a stall has lasted that long,
counted from when the child stopped moving (so never before the ``stalled`` event).

The thresholds are module constants a test may lower (the supervisor's start-up hook of
tests/runner/conftest.py) so that it need not wait a minute.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import psutil

from meshfacts.events import make

STOPPED_AFTER = 10.0
"""Seconds in state ``T`` before a child is reported stalled."""
IDLE_AFTER = 60.0
"""Seconds without CPU time used and without an event before a child is reported stalled."""
CHECK_EVERY = 0.5
"""Seconds between two looks at the child's state and CPU time (the sampler calls more often)."""

_STOPPED = (psutil.STATUS_STOPPED, getattr(psutil, "STATUS_TRACING_STOP", "tracing-stop"))


class StallWatch:
    """Watches one child: :meth:`on_event` for each event it sends (relay thread),
    :meth:`on_sample` for each memory sample (sampler thread; it looks every
    :data:`CHECK_EVERY` s); a lock keeps the two threads' views of the stall one (and the
    order of what they publish). An event
    from a stalled child publishes ``resumed`` at once, before that event is relayed (a child
    that runs on and ends between two looks would otherwise never be said to have resumed).
    ``publish`` gets the ``stalled`` / ``resumed`` event dicts
    (``seconds``: how long the child has not moved; ``why``: ``stopped`` or ``idle``;
    ``reason``: for people; ``pid``). ``timeout``: seconds (None: never stop). After
    :meth:`on_sample` returned True, ``timed_out`` holds the reason for the error."""

    def __init__(self, pid: int, publish: Callable[[dict], None], timeout: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.pid = pid
        self.publish = publish
        self.timeout = timeout
        self.clock = clock
        now = clock()
        self._last_event = now
        self._cpu: float | None = None
        self._cpu_changed = now
        self._stopped_since: float | None = None
        self._next = 0.0
        self.stalled: dict | None = None  # the stalled event while stalled
        self._since: float | None = None  # when the child stopped moving (while stalled)
        self.timed_out: str | None = None
        self._lock = threading.Lock()

    def on_event(self) -> None:
        """The child sent an event: it moves (``resumed`` now if it was stalled). The relay
        reads what the child wrote before it stopped long before ``STOPPED_AFTER`` or
        ``IDLE_AFTER`` have passed, so an event after ``stalled`` is new."""
        with self._lock:  # published under it: ``stalled`` and ``resumed`` keep their order
            self._last_event = now = self.clock()
            if self.stalled is not None:
                self.publish(self._resume(now))

    def _resume(self, now: float) -> dict:
        """The ``resumed`` event for the stall that ends at ``now`` (the lock held)."""
        event = make("resumed", pid=self.pid, seconds=round(now - self._since, 1),
                     why=self.stalled["why"])
        self.stalled = self._since = None
        return event

    def _read(self) -> tuple[str | None, float | None]:
        """The root's state and the tree's CPU seconds (user + system; None when unreadable)."""
        try:
            root = psutil.Process(self.pid)
            status = root.status()
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return None, None
        total = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
        return status, total

    def on_sample(self) -> bool:
        """Look at the child (at most every :data:`CHECK_EVERY` s); publish ``stalled`` or
        ``resumed`` on a change. Returns True once the stall timeout is over."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + CHECK_EVERY
        status, cpu = self._read()
        if status is None:
            return False
        with self._lock:
            changed = self._look(now, status in _STOPPED, cpu)
            if changed is not None:
                self.publish(changed)
        return self.timed_out is not None

    def _look(self, now: float, stopped: bool, cpu: float) -> dict | None:
        """The state after one look (the lock held); the event to publish, if any."""
        if self._cpu is None or cpu > self._cpu:
            self._cpu, self._cpu_changed = cpu, now
        if stopped and self._stopped_since is None:
            self._stopped_since = now
        elif not stopped:
            self._stopped_since = None
        idle_since = max(self._cpu_changed, self._last_event)
        changed = None
        if self.stalled is None:
            changed = self._maybe_stall(now, stopped, idle_since)
        elif not stopped and (self._cpu_changed > self._since or self._last_event > self._since):
            changed = self._resume(now)
        if self.stalled is not None and self.timeout is not None \
                and now - self._since >= self.timeout and self.timed_out is None:
            self.timed_out = (f"{self.stalled['reason']} for {now - self._since:.0f} s "
                              f"(--stall-timeout {self.timeout:g})")
        return changed

    def _maybe_stall(self, now: float, stopped: bool, idle_since: float) -> dict | None:
        if stopped and now - self._stopped_since >= STOPPED_AFTER:
            since, why = self._stopped_since, "stopped"
            reason = f"the process (pid {self.pid}) is stopped (state T: SIGSTOP or a debugger)"
        elif not stopped and now - idle_since >= IDLE_AFTER:
            since, why = idle_since, "idle"
            reason = f"the process (pid {self.pid}) used no CPU time and sent no event"
        else:
            return None
        self._since = since
        self.stalled = make("stalled", pid=self.pid, seconds=round(now - since, 1), why=why,
                            reason=reason)
        return dict(self.stalled)
