"""Memory thresholds as people type them: a percent of total memory (``40%``) or a size (``18G``).

The guard's options (``--wait-free``, ``--kill-free``, ...) take an :class:`Amount`; the size
rules themselves (binary multiples, units required on the command line) are
:func:`meshfacts.units.parse_size`'s, and every threshold prints with
:func:`meshfacts.units.format_size` (``GiB``/``MiB``, 1 GiB = 1024³ bytes).

Written by hand (about 40 lines) because the rules — percent *or* size, ``off`` — are part of
this command's user interface and no dependency of the project parses them.
"""
from __future__ import annotations

from dataclasses import dataclass

from meshfacts.units import format_size, parse_size

_OFF_WORDS = {"off", "none", "no"}


@dataclass(frozen=True)
class Amount:
    """A memory threshold given either as a percent of total memory or as absolute bytes.

    Exactly one of ``percent`` (0..100, float) and ``bytes`` (int) is set.
    """

    percent: float | None = None
    bytes: int | None = None

    def resolve(self, total: int | None) -> int | None:
        """Return the threshold in bytes for a machine with ``total`` bytes of memory.

        A percent threshold needs ``total``; when ``total`` is None (unreadable) the result is
        None, which callers must treat as "unknown", never as "fine".
        """
        if self.bytes is not None:
            return self.bytes
        if total is None:
            return None
        return int(total * self.percent / 100.0)

    def __str__(self) -> str:
        if self.percent is not None:
            return f"{self.percent:g} %"
        return format_size(self.bytes)


def parse_amount(text: str, require_unit: bool = False) -> Amount:
    """Parse ``40%`` (percent of total memory) or a size such as ``18G`` into an :class:`Amount`.

    ``require_unit``: refuse a plain number other than 0 (``40`` would be 40 bytes; the person
    almost surely meant 40 % or 40 GiB). Raises ``ValueError`` when the text is neither, has no
    unit when one is required, or the percent is outside 0..100.
    """
    raw = str(text).strip()
    if raw.endswith("%"):
        try:
            percent = float(raw[:-1])
        except ValueError:
            raise ValueError(f"{text!r} is not a percent; write e.g. 40%") from None
        if not 0.0 <= percent <= 100.0:
            raise ValueError(f"{text!r}: a percent must be between 0% and 100%")
        return Amount(percent=percent)
    try:
        number = float(raw)
    except ValueError:
        number = None
    if require_unit and number is not None and number != 0:
        raise ValueError(f"{text!r} has no unit (it would mean {raw} bytes); write {raw}% or "
                         f"{raw}G")
    try:
        return Amount(bytes=parse_size(raw))
    except ValueError:
        hint = "; it cannot be negative" if raw.startswith("-") else ""
        raise ValueError(
            f"{text!r} is neither a percent (40%) nor a size (18G, 512M, 1024B){hint}"
        ) from None


def is_off(text: str) -> bool:
    """True when an option value says the check is switched off (``off``, ``none``, ``no``)."""
    return str(text).strip().lower() in _OFF_WORDS
