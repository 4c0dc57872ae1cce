"""The admission wait's pure parts, testable on recorded figures without processes, locks or
sleeps; ``Guard.wait_for_admission`` is the short loop around them (as earlyoom keeps its
decision apart from its poll loop):

- :func:`decide`: may the command start, on one poll's readings less what other admitted jobs
  still hold (their reservations, :mod:`stageload.guard.reservations`);
- :class:`WaitClock`: the wait's deadline, the quiet time of ``--busy`` and the pause before
  the next poll;
- :class:`WaitingLog`: when a ``waiting`` decision is logged.

Times are ``time.monotonic()`` seconds, passed in; sizes are bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .admission import Verdict, decide_admission
from .config import GuardConfig
from .reservations import explained, with_held

WAITING_REPEAT = 10.0
"""While the verdict does not change, repeat the "waiting" decision this often (seconds)."""

QUIET_MARGIN = 0.01
"""Seconds added to the pause that ends at the quiet time, so the next poll is past it."""


@dataclass(frozen=True)
class Decision:
    """One admission decision: the ``verdict`` and the ``readings`` as it saw them (with
    ``available`` less ``held``, and ``reserved`` / ``reserved_by`` /
    ``available_unreserved`` when other jobs held some), ``held`` the ``(bytes, count)`` of
    the others' reservations it was given."""

    verdict: Verdict
    readings: dict
    held: tuple[int, int] = (0, 0)
    busy: list[str] = field(default_factory=list)


def decide(config: GuardConfig, readings: dict, *, held: tuple[int, int] = (0, 0),
           busy_seen: list[str] = (), quiet_seconds: float | None = None) -> Decision:
    """Whether the command may start: ``admission.decide_admission`` on ``readings`` (see
    :mod:`stageload.guard.readings`) less ``held`` — ``(bytes, count)`` that other admitted
    jobs' reservations still hold, counted only when ``config.need`` is set — with a
    refusal's reason naming those reservations. ``busy_seen`` / ``quiet_seconds``: as
    ``decide_admission`` takes them."""
    seen = with_held(readings, *held) if config.need is not None else readings
    verdict = decide_admission(config, seen, busy_seen=list(busy_seen),
                               quiet_seconds=quiet_seconds)
    return Decision(explained(verdict, seen), seen, tuple(held), list(busy_seen))


class WaitClock:
    """The admission wait's time, from ``began``: the deadline (``config.start_timeout``
    seconds later, or none), the quiet time of ``--busy`` and the pause before the next poll.

    Quiet time is counted from the first poll at which no busy process is seen any more (or
    from ``began`` when none was ever seen), so it is never shorter than ``quiet_for`` after
    the last busy process really ended, and a gap between two jobs of a chain that is shorter
    than ``quiet_for`` does not let the command in.
    """

    def __init__(self, config: GuardConfig, began: float):
        self.config = config
        self.deadline = None if config.start_timeout is None else began + config.start_timeout
        self.quiet_since = began
        self.busy_before = False
        self.quiet: float | None = None

    def observe(self, now: float, busy: list[str]) -> float | None:
        """Note this poll's busy processes (``busy``, may be empty) at ``now``; returns the
        quiet seconds (None without ``--busy``), also kept in ``quiet``."""
        if busy:
            self.busy_before = True
        elif self.busy_before:
            self.quiet_since, self.busy_before = now, False
        self.quiet = (now - self.quiet_since) if self.config.busy else None
        return self.quiet

    def expired(self, now: float) -> bool:
        """True once the deadline has passed."""
        return self.deadline is not None and now >= self.deadline

    def pause(self, now: float, busy: list[str]) -> float:
        """Seconds to sleep before the next poll: ``config.poll``, cut to end at the deadline
        and, while nothing is busy, just past the end of the quiet time."""
        config, quiet = self.config, self.quiet
        pause = config.poll
        if self.deadline is not None:
            pause = min(pause, self.deadline - now)
        if quiet is not None and not busy and quiet < config.quiet_for:
            pause = min(pause, config.quiet_for - quiet + QUIET_MARGIN)
        return pause


class WaitingLog:
    """When the wait logs a ``waiting`` decision: at the first refusal, whenever the blocking
    conditions change, and every ``repeat`` seconds while they do not."""

    def __init__(self, repeat: float = WAITING_REPEAT):
        self.repeat = repeat
        self.last_blocking: tuple | None = None
        self.last_logged = float("-inf")

    def due(self, blocking: tuple, now: float) -> bool:
        """Whether a refusal blocked by ``blocking`` at ``now`` is logged (and noted if so)."""
        if blocking != self.last_blocking or now - self.last_logged >= self.repeat:
            self.last_blocking, self.last_logged = blocking, now
            return True
        return False
