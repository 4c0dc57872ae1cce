"""Sizes and thresholds as people type them (``18G``, ``40%``) and as logs show them (``8.3 GB``).

Sizes use binary multiples throughout: ``K`` = 1024 bytes, ``M`` = 1024², ``G`` = 1024³,
``T`` = 1024⁴, with or without a trailing ``B``/``iB`` (``18G``, ``18GB`` and ``18GiB`` are the
same 19 327 352 832 bytes). That is how ``free -g``, Docker's ``--memory 18g`` and Activity
Monitor count memory. Human-readable output uses the same multiples and labels them with their
IEC names, ``GiB``/``MiB`` (``stageload summary`` prints decimal GB = 10⁹ bytes; the distinct
labels keep one peak from looking like two different figures).

On the command line a size must carry its unit (``18G``, ``512M``, ``1048576B``; only ``0`` may
stand alone): a bare ``40`` meant 40 bytes, which is never what a person typing it wanted.

Written by hand (about 40 lines) because the parsing rules — percent *or* size, binary
multiples, ``off`` — are part of this command's user interface and no dependency of the
project parses them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_MULTIPLIERS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
_OFF_WORDS = {"off", "none", "no"}


def parse_size(text: str, require_unit: bool = False) -> int:
    """Parse a size such as ``18G``, ``512M``, ``1.5GiB`` or ``1048576`` into bytes (int).

    ``require_unit``: refuse a plain number other than 0 (``40``) — the command-line options
    use it, since a bare number is almost always a forgotten unit; ``40B`` is still accepted.
    Raises ``ValueError`` with a message saying what is accepted when ``text`` is not a size.
    """
    match = _SIZE_RE.match(str(text))
    if not match:
        hint = " (a size cannot be negative)" if str(text).strip().startswith("-") else ""
        raise ValueError(
            f"{text!r} is not a size{hint}; write a number with K, M, G or T "
            "(binary multiples) or B for bytes, e.g. 18G or 512M"
        )
    number, unit, suffix = match.groups()
    if require_unit and not unit and not suffix and float(number) != 0:
        raise ValueError(f"{text!r} has no unit; write {number}G, {number}M or {number}B (bytes)")
    return int(float(number) * _MULTIPLIERS[unit.upper()])


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
        raise ValueError(f"{text!r} has no unit (it would mean {raw} bytes); write {raw}% or {raw}G")
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


def format_size(n: int | float | None) -> str:
    """Format bytes for people: ``8.3 GiB``, ``512.0 MiB``, ``0 B``; ``?`` when unknown (None).

    Binary multiples (1 GiB = 1024³ bytes), like the parser, labelled with their IEC names.
    """
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    if value < 1024:
        return f"{sign}{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024.0
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.1f} {unit}"
    raise AssertionError("unreachable")


def format_percent(part: int | None, total: int | None) -> str:
    """``part`` as a whole percent of ``total`` (``7 %``), or ``?`` when either is unknown."""
    if part is None or not total:
        return "?"
    return f"{100.0 * part / total:.0f} %"
