"""The options of one job, parsed once into a typed, frozen record: :class:`JobOptions`, made
from the options table (``meshfacts/options.py``) — one field per job option a worker acts on.

Where options enter, they are parsed here and nowhere else: the runner's command line
(``runner/commands``: ``python -m runner``, ``batch``, ``export``) and the worker's job
(``runner.job.records.WorkerJob``, JSON on the worker's command line: :meth:`from_dict`).
Parsing checks every value against the table (kind, range, choices, the backend's own sides,
an option of another backend given) and fills in the one default of each option that applies
to the job's backend; an option that does not apply holds None. Backends, the export step and
the Pixal3D adapter read the fields and never default them again.

Standard library only, like the rest of ``meshfacts``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from . import options as table
from .errors import RunnerError

TYPES = {"choice": str, "int": int, "float": float, "text": str, "path": str, "size": int,
         "switch": bool}
"""The Python type of each option kind's parsed value (a size is bytes)."""

EXPORT_COMMAND = "export"
"""The command whose job has no backend (``python -m runner export``): its options are the
table's ``export`` ones, and ``choices_by`` knows it by this name."""


def job_fields() -> tuple[table.Option, ...]:
    """The table's options that are fields of :class:`JobOptions`: every ``job`` and
    ``backend`` option a single run takes, except ``backend`` itself (its own field)."""
    return tuple(o for o in table.table() if o.group in ("job", "backend") and o.takes("run")
                 and o.name != "backend")


def applies(opt: table.Option, backend: Optional[str]) -> bool:
    """Whether a job of ``backend`` (None: ``runner export``, no backend) takes ``opt``."""
    if backend is None:
        return opt.takes(EXPORT_COMMAND)
    return opt.applies_to(backend)


def default_of(opt: table.Option):
    """``opt``'s one default as a parsed value (a size in bytes; a switch off)."""
    if opt.switch:
        return bool(opt.default)
    return None if opt.default is None else opt.convert(opt.default)


def convert(opt: table.Option, value, backend: Optional[str]):
    """``value`` (text as typed, or a parsed value) checked and converted for a job of
    ``backend``: the table's kind, range and choices, then ``choices_by`` (the pixal3d backend's
    and ``runner export``'s texture sides). Raises ``RunnerError('usage')`` naming the flag."""
    try:
        parsed = opt.convert(value)
    except ValueError as exc:
        raise RunnerError("usage", str(exc)) from None
    allowed = opt.choices_by.get(backend or EXPORT_COMMAND)
    if allowed is not None and parsed not in allowed:
        who = f"the {backend} backend" if backend else "runner export"
        raise RunnerError("usage", f"{opt.flag} {parsed} is not one {who} offers.",
                          f"Choose one of {', '.join(map(str, allowed))}.")
    return parsed


def owners(opt: table.Option) -> list[str]:
    """The backends that take ``opt`` (the table's ``backends``; every one when empty)."""
    return list(opt.backends) or list(table.get("backend").choices)


def _parse(cls, backend: Optional[str], given: Mapping[str, Any]):
    """``JobOptions.parse(backend, given)``: the options of a ``backend`` job (None: ``runner
    export``) from ``given`` (dest → value as typed or parsed; None or a switch's False: not
    given). Raises ``RunnerError('usage')`` naming the flag for a bad value or an option of
    another backend, ``ValueError`` for a name that is no job option (a bug)."""
    if backend is not None and backend not in table.get("backend").choices:
        raise RunnerError("usage", f"--backend {backend!r} is not one of "
                          f"{', '.join(table.get('backend').choices)}.")
    known = {o.dest for o in job_fields()}
    unknown = sorted(set(given) - known - {"backend"})
    if unknown:
        raise ValueError(f"job options: unknown option(s) {', '.join(unknown)}")
    values: dict[str, Any] = {"backend": backend}
    for opt in job_fields():
        raw = given.get(opt.dest)
        mine = applies(opt, backend)
        if raw is None or (opt.switch and raw is False):
            values[opt.dest] = default_of(opt) if mine else None
            continue
        if not mine:
            who = owners(opt)
            raise RunnerError("usage", f"{opt.flag} applies to --backend {' / '.join(who)} "
                              f"only, not to {backend or 'runner export'}.",
                              f"Leave {opt.flag} out, or add --backend {who[0]}.")
        values[opt.dest] = convert(opt, raw, backend)
    return cls(**values)


def _from_dict(cls, data):
    """``JobOptions.from_dict(data)``: the record from its ``to_dict`` form, checked again as
    it enters another process. Raises ``ValueError`` naming the field or the value."""
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError("job options: not an object with string keys")
    missing = sorted({f.name for f in dataclasses.fields(cls)} - set(data))
    if missing:
        raise ValueError(f"job options: missing field(s) {', '.join(missing)}")
    backend = data["backend"]
    if backend is not None and not isinstance(backend, str):
        raise ValueError("job options: backend must be a string or null")
    try:
        return cls.parse(backend, {k: v for k, v in data.items() if k != "backend"})
    except RunnerError as err:
        raise ValueError(f"job options: {err.message}") from None


def _to_dict(self) -> dict:
    """The record as a JSON-ready dict (every field)."""
    return dataclasses.asdict(self)


def _shaping(self) -> dict:
    """The backend and the fields that shape its GLB (the options that apply to it whose
    ``affects_output`` is True): two jobs with equal ones and equal input bytes give the same
    GLB (a batch's resume compares them)."""
    return {"backend": self.backend, **{o.dest: getattr(self, o.dest) for o in job_fields()
                                        if o.affects_output and applies(o, self.backend)}}


def _make_class() -> type:
    """:class:`JobOptions`: ``backend`` then one field per :func:`job_fields` entry, typed by
    its kind (Optional: None where it does not apply to the backend)."""
    fields = [("backend", Optional[str])]
    fields += [(o.dest, Optional[TYPES[o.kind]]) for o in job_fields()]
    doc = ("One job's options, parsed once (frozen): ``backend`` (None: ``runner export``) and "
           + ", ".join(f"``{o.dest}``" for o in job_fields()) + " — each the table's value "
           "type, its default filled in where it applies to the backend, None where it does "
           "not. Make it with ``parse`` or ``from_dict``; both raise for a bad value.")
    return dataclasses.make_dataclass(
        "JobOptions", fields, frozen=True,
        namespace={"parse": classmethod(_parse), "from_dict": classmethod(_from_dict),
                   "to_dict": _to_dict, "shaping": _shaping, "__doc__": doc,
                   "__module__": __name__})


JobOptions = _make_class()
