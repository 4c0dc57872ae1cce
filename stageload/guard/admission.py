"""Admission: may the command start now? A pure decision from readings, so it can be tested on
recorded figures; :mod:`stageload.guard.busy` and :mod:`stageload.guard.readings` gather them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from meshfacts.units import format_percent, format_size

from . import pressure as pressure_mod
from .amount import Amount
from .config import GuardConfig


@dataclass(frozen=True)
class Verdict:
    """The outcome of one admission check.

    ``ok`` is True when every configured condition holds. ``blocking`` names the conditions
    that do not (``unknown``, ``wait_free``, ``need``, ``pressure``, ``busy``, ``quiet``,
    ``swap_limit``) in
    a stable order, so a caller can log only when the set changes; ``reason`` says the same for
    people (``available 31 % < 40 %``), ``; ``-joined. ``thresholds``: for each blocking memory
    condition (``wait_free``, ``need``), what available memory must reach, for programs:
    ``{"required": bytes, "percent": the --wait-free percent of total or None}`` (the guard's
    ``waiting``/``timeout`` events carry it; readers never parse ``reason``).
    """

    ok: bool
    reason: str
    blocking: tuple[str, ...] = field(default=())
    thresholds: dict = field(default_factory=dict)


def _compare_text(available: int, threshold: int, amount: Amount, total: int | None) -> str:
    if amount.percent is not None:
        return f"{format_percent(available, total)} < {amount}"
    return f"{format_size(available)} < {format_size(threshold)}"


def needed_readings(config: GuardConfig) -> list[str]:
    """Which readings the configured checks (admission *and* budget) rely on.

    Admission refuses to start while any of them is unknown: a guard that starts a command it
    could not then stop would give false safety.
    """
    needed = []
    amounts = [a for a in (config.wait_free, config.kill_free) if a is not None]
    if amounts or config.need is not None:
        needed.append("available")
    if any(a.percent is not None for a in amounts):
        needed.append("total")
    if config.swap_limit is not None or config.swap_budget is not None:
        needed.append("swap")
    if config.wait_pressure is not None or config.stop_at_pressure is not None:
        needed.append("pressure")
    return needed


def decide_admission(config: GuardConfig, readings: dict, *, busy_seen: list[str] = (),
                     quiet_seconds: float | None = None) -> Verdict:
    """Decide whether the command may start.

    ``readings``: see :mod:`stageload.guard.readings` (bytes; None = unknown). ``busy_seen``:
    descriptions of processes matching ``--busy`` found at this poll. ``quiet_seconds``: seconds
    since a busy process was last seen, or since the guard began watching if none was seen yet
    (None when no ``--busy`` pattern is configured).
    """
    reasons: list[tuple[str, str]] = []
    thresholds: dict[str, dict] = {}
    unknown = [name for name in needed_readings(config) if readings.get(name) is None]
    if unknown:
        reasons.append(("unknown", f"{' and '.join(unknown)} cannot be read (unknown is not fine)"))
    available = readings.get("available")
    total = readings.get("total")
    swap = readings.get("swap")

    if config.wait_free is not None and available is not None:
        threshold = config.wait_free.resolve(total)
        if threshold is not None and available < threshold:
            reasons.append(("wait_free",
                            "available " + _compare_text(available, threshold, config.wait_free,
                                                         total)))
            thresholds["wait_free"] = {"required": int(threshold),
                                       "percent": config.wait_free.percent}

    if config.need is not None and available is not None:
        floor = config.kill_free.resolve(total) if config.kill_free is not None else 0
        if floor is not None:
            required = config.need + floor
            if available < required:
                text = f"available {format_size(available)} < need {format_size(config.need)}"
                if floor:
                    text += f" + kill-free floor {format_size(floor)}"
                reasons.append(("need", text))
                thresholds["need"] = {"required": int(required), "percent": None}

    blocked = pressure_mod.admission_block(config.wait_pressure, readings.get("pressure"))
    if blocked:
        reasons.append(("pressure", blocked))

    if config.busy:
        if busy_seen:
            shown = ", ".join(list(busy_seen)[:3]) + (" …" if len(busy_seen) > 3 else "")
            reasons.append(("busy", f"busy: {shown}"))
        elif quiet_seconds is not None and quiet_seconds < config.quiet_for:
            reasons.append(("quiet", f"quiet for {int(quiet_seconds)} s of {config.quiet_for:g} s"))

    if config.swap_limit is not None and swap is not None and swap > config.swap_limit:
        reasons.append(("swap_limit",
                        f"swap {format_size(swap)} > limit {format_size(config.swap_limit)}"))

    if reasons:
        return Verdict(False, "; ".join(text for _, text in reasons),
                       tuple(key for key, _ in reasons), thresholds)
    return Verdict(True, _admitted_text(config, readings))


def _admitted_text(config: GuardConfig, readings: dict) -> str:
    """The conditions that held; the figures themselves only where a condition is a state
    (pressure), since the decision's line and event carry the readings once."""
    parts = []
    if config.wait_free is not None:
        parts.append(f"available >= {config.wait_free}")
    if config.need is not None:
        parts.append(f"available covers need {format_size(config.need)}")
    if config.busy:
        parts.append(f"no busy process for {config.quiet_for:g} s")
    if config.swap_limit is not None:
        parts.append(f"swap <= {format_size(config.swap_limit)}")
    if config.wait_pressure is not None:
        parts.append(f"memory pressure {pressure_mod.level_name(readings.get('pressure'))}")
    return "room to start: " + (", ".join(parts) if parts else "no conditions set")
