"""Start a command in its own process group and stop it with everything it spawned.

Who counts as "the command" (and so may be signalled) — nothing else ever is:

1. its process group: the command is started with ``start_new_session=True`` (``setsid``), so
   its pid is the group id; every process still in that group and created no earlier than the
   command belongs to it;
2. its descendants by ancestry, psutil's parent links, remembered at every
:meth:`ProcessTree.refresh`
   as *(pid, creation time)* so that a descendant that called ``setsid`` and whose parent has
   exited (it was re-parented to init) is still known, and a pid reused by an unrelated process
   is not mistaken for it (psutil refuses to signal a ``Process`` whose creation time changed);
3. processes that carry this run's marker in their environment (``STAGELOAD_GUARD_<token>=1``,
   inherited through ``fork``/``exec``), created no earlier than the command: this catches a
   daemon that double-forked and called ``setsid`` between two refreshes.

The guard's own process and its ancestors are never targets.

Stopping: SIGTERM to the group and to each escaped member, wait up to ``grace`` seconds (new
members that appear meanwhile get SIGTERM too), then SIGKILL to whatever is left; processes
that are zombies count as gone.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import psutil

MARKER_PREFIX = "STAGELOAD_GUARD_"
#: Tolerance (seconds) when comparing psutil creation times, which are rounded to clock ticks.
_CTIME_SLACK = 0.05


@dataclass
class StopReport:
    """What :meth:`ProcessTree.stop` did: pids sent SIGTERM, pids that needed SIGKILL, pids
    still alive afterwards (should be empty), and the seconds it took."""

    terminated: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    seconds: float = 0.0


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


class ProcessTree:
    """One command run in its own session and process group, and all it spawns.

    ``ProcessTree(argv, **popen_kwargs)`` starts the command at once with ``subprocess.Popen``.
    ``start_new_session`` is forced on; passing ``start_new_session=False``, ``process_group``
    or ``preexec_fn`` raises ``ValueError`` (they would defeat the group). An ``OSError`` from
    ``Popen`` (no such program, not executable) propagates unchanged.
    """

    def __init__(self, argv: list[str], **popen_kwargs) -> None:
        for bad in ("process_group", "preexec_fn"):
            if popen_kwargs.get(bad) is not None:
                raise ValueError(f"{bad} cannot be used: the guard starts the command in its own "
                                 f"session")
        if popen_kwargs.get("start_new_session") is False:
            raise ValueError("start_new_session=False cannot be used: the guard needs its own "
                             "process group")
        popen_kwargs["start_new_session"] = True
        self.token = uuid.uuid4().hex[:16]
        self.marker = MARKER_PREFIX + self.token
        env = dict(popen_kwargs.get("env") if popen_kwargs.get("env") is not None else os.environ)
        env[self.marker] = "1"
        popen_kwargs["env"] = env
        self.popen = subprocess.Popen(list(argv), **popen_kwargs)
        self.pid = self.popen.pid
        self.pgid = self.pid
        self._protected = {os.getpid()}
        try:
            self._protected.update(p.pid for p in psutil.Process().parents())
        except psutil.Error:
            pass
        try:
            self._root = psutil.Process(self.pid)
            self.create_time = self._root.create_time()
        except psutil.Error:  # exited at once; nothing else can belong to it
            self._root = None
            self.create_time = time.time()
        self._known: dict[tuple[int, float], psutil.Process] = {}
        if self._root is not None:
            self._remember(self._root)
        self.stopped: StopReport | None = None

    # -- bookkeeping -------------------------------------------------------------------------
    def _remember(self, proc: psutil.Process) -> None:
        if proc.pid in self._protected:
            return
        try:
            key = (proc.pid, proc.create_time())
        except psutil.Error:
            return
        if key[1] + _CTIME_SLACK < self.create_time:
            return
        self._known.setdefault(key, proc)

    def _group_is_ours(self) -> bool:
        """Whether the group id still names our group: the leader is not reaped yet (its pid is
        held), or a process we know is still in it (Linux and macOS keep a group's id from being
        reused while the group has members)."""
        if self.popen.returncode is None:
            return True
        for proc in self._known.values():
            try:
                if not _gone(proc) and os.getpgid(proc.pid) == self.pgid:
                    return True
            except OSError:
                continue
        return False

    def _ours_by_scan(self, with_marker: bool) -> list[psutil.Process]:
        """Processes in our group, or (``with_marker``) carrying our environment marker."""
        found = []
        group_is_ours = self._group_is_ours()
        for proc in psutil.process_iter(["pid", "create_time"]):
            pid = proc.pid
            if pid in self._protected:
                continue
            ctime = proc.info.get("create_time")
            if ctime is None or ctime + _CTIME_SLACK < self.create_time:
                continue
            try:
                if group_is_ours and os.getpgid(pid) == self.pgid:
                    found.append(proc)
                    continue
            except OSError:
                continue
            if with_marker:
                try:
                    if proc.environ().get(self.marker) == "1":
                        found.append(proc)
                except psutil.Error:
                    continue
        return found

    def refresh(self) -> int:
        """Record the command's current descendants; return how many processes are known alive.

        Call it at every poll so that a descendant is remembered while its ancestry still
        shows. Walks down from each known process whose parent is not itself known (usually
        just the leader) with psutil's ``children(recursive=True)``: one pass over the process
        table per such root, a few milliseconds.
        """
        known = [p for p in self._known.values() if not _gone(p)]
        pids = {p.pid for p in known}
        for proc in known:
            try:
                if proc.ppid() in pids:
                    continue  # reached from its parent's walk
                for child in proc.children(recursive=True):
                    self._remember(child)
            except psutil.Error:
                continue
        return len(self.members(scan=False))

    def members(self, scan: bool = True) -> list[psutil.Process]:
        """Live processes of the command (see the module docstring for who counts).

        ``scan=True`` also searches all processes for group members and the environment marker
        (a few milliseconds); ``scan=False`` uses what :meth:`refresh` remembered.
        """
        if scan:
            for proc in list(self._known.values()):
                if _gone(proc):
                    continue
                try:
                    for child in proc.children(recursive=True):
                        self._remember(child)
                except psutil.Error:
                    pass
            for proc in self._ours_by_scan(with_marker=True):
                self._remember(proc)
        return [p for p in self._known.values() if not _gone(p)]

    def alive(self) -> bool:
        """True while any process of the command (leader included, zombies excluded) runs."""
        return bool(self.members(scan=True))

    def poll(self) -> int | None:
        """The leader's exit status (``Popen.poll``): None while it runs, ``-N`` after signal N."""
        return self.popen.poll()

    # -- stopping ----------------------------------------------------------------------------
    def _signal_all(self, sig: int, already: set[int]) -> list[int]:
        sent = []
        targets = self.members(scan=True)
        grouped = set()
        for proc in targets:
            try:
                if os.getpgid(proc.pid) == self.pgid:
                    grouped.add(proc.pid)
            except OSError:
                continue
        # While the leader is not reaped the group id is still ours: one killpg reaches even
        # members forked a moment ago. Later SIGTERM rounds (``already`` set) only signal the
        # newcomers, so nobody gets a second SIGTERM (some programs take that as "force").
        use_killpg = self.popen.returncode is None and not already
        if use_killpg:
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in targets:
            if proc.pid in already:
                continue
            if not (use_killpg and proc.pid in grouped):
                try:
                    proc.send_signal(sig)  # psutil checks pid + creation time first
                except psutil.Error:
                    continue
            sent.append(proc.pid)
        return sent

    def stop(self, grace: float) -> StopReport:
        """Stop every process of the command: SIGTERM, up to ``grace`` seconds, SIGKILL.

        Returns a :class:`StopReport`. Safe to call again (later calls stop anything new).
        Reaps the leader. Never signals a process outside the command (module docstring).
        """
        began = time.monotonic()
        report = StopReport()
        termed: set[int] = set()
        report.terminated = self._signal_all(signal.SIGTERM, termed)
        termed.update(report.terminated)
        deadline = began + grace
        while time.monotonic() < deadline:
            self.popen.poll()
            if not self.members(scan=True):
                break
            time.sleep(0.05)
            new = self._signal_all(signal.SIGTERM, termed)  # forked after the first round
            report.terminated += new
            termed.update(new)
        killed: set[int] = set()
        hard_deadline = time.monotonic() + 5.0
        while time.monotonic() < hard_deadline:
            self.popen.poll()
            left = self.members(scan=True)
            if not left:
                break
            new = self._signal_all(signal.SIGKILL, set())
            killed.update(new)
            time.sleep(0.05)
        report.killed = sorted(killed)
        try:
            self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
        report.survivors = [p.pid for p in self.members(scan=True)]
        report.seconds = time.monotonic() - began
        self.stopped = report
        return report
