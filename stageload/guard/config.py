"""``GuardConfig``: every guard setting, and the command-line options that fill it.

The same options serve ``python -m stageload guard`` and any program that runs a guard: call
:func:`add_guard_arguments` on its ``argparse`` parser, then :meth:`GuardConfig.from_args`.
``docs/guard.md`` documents each option.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

from meshfacts.units import format_size, parse_size

from ..trace import TraceError, peak_from_trace
from . import pressure as pressure_mod
from .amount import Amount, is_off, parse_amount

#: Defaults. ``kill_free`` 10 % is SPEC §2.3's figure; the swap budget of 8 GiB is below what
#: the measured run shows (the unguarded texture stage grew swap by 12 GB in ten seconds).
DEFAULT_KILL_FREE = Amount(percent=10.0)
DEFAULT_SWAP_BUDGET = 8 * 1024**3
DEFAULT_KILL_SAMPLES = 3
DEFAULT_POLL = 0.5
DEFAULT_GRACE = 5.0


class ConfigError(ValueError):
    """A guard setting that cannot be used; the message says what to change."""


@dataclass
class GuardConfig:
    """What the guard waits for before starting a command and what stops it once running.

    Admission (all configured conditions must hold at one poll):

    - ``wait_free``: available memory at least this (percent of total or bytes); None = no
      fixed requirement.
    - ``need``: bytes the command is predicted to need (``--need`` / ``--need-from``); admission
      then also requires ``available >= need + kill_free`` so that the predicted run does not
      end under the stop threshold. None = no prediction.
    - ``busy``: regular expressions matched (``re.search``) against whole command lines of
      other processes; ``quiet_for`` seconds must pass with none of them seen, counted from the
      first poll that no longer sees one (or from the guard's start when none was seen).
    - ``swap_limit``: swap in use must be at most this many bytes; None = no limit.
    - ``wait_pressure``: macOS memory pressure level (2 warn, 4 critical) at or above which
      the guard waits; None = no condition (:mod:`stageload.guard.pressure`).
    - ``start_timeout``: give up after this many seconds (exit 4); None = wait for ever.

    Budget while the command runs:

    - ``swap_budget``: stop when swap in use grows more than this many bytes over its value at
      start; None = off.
    - ``kill_free``: stop when available memory is under this for ``kill_samples``
      consecutive samples; None = off.
    - ``stop_at_pressure``: stop when the macOS pressure level is at or above this (2 or 4)
      for ``kill_samples`` consecutive samples; None = off.

    The two pressure settings are None by default here; :meth:`from_args` turns them on
    (``--wait-pressure warn``, ``--stop-at-pressure critical``) where the meter reports
    pressure (macOS).

    Timing: ``poll`` seconds between readings, ``grace`` seconds between SIGTERM and SIGKILL.
    ``log`` is an optional JSONL file (appended to) that receives every decision.
    """

    wait_free: Amount | None = None
    need: int | None = None
    need_source: str | None = None
    busy: list[str] = field(default_factory=list)
    quiet_for: float = 0.0
    swap_limit: int | None = None
    start_timeout: float | None = None
    swap_budget: int | None = DEFAULT_SWAP_BUDGET
    kill_free: Amount | None = DEFAULT_KILL_FREE
    kill_samples: int = DEFAULT_KILL_SAMPLES
    wait_pressure: int | None = None
    stop_at_pressure: int | None = None
    poll: float = DEFAULT_POLL
    grace: float = DEFAULT_GRACE
    log: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the setting when a value cannot work."""
        import re

        for pattern in self.busy:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"--busy {pattern!r} is not a valid regular expression: "
                                  f"{exc}") from None
        for name in ("quiet_for", "poll", "grace", "start_timeout"):
            value = getattr(self, name)
            if value is None:
                continue
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be a number of seconds >= 0, "
                                  f"not {value}")
        if self.poll <= 0:
            raise ConfigError("--poll must be more than 0 seconds")
        if self.kill_samples < 1:
            raise ConfigError("--kill-samples must be at least 1")
        for name in ("need", "swap_limit", "swap_budget"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must not be negative")
        for name in ("wait_pressure", "stop_at_pressure"):
            if getattr(self, name) not in (None, *pressure_mod.NAMES):
                raise ConfigError(f"--{name.replace('_', '-')} must be warn, critical or off, "
                                  f"not {getattr(self, name)!r}")

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "GuardConfig":
        """Build a config from a namespace parsed with :func:`add_guard_arguments`.

        ``--need-from`` is read here (see :func:`need_from_trace`). Raises :class:`ConfigError`
        with a message for a person when a value cannot be used (the caller should print it and
        exit 2).
        """
        need = ns.guard_need
        source = None
        if ns.guard_need_from:
            if need is not None:
                raise ConfigError("give either --need or --need-from, not both")
            need = need_from_trace(ns.guard_need_from)
            source = str(ns.guard_need_from)
        config = cls(
            wait_free=ns.guard_wait_free,
            need=need,
            need_source=source,
            busy=list(ns.guard_busy or []),
            quiet_for=ns.guard_quiet_for,
            swap_limit=ns.guard_swap_limit,
            start_timeout=ns.guard_start_timeout,
            swap_budget=ns.guard_swap_budget,
            kill_free=ns.guard_kill_free,
            kill_samples=ns.guard_kill_samples,
            wait_pressure=_pressure_setting(ns.guard_wait_pressure, "--wait-pressure", 2),
            stop_at_pressure=_pressure_setting(ns.guard_stop_at_pressure, "--stop-at-pressure", 4),
            poll=ns.guard_poll,
            grace=ns.guard_grace,
            log=ns.guard_log,
        )
        config.check_satisfiable(_total_memory())
        return config

    def check_satisfiable(self, total: int | None) -> None:
        """Raise :class:`ConfigError` when a condition can never hold on a machine with
        ``total`` bytes of memory (None = unknown: nothing is checked).

        Available memory never reaches total memory (the kernel keeps some), so ``--wait-free``
        of 100 % or of total memory or more, and ``--need`` that with the ``--kill-free`` floor
        reaches total memory, would wait for ever; ``--kill-free`` at or above total memory
        would stop every command at once.
        """
        if not total:
            return
        shown = format_size(total)
        hint = "; it can never start. Lower it (see free memory with `free -h`)"
        wait = self.wait_free
        if wait is not None:
            if wait.percent is not None and wait.percent >= 100:
                raise ConfigError(f"--wait-free {wait}: available memory never reaches 100 % of "
                                  f"total "
                                  f"(the system keeps some); it can never start. Use e.g. 90%")
            if wait.bytes is not None and wait.bytes >= total:
                raise ConfigError(f"--wait-free {format_size(wait.bytes)} is not less than this "
                                  f"machine's {shown} total memory{hint}")
        if self.need is not None:
            floor = self.kill_free.resolve(total) if self.kill_free is not None else 0
            if self.need >= total:
                raise ConfigError(f"--need {format_size(self.need)} is not less than this "
                                  f"machine's {shown} total memory{hint}")
            if self.need + floor >= total:
                raise ConfigError(f"--need {format_size(self.need)} plus the --kill-free floor "
                                  f"{format_size(floor)} is not less than this machine's {shown} "
                                  "total memory; it can never start. Lower --kill-free (or "
                                  "--kill-free off) or --need")
        kill = self.kill_free
        if kill is not None and kill.bytes is not None and kill.bytes >= total:
            raise ConfigError(f"--kill-free {format_size(kill.bytes)} is not less than this "
                              f"machine's {shown} total memory; every command would be stopped "
                              "at once. Use a percent such as 10%")

    def describe(self) -> str:
        """One line for people summarising the active settings."""
        parts = []
        if self.wait_free is not None:
            parts.append(f"wait-free {self.wait_free}")
        if self.need is not None:
            parts.append(f"need {format_size(self.need)}")
        if self.busy:
            parts.append(f"busy {' | '.join(self.busy)} quiet-for {self.quiet_for:g} s")
        if self.swap_limit is not None:
            parts.append(f"swap-limit {format_size(self.swap_limit)}")
        budget = "off" if self.swap_budget is None else format_size(self.swap_budget)
        parts.append("swap-budget " + budget)
        parts.append("kill-free " + ("off" if self.kill_free is None else f"{self.kill_free} "
                                                                          f"x{self.kill_samples}"))
        for name, level in (("wait-pressure", self.wait_pressure),
                            ("stop-at-pressure", self.stop_at_pressure)):
            if level is not None:
                parts.append(f"{name} {pressure_mod.NAMES[level]}")
        return ", ".join(parts)


def _reports_pressure() -> bool:
    """Whether this platform's meter reports memory pressure (the macOS reader does)."""
    from stageload.meter import reader_name  # imported here: keeps `import stageload.guard` light

    return reader_name() == "_macos"


def _pressure_setting(value, option: str, default: int) -> int | None:
    """A pressure option's level: ``auto`` (the default) is ``default`` where the platform
    reports pressure and off elsewhere. Raises :class:`ConfigError` when a level is asked for
    on a platform without a pressure reading (it could never be judged)."""
    if value == pressure_mod.AUTO:
        return default if _reports_pressure() else None
    if value is not None and not _reports_pressure():
        raise ConfigError(f"{option}: memory pressure is a macOS reading and this platform has "
                          f"none; leave the option out (or write {option} off)")
    return value


def _total_memory() -> int | None:
    """Total memory in bytes through ``stageload.meter.system_memory()``; None when unknown."""
    from stageload.meter import system_memory  # imported here: keeps `import stageload.guard` light

    try:
        total = system_memory().total
    except OSError:
        return None
    return int(total) if total else None


def need_from_trace(path: str | Path) -> int:
    """``--need-from PATH``: the peak of an earlier run's trace in bytes
    (:func:`stageload.trace.peak_from_trace`, which streams the file and skips junk values).
    Raises :class:`ConfigError` with a message for a person when it cannot be used."""
    if not Path(path).exists():
        raise ConfigError(f"--need-from: trace {str(path)!r} does not exist; give the JSONL trace "
                          "of an earlier run (one written by stageload's Sampler, e.g. with "
                          "--trace FILE)")
    try:
        return peak_from_trace(path)
    except TraceError as exc:
        raise ConfigError(f"--need-from: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--need-from: cannot read {str(path)!r}: "
                          f"{exc.strerror or exc}") from None


def _type(parser_fn, option):
    """Wrap a parser so argparse reports its ValueError message (not a bare 'invalid value')."""

    def convert(text):
        try:
            return parser_fn(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = option
    return convert


def _amount(text):
    return parse_amount(text, require_unit=True)


def _size(text):
    return parse_size(text, require_unit=True)


def _amount_or_off(text):
    return None if is_off(text) else _amount(text)


def _size_or_off(text):
    return None if is_off(text) else _size(text)


def _pressure(text):
    return pressure_mod.AUTO if str(text).strip().lower() == pressure_mod.AUTO \
        else pressure_mod.parse_level(text)


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a number of seconds >= 0; write e.g. 0.5 or 180")
    return value


def _seconds_or_off(text):
    return None if is_off(text) else _seconds(text)


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{text!r} is not a whole number >= 1; write e.g. 3")
    return value


def add_guard_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add the guard's options to ``parser`` (in their own argument group) and return the group.

    Destinations are prefixed ``guard_`` so they never clash with the host command's own
    options; :meth:`GuardConfig.from_args` reads them back.
    """
    d = GuardConfig.__dataclass_fields__
    group = parser.add_argument_group("guard",
                                      "start only when there is room; stop before swap runs away")

    def option(flag: str, *, parse=None, **kwargs) -> None:
        """One option: destination ``guard_`` + its name, ``parse`` wrapped by ``_type`` so a
        bad value is reported under the flag's name."""
        if parse is not None:
            kwargs["type"] = _type(parse, flag)
        group.add_argument(flag, dest="guard_" + flag[2:].replace("-", "_"), **kwargs)

    option("--wait-free", metavar="AMOUNT", parse=_amount,
           help="start only when available memory is at least this: percent of total (40%%) "
                "or a size (18G)")
    option("--need", metavar="SIZE", parse=_size,
           help="predicted peak of the command (e.g. 30G): start only when available memory "
                "covers it plus the --kill-free floor")
    option("--need-from", metavar="TRACE",
           help="like --need, with the peak footprint of an earlier run's JSONL trace")
    option("--busy", metavar="REGEX", action="append", default=[],
           help="regular expression matched against whole command lines of other processes; "
                "repeatable. Start only after none has been seen for --quiet-for seconds")
    option("--quiet-for", metavar="SECONDS", default=d["quiet_for"].default, parse=_seconds,
           help="seconds without any --busy match before starting (default: %(default)s); "
                "counted from the first poll that no longer sees one, or from the guard's "
                "start when none was seen, so a gap between two jobs of a chain is not quiet")
    option("--swap-limit", metavar="SIZE", parse=_size,
           help="do not start while swap in use is above this size")
    option("--start-timeout", metavar="SECONDS", parse=_seconds_or_off,
           help="give up waiting after this many seconds (exit 4); default: wait for ever")
    option("--swap-budget", metavar="SIZE", default=DEFAULT_SWAP_BUDGET, parse=_size_or_off,
           help="stop the command when swap in use grows more than this over its value at "
                "start (default: 8G; 'off' disables)")
    option("--kill-free", metavar="AMOUNT", default=DEFAULT_KILL_FREE, parse=_amount_or_off,
           help="stop the command when available memory stays under this (percent or size) "
                "for --kill-samples consecutive samples (default: 10%%; 'off' disables)")
    option("--kill-samples", metavar="N", default=DEFAULT_KILL_SAMPLES, parse=_positive_int,
           help="consecutive samples under --kill-free (or at --stop-at-pressure) before "
                "stopping (default: %(default)s)")
    option("--wait-pressure", metavar="LEVEL", default=pressure_mod.AUTO, parse=_pressure,
           help="macOS: do not start while memory pressure is at this level or worse (warn, "
                "critical, off; default: warn on macOS, off elsewhere)")
    option("--stop-at-pressure", metavar="LEVEL", default=pressure_mod.AUTO, parse=_pressure,
           help="macOS: stop the command when memory pressure reaches this level for "
                "--kill-samples consecutive samples (warn, critical, off; default: critical on "
                "macOS, off elsewhere)")
    option("--poll", metavar="SECONDS", default=DEFAULT_POLL, parse=_seconds,
           help="seconds between readings (default: %(default)s)")
    option("--grace", metavar="SECONDS", default=DEFAULT_GRACE, parse=_seconds,
           help="seconds between SIGTERM and SIGKILL when stopping (default: %(default)s)")
    option("--log", metavar="FILE", help="append every decision as one JSON line to FILE")
    return group
