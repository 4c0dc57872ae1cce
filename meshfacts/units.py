"""Sizes as people type them (``18G``, ``512M``) and as people read them (``8.3 GiB``).

The one size parser and the one byte formatter of the project: ``python -m stageload guard``,
``stageload summary`` / ``plot``, the runner's ``--keep-resident`` and its messages, the
benchmark report and the Blender add-on all use these two functions, so one peak never reads as
two different figures. Standard library only (no torch): the add-on imports this module.

Binary multiples throughout: ``K`` = 1024 bytes, ``M`` = 1024², ``G`` = 1024³, ``T`` = 1024⁴,
with or without a trailing ``B``/``iB`` and in either case (``18G``, ``18gb`` and ``18GiB`` are
the same 19 327 352 832 bytes). That is how ``free -g``, Docker's ``--memory 18g`` and macOS
Activity Monitor count memory. Output uses the same multiples and labels them with their IEC
names, ``KiB``/``MiB``/``GiB``/``TiB``, so a reader can tell them from decimal GB (10⁹ bytes).

Written by hand (about 40 lines) because the rules — binary multiples, a unit required where a
bare number is a likely mistake, a clear message for everything else — are part of the commands'
user interface, and no dependency of the project parses sizes.

Example::

    >>> parse_size("1.5G")
    1610612736
    >>> format_size(1610612736)
    '1.5 GiB'
"""
from __future__ import annotations

import math
import re
from decimal import Decimal

#: bytes per multiple, by the letter people type.
MULTIPLIERS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
#: the largest size accepted (bytes): what a signed 64-bit counter holds, 8 EiB — far beyond any
#: memory, so a bigger figure is a typing mistake, and JSON readers in other languages keep it
#: exact.
MAX_SIZE = 2**63 - 1
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
_LABELS = ("KiB", "MiB", "GiB", "TiB")


def parse_size(text: str | int, *, require_unit: bool = False) -> int:
    """Bytes (int) from a size such as ``18G``, ``512M``, ``1.5GiB``, ``40B`` or ``1048576``.

    ``text``: the text a person typed, or an int (bytes, returned as it is when in range).
    ``require_unit``: refuse a plain number other than 0 (``40``): the command-line options whose
    bare number is almost always a forgotten unit use it; ``40B`` is still accepted.
    Raises ``ValueError`` whose message says what to write when ``text`` is not a size, is
    negative, has no unit when one is required, or exceeds :data:`MAX_SIZE`.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"{text} is not a size (a size cannot be negative)")
        size = text
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            hint = " (a size cannot be negative)" if str(text).strip().startswith("-") else ""
            raise ValueError(f"{str(text)!r} is not a size{hint}; write a number with K, M, G or "
                             "T (binary multiples) or B for bytes, e.g. 18G or 512M")
        digits, unit, suffix = match.groups()
        if require_unit and not unit and not suffix and Decimal(digits) != 0:
            raise ValueError(f"{str(text)!r} has no unit; write {digits}G, {digits}M or {digits}B "
                             f"(bytes)")
        # Decimal: exact for any number of digits (a float would turn 400 nines into inf)
        size = int(Decimal(digits) * MULTIPLIERS[unit.upper()])
    if size > MAX_SIZE:
        raise ValueError(f"{str(text)[:40]!r} is larger than any memory (at most 8 EiB); "
                         "check the number and its unit")
    return size


def format_size(n: int | float | None, unknown: str = "?", *, unit: str | None = None,
                digits: int = 1) -> str:
    """Bytes for people: ``8.3 GiB``, ``512.0 MiB``, ``0 B``, ``-2.0 MiB``; ``unknown`` for None.

    Binary multiples (1 GiB = 1024³ bytes), like :func:`parse_size`, with their IEC labels and
    ``digits`` decimals (1 by default). The unit is the largest that keeps the number under
    1024, unless ``unit`` (``"KiB"``, ``"MiB"``, ``"GiB"``, ``"TiB"``) fixes it — for a table
    whose column must compare at a glance (``format_size(n, unit="GiB", digits=2)`` →
    ``0.30 GiB``). NaN and infinities (never a real size) also give ``unknown``. Raises
    ``ValueError`` for any other ``unit``.
    """
    if unit is not None:
        if unit not in _LABELS:
            raise ValueError(f"unit {unit!r} is not one of {', '.join(_LABELS)}")
        if n is None or not math.isfinite(n):
            return unknown
        return f"{n / 1024 ** (_LABELS.index(unit) + 1):.{digits}f} {unit}"
    if n is None or not math.isfinite(n):
        return unknown
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    if value < 1024:
        return f"{sign}{int(value)} B"
    for label in _LABELS:
        value /= 1024.0
        if round(value, digits) < 1024 or label == _LABELS[-1]:
            break
    return f"{sign}{value:.{digits}f} {label}"


def format_percent(part: int | None, total: int | None) -> str:
    """``part`` as a whole percent of ``total`` (``7 %``), or ``?`` when either is unknown."""
    if part is None or not total:
        return "?"
    return f"{100.0 * part / total:.0f} %"
