"""The records a job is described by: ``Job`` (what to do, as the person asked), ``WorkerJob``
(what one worker process is given, serialised to JSON on its command line) and ``Outcome``
(how the job ended)."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from meshfacts.errors import RunnerError
from runner import backends
from runner.job.outputs import default_trace_path


@dataclass
class Job:
    """One job → GLB. ``input``: what it starts from (``runner.job.inputs.ImageInput`` or
    ``AssetInput``: each checks itself and makes its worker job). Paths as given (made
    absolute during validation); ``trace`` None means ``OUT.trace.jsonl`` next to the output;
    ``options`` are the backend's own options (``dest`` → value); ``seed`` (int),
    ``texture_size`` (px), ``height_m`` (metres) — each None for the backend's own default."""

    input: Any
    output: Path
    backend: str = backends.DEFAULT
    trace: Path | None = None
    seed: int | None = None
    texture_size: int | None = None
    height_m: float | None = None
    overwrite: bool = False
    options: dict = field(default_factory=dict)
    replace_trace: bool | None = None
    """Replace an existing trace of an earlier run (None: the same as ``overwrite``)."""
    stall_timeout: float | None = None
    """Seconds a stalled worker may stay stalled before the job is stopped as ``stalled``
    (``--stall-timeout``; None: never, ``runner.job.stall``)."""

    def resolved_trace(self) -> Path:
        """The trace path this job will write (absolute)."""
        out = Path(self.output).expanduser().absolute()
        return Path(self.trace).expanduser().absolute() if self.trace else default_trace_path(out)


def _image_size(facts) -> bool:
    """True when ``facts`` is a dict with a positive integer ``width`` and ``height``."""
    return isinstance(facts, dict) and all(
        isinstance(facts.get(k), int) and not isinstance(facts.get(k), bool) and facts[k] > 0
        for k in ("width", "height"))


WORKER_MODES = ("whole", "model", "export")
"""What a worker process does: ``whole`` (generate and export the GLB), ``model`` (generate,
then write the decoded asset to the hand-over file for an export process), ``export`` (the
export process: from the hand-over file to the GLB)."""


@dataclass(frozen=True)
class WorkerJob:
    """The job one worker process (``python -m runner.worker.run --job JSON``) runs.

    ``backend`` (registry name; None for an export process of the bounded engine, which needs none),
    ``image`` (absolute path of the input image; None for an export process, whose input is the
    hand-over), ``output`` (the partial GLB path the process writes), ``seed`` / ``texture_size``
    (px, int) / ``height_m`` (metres, float) — each None for the backend's default — ``options``
    (the backend's own options, ``dest`` → JSON value), ``mode`` (one of ``WORKER_MODES``) and
    ``handover`` (the hand-over file's path: required for ``model`` and ``export``, absent for
    ``whole``).
    Raises ``ValueError`` naming the field for anything else: the record crosses a process
    boundary and is checked where it is made and where it enters the worker.
    """

    backend: str | None
    image: str | None
    output: str
    seed: int | None = None
    texture_size: int | None = None
    height_m: float | None = None
    options: dict = field(default_factory=dict)
    mode: str = "whole"
    handover: str | None = None
    probed: dict | None = None
    """What the supervisor's probe learnt about the image (``runner.images.reading.ImageInfo`` as a
    dict): the worker then takes the decoded pixels from its stdin (``inputs.read_pixels``)
    instead of decoding the file again. None: the worker decodes ``image`` itself."""

    def __post_init__(self):
        for name in ("backend", "image", "output"):
            value = getattr(self, name)
            if value is None and name != "output" and self.mode == "export":
                continue  # the export process starts from its hand-over, with the engine
            if not isinstance(value, str) or not value:
                raise ValueError(f"worker job: {name} must be a non-empty string")
        for name in ("seed", "texture_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"worker job: {name} must be an integer or null")
        height = self.height_m
        if height is not None and (isinstance(height, bool)
                                   or not isinstance(height, (int, float))):
            raise ValueError("worker job: height_m must be a number or null")
        if not isinstance(self.options, dict) or not all(isinstance(k, str)
                                                         for k in self.options):
            raise ValueError("worker job: options must be an object with string keys")
        if self.mode not in WORKER_MODES:
            raise ValueError(f"worker job: mode {self.mode!r} is not one of "
                             f"{', '.join(WORKER_MODES)}")
        if (self.mode == "whole") != (self.handover is None):
            raise ValueError(f"worker job: mode {self.mode!r} "
                             + ("takes no handover" if self.mode == "whole"
                                else "needs a handover path"))
        if self.handover is not None and (not isinstance(self.handover, str)
                                          or not self.handover):
            raise ValueError("worker job: handover must be a non-empty string")
        if self.probed is not None and (self.mode == "export" or not _image_size(self.probed)):
            raise ValueError("worker job: probed must be an image's facts with its width and "
                             "height, for a worker that generates")
        if self.backend is None and self.options.get("export_engine") not in (None, "bounded"):
            raise ValueError("worker job: an export without a backend is the bounded engine's")

    def backend_kwargs(self) -> dict:
        """The keyword arguments for the backend's ``generate`` / ``export``: ``options`` plus
        ``seed``, ``texture_size`` (int) and ``height_m`` (float) where given."""
        kwargs = dict(self.options)
        for key, cast in (("seed", int), ("texture_size", int), ("height_m", float)):
            if getattr(self, key) is not None:  # unset: the backend's own default
                kwargs[key] = cast(getattr(self, key))
        return kwargs

    def to_json(self) -> str:
        """The record as one JSON object (the worker's ``--job``)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        """Parse :meth:`to_json`'s output. Raises ``ValueError`` for text that is not a JSON
        object of this record's fields (an unknown or missing field is named)."""
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"worker job: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ValueError("worker job: not a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"worker job: unknown field(s) {', '.join(unknown)}")
        missing = [name for name in ("backend", "image", "output") if name not in obj]
        if missing:
            raise ValueError(f"worker job: missing field(s) {', '.join(missing)}")
        return cls(**obj)


@dataclass
class Outcome:
    """How a job ended. ``final`` is the ``result`` or ``error`` event (already in the trace,
    not yet on stdout); ``peak`` is the peak footprint in bytes (None if never sampled);
    ``seconds`` wall time of the job; ``notes``: the input's notes (conversions applied to the
    image, as in the ``input`` event; empty when the input was never read);
    ``warnings``: the job's ``warning`` events as :func:`warning_record` gives them (a
    fallback the output was made with, advice)."""

    ok: bool
    final: dict
    exit_code: int
    output: str | None
    trace: str | None
    seconds: float
    peak: int | None
    error: RunnerError | None = None
    notes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    """Fields a batch adds to the image's manifest record and ``batch_item`` (a cluster batch:
    ``node``, ``retries``)."""
    warnings: list = field(default_factory=list)


#: Fields of a ``warning`` event kept in the result, the outcome and the batch manifest.
WARNING_FIELDS = ("message", "source", "fallback", "cause", "differs", "model")


def warning_record(event: dict) -> dict:
    """The person-facing fields of a ``warning`` event (those it has of ``WARNING_FIELDS``)."""
    return {k: event[k] for k in WARNING_FIELDS if event.get(k) is not None}


def explain_warning(event: dict) -> None:
    """One stderr line for a ``warning`` event, ``runner: warning: message`` (runner/
    PROTOCOL.md); a closed stderr is ignored."""
    try:
        print(f"runner: warning: {event.get('message')}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass
