"""Reservations: memory an admitted command was promised, visible to every guard on the machine.

Admission reads ``available`` once; six guards with ``--need 10G`` polling together would each
see the same free memory and all start, though only one fits. So a guard admitted with a
``need`` records a reservation, and every guard deciding on a ``need`` first subtracts what the
others still hold: a reservation holds ``need − footprint`` of its command's process tree
(bytes, never below 0) — the whole need before the command starts, less as the command grows
into it, nothing once its measured footprint has taken over (that memory is then missing from
``available`` itself). The decision and the new record happen under one lock, so two guards
cannot both take the last room.

Records are small JSON files in ``<registry>/reservations/`` (``registry_dir()`` of
:mod:`stageload.guard.peers`): ``{"pid", "created", "need", "command"}`` — the guard's pid and
creation time (a file left by a killed guard, or one whose pid was reused, is stale and
removed), the need in bytes and the command's pid (None before it starts). The lock is an
``fcntl.flock`` on ``reservations.lock`` there. Written by hand for the same reason as the
registry (no dependency offers a cross-process one); POSIX only. The registry and this folder
are private (``stageload.guard.private``: ``0700``, this user's, checked on every use). When
they cannot be used, a guard with a ``need`` refuses: at its start (:meth:`Reservations.check`,
a ``ConfigError`` naming the folder and why), and at each admission (a refusal saying so) —
never an admission without reservations. A guard without a need never uses
them.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

import psutil

_SLACK = 0.05  # seconds; psutil creation times are rounded to clock ticks


def _held(record: dict) -> int:
    """Bytes ``record`` still holds: ``need`` minus its command tree's footprint (≥ 0)."""
    need = record.get("need")
    if not isinstance(need, int) or isinstance(need, bool) or need <= 0:
        return 0
    command = record.get("command")
    if not isinstance(command, int) or isinstance(command, bool):
        return need
    from ..meter import footprint

    try:
        return max(0, need - footprint(command, tree=True))
    except (ProcessLookupError, PermissionError, psutil.Error, OSError):
        return 0  # the command has ended: nothing more to hold


def _alive(record: dict) -> bool:
    try:
        created = psutil.Process(int(record["pid"])).create_time()
        return abs(created - float(record["created"])) <= _SLACK
    except (KeyError, TypeError, ValueError, psutil.Error):
        return False


class Reservations:
    """This guard's reservation and the others' on this machine. ``folder``: where records
    live (default ``registry_dir() / "reservations"``). Every method swallows ``OSError``."""

    def __init__(self, folder: Path | None = None) -> None:
        if folder is None:
            from .peers import registry_dir

            folder = registry_dir() / "reservations"
        self.folder = folder
        self.mine: Path | None = None
        self._record: dict | None = None
        self.unusable: str | None = None

    def check(self) -> None:
        """Make (``0700``) and check the registry folder and this one
        (``stageload.guard.private.ensure``). Raises ``FolderUnusable`` (an ``OSError``)
        naming the folder and why it cannot be used."""
        from .private import ensure

        ensure(self.folder.parent)
        ensure(self.folder)

    @contextmanager
    def locked(self):
        """Hold the machine-wide reservation lock (blocking; the sections under it are
        short). Yields True, or False when the folder cannot be used (not private, no lock;
        ``self.unusable`` then says why)."""
        self.unusable = None
        try:
            self.check()
            fd = os.open(self.folder / "reservations.lock",
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            self.unusable = str(exc)
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
        finally:
            os.close(fd)

    def held_by_others(self) -> tuple[int, int]:
        """``(bytes, count)`` the other live reservations still hold; stale files are removed.
        Call under :meth:`locked`."""
        total = count = 0
        try:
            entries = [p for p in self.folder.iterdir() if p.suffix == ".json" and p != self.mine]
        except OSError:
            return 0, 0
        for entry in entries:
            try:
                record = json.loads(entry.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(record, dict) or not _alive(record):
                _remove(entry)
                continue
            held = _held(record)
            if held:
                total, count = total + held, count + 1
        return total, count

    def reserve(self, need: int) -> None:
        """Record (or replace) this guard's reservation of ``need`` bytes. Call under
        :meth:`locked`, in the same section as the decision it follows."""
        try:
            created = psutil.Process().create_time()
        except psutil.Error:
            return
        self._record = {"pid": os.getpid(), "created": created, "need": int(need), "command": None}
        if self.mine is None:
            self.mine = self.folder / f"{os.getpid()}-{id(self):x}.json"
        self._write()

    def started(self, command_pid: int) -> None:
        """The command runs as ``command_pid``: from now on the reservation shrinks as the
        command's footprint grows."""
        if self._record is not None:
            self._record["command"] = int(command_pid)
            self._write()

    def release(self) -> None:
        """Drop this guard's reservation (idempotent)."""
        if self.mine is not None:
            _remove(self.mine)
        self.mine, self._record = None, None

    def _write(self) -> None:
        tmp = self.mine.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self._record), encoding="utf-8")
            os.replace(tmp, self.mine)
        except OSError:
            _remove(tmp)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def with_held(readings: dict, held: int, count: int) -> dict:
    """``readings`` as an admission must see them: ``available`` less ``held`` (bytes), the
    raw figure kept as ``available_unreserved`` and the reservation as ``reserved`` /
    ``reserved_by`` (how many admitted jobs)."""
    available = readings.get("available")
    if not held or available is None:
        return readings
    return {**readings, "available": max(0, available - held), "available_unreserved": available,
            "reserved": held, "reserved_by": count}


class Admission:
    """The guard's side of the reservations: :meth:`held` for every admission poll,
    :meth:`admit` to confirm and record an admission. Nothing changes for a guard without
    ``need``."""

    def __init__(self, reservations: Reservations | None = None) -> None:
        self.reservations = reservations or Reservations()

    def held(self, config) -> tuple[int, int]:
        """``(bytes, count)`` other admitted jobs still hold — a look without the lock
        (:meth:`admit` decides under it); ``(0, 0)`` without ``config.need``."""
        if config.need is None:
            return 0, 0
        return self.reservations.held_by_others()

    def admit(self, config, decide):
        """Under the machine-wide lock: decide again (``decide(held)`` with what the others
        hold now, returning a ``waiting.Decision``) and, when admitted, record this guard's
        reservation of ``config.need``. Returns the decision."""
        if config.need is None:
            return decide((0, 0))
        with self.reservations.locked() as usable:
            if not usable:  # never an admission with a need that nobody else can see
                from dataclasses import replace

                from .admission import Verdict

                decision = decide((0, 0))
                return replace(decision, verdict=Verdict(
                    False, f"the reservations cannot be used: {self.reservations.unusable}",
                    ("reservations",)))
            decision = decide(self.reservations.held_by_others())
            if decision.verdict.ok:
                self.reservations.reserve(config.need)
        return decision


def explained(verdict, readings: dict):
    """``verdict`` with `` (after N GiB reserved by K admitted job(s))`` added to a refusal's
    reason when ``readings`` carry a reservation; unchanged otherwise."""
    from meshfacts.units import format_size

    from .admission import Verdict

    if verdict.ok or not readings.get("reserved"):
        return verdict
    return Verdict(False, f"{verdict.reason} (after {format_size(readings['reserved'])} "
                   f"reserved by {readings.get('reserved_by', 1)} admitted job(s))",
                   verdict.blocking, verdict.thresholds)
