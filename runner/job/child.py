"""One process of a job, run under the job's guard: ``Child`` spawns it (own session and process
group, through ``stageload.guard.Guard``), relays the JSON lines it writes to an events pipe,
samples its process tree from outside, judges the guard's budget, and waits for its end.

The worker (``python -m runner.worker.run``) is the first child of every job; a job may run a
second child (e.g. an export process) the same way, one after the other — the guard watches
one command at a time.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from meshfacts.events import make
from runner.job.stall import StallWatch
from runner.job.trace import log
from runner.protocol import relay
from stageload.meter import Sampler

SAMPLE_INTERVAL = 0.1
"""Seconds between memory samples of a child's process tree (10 Hz)."""

WORKER_ONLY = frozenset({"worker", "worker_done", "error", "probe"})
"""Events the worker sends for the supervisor alone: written to the trace (as
``worker_<name>``), never relayed."""


def _feed(pipe, data: bytes) -> None:
    """Write ``data`` to ``pipe`` and close it; a child gone before reading it all
    (``BrokenPipeError``) is not this thread's to report."""
    try:
        pipe.write(data)
    except OSError:
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def child_env() -> dict:
    """A child's environment: ours, with this package's folder first on ``PYTHONPATH`` so
    the child imports the same ``runner`` and ``stageload`` even when they are not installed
    (the Blender add-on runs them from its own folder)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    parts = [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def stderr_fd() -> int | None:
    """Our stderr's file descriptor when it is open, else None."""
    try:
        fd = sys.stderr.fileno()
        os.fstat(fd)
        return fd
    except (OSError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class Supervision:
    """What a child process of a job is run with — the job's, shared by its children:

    ``guard`` (``stageload.guard.Guard``: starts the child, judges its samples by the budget,
    stops it; its ``config.poll`` and ``config.grace`` are seconds), ``cancel``
    (``runner.job.cancel.Cancel``: true once the job is cancelled, ``wait(seconds)``, ``reason``),
    ``trace`` (writes one dict to the job's trace only), ``publish`` (traces and prints one
    protocol object), ``tracker`` (``runner.job.memory.MemoryTracker``: turns events and samples
    into ``memory`` events) and ``stall_timeout`` (seconds a stall may last before the child is
    stopped, ``--stall-timeout``; None: never — ``runner.job.stall``).
    """

    guard: Any
    cancel: Any
    trace: Callable[[dict], None]
    publish: Callable[[dict], None]
    tracker: Any
    stall_timeout: float | None = None


class Child:
    """One child process of a job.

    ``sup`` (:class:`Supervision`) is what the job lends it. ``name`` labels the
    child in the trace (its private events are traced as ``<name>_<event>``) and in messages;
    ``private`` names the events it sends for the supervisor alone (kept in ``events``, by
    name, the last of each), every other event is relayed to the protocol stream.

    Steps: :meth:`spawn`, then :meth:`relay` and :meth:`sample` (both start a thread), then
    :meth:`wait`. Afterwards ``code`` is the exit status (negative: killed by that signal),
    ``events`` the private events, ``stopped`` the guard's reason when its budget stopped the
    child, ``stalled`` why it was stopped after a stall of ``--stall-timeout`` seconds (each
    None otherwise). While it runs, a stall is published as ``stalled`` / ``resumed``
    (``runner.job.stall.StallWatch``).
    """

    def __init__(self, sup: Supervision, name: str = "worker",
                 private: frozenset = WORKER_ONLY):
        self.sup = sup
        self.name = name
        self.private = private
        self.proc: subprocess.Popen | None = None
        self.code: int | None = None
        self.events: dict[str, dict] = {}
        self.stopped: str | None = None
        self.stalled: str | None = None
        self._watch = None
        self._read_fd: int | None = None
        self._reader: threading.Thread | None = None
        self._sampler = None
        self._guard_lock = threading.Lock()
        self._next_check = 0.0
        self._sample_failed = False

    def spawn(self, argv: Callable[[int], list[str]], stdin: bytes | None = None) -> None:
        """Start ``argv(events_fd)`` (the command line, given the write end of the events
        pipe) under the guard, stdout to our stderr; stdin ``/dev/null``, or a pipe a thread
        writes ``stdin`` into and then closes (the child reads it as it starts; a child that
        ends before reading it all is judged by how it ended). Raises ``OSError`` when it
        cannot be started."""
        read_fd, write_fd = os.pipe()
        err_fd = stderr_fd()
        try:
            self.proc = self.sup.guard.start(
                argv(write_fd), pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=err_fd if err_fd is not None else subprocess.DEVNULL,
                env=child_env(), close_fds=True)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._read_fd = read_fd
        if stdin is not None:
            threading.Thread(target=_feed, args=(self.proc.stdin, stdin), daemon=True,
                             name=f"runner-{self.name}-stdin").start()

    # -- relay ---------------------------------------------------------------------------------
    def relay(self) -> None:
        """Start the thread that reads the child's events and relays or keeps them."""
        self._reader = threading.Thread(target=self._read_events, daemon=True,
                                        name=f"runner-{self.name}-relay")
        self._reader.start()

    def _read_events(self) -> None:
        with os.fdopen(self._read_fd, "r", encoding="utf-8", errors="replace") as pipe:
            for line in pipe:
                line = line.strip()
                if line:
                    self._on_line(line)

    def _on_line(self, line: str) -> None:
        try:
            ev = json.loads(line)
        except ValueError:
            log(f"{self.name} sent a line that is not JSON: {line[:200]!r}")
            return
        if not isinstance(ev, dict) or "event" not in ev:
            return
        if self._watch is not None:
            self._watch.on_event()
        name = ev["event"]
        if name in self.private:
            self.events[name] = ev
            traced = name if name.startswith(self.name) else f"{self.name}_{name}"
            # a trace-only line under its process's name (no "v": it is not printed)
            self.sup.trace(make(traced, **{k: v for k, v in ev.items() if k not in ("v", "event")}))
            return
        if name == "stage" and ev.get("parent") is None:
            ev = {**ev, "pid": self.proc.pid}  # which process ran the stage (export: its own)
        if name not in ("stage", "ready"):
            self.sup.publish(relay(ev))
            return
        # The tracker places the event among the samples by t, as the summary does; a sample
        # stamped before it but still on its way to the tracker would land in the wrong stage.
        sampler = self._sampler
        with sampler.between_samples() if sampler is not None else contextlib.nullcontext():
            closing = self.sup.tracker.on_event(ev)
            if closing is not None:  # the ending stage's last figure, before the next begins
                self.sup.publish(make("memory", **closing))
            self.sup.publish(relay(ev))

    # -- sample --------------------------------------------------------------------------------
    def sample(self) -> None:
        """Start sampling the child's process tree (``stageload.meter.Sampler``, 10 Hz)."""
        self._watch = StallWatch(self.proc.pid, self._on_stall, self.sup.stall_timeout)
        self._sampler = Sampler(self.proc.pid, self._on_sample, interval=SAMPLE_INTERVAL).start()

    def _on_sample(self, sample: dict) -> None:
        # The sampler thread stops for good when its sink raises; the guard's budget rides on
        # it, so nothing here may escape.
        try:
            self._account(sample)
        except Exception as exc:
            if not self._sample_failed:
                log(f"memory sample handling failed ({type(exc).__name__}: {exc}); continuing")
            self._sample_failed = True

    def _on_stall(self, ev: dict) -> None:
        """A ``stalled`` / ``resumed`` event of :class:`runner.job.stall.StallWatch`: published,
        and said on stderr."""
        self.sup.publish(make(ev.pop("event"), **ev))
        if "reason" in ev:
            log(f"stalled: {ev['reason']} for {ev['seconds']:g} s")
        else:
            log(f"resumed: the {self.name} (pid {ev['pid']}) moves again after "
                f"{ev['seconds']:g} s")

    def _account(self, sample: dict) -> None:
        sup = self.sup
        sup.trace(sample)
        if not sample.get("footprint"):
            return  # the child has exited (a zombie has no resident memory): no report
        if self._watch.on_sample() and self.stalled is None:
            self.stalled = self._watch.timed_out
        memory = sup.tracker.on_sample(sample)
        if memory is not None:
            sup.publish(make("memory", **memory))
        # The budget is judged every --poll seconds (as `python -m stageload guard` does),
        # on the latest sample, so --kill-samples keeps its documented meaning.
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + sup.guard.config.poll
        with self._guard_lock:
            if self.stopped is None and not sup.cancel:
                decision = sup.guard.check(sample)
                if decision is not None:
                    self.stopped = decision.get("reason", "over budget")

    def stop_leftovers(self) -> None:
        """Stop whatever the exited child left running — its process group, descendants that
        were re-parented to init, processes carrying its guard marker (the guard's
        ``ProcessTree`` knows them all) — whatever the outcome: nothing of a job may outlive
        it. Before the relay is joined: a leftover holding the events pipe open would keep
        the relay waiting."""
        with self._guard_lock:
            self.sup.guard.stop_leftovers()

    # -- wait ----------------------------------------------------------------------------------
    def wait(self) -> int:
        """Wait until the child exits, the job is cancelled (the child's tree is stopped) or
        the guard's budget stopped it; then stop sampling and collect the last events.
        Returns the exit status (also in ``code``)."""
        guard, cancel, proc = self.sup.guard, self.sup.cancel, self.proc
        while proc.poll() is None and not cancel and self.stopped is None \
                and self.stalled is None:
            cancel.wait(0.05)
        if cancel and proc.poll() is None:
            with self._guard_lock:
                guard.stop(f"cancelled: {cancel.reason}")
        elif self.stalled is not None and proc.poll() is None:
            with self._guard_lock:
                guard.stop(f"stalled: {self.stalled}")
        try:
            self.code = proc.wait(timeout=max(5.0, guard.config.grace + 5.0))
        except Exception:
            with self._guard_lock:
                guard.stop(f"the {self.name} did not exit")
            self.code = proc.wait()
        self.stop_leftovers()
        self._sampler.stop(final=False)
        if self._sampler.error is not None:
            log(f"the memory sampler stopped early: {self._sampler.error!r}")
        self._reader.join(timeout=3.0)
        # trace only: when this process was gone (the export process starts after the worker's)
        self.sup.trace(make(f"{self.name}_exit", pid=proc.pid, code=self.code))
        return self.code
