"""The records a job is described by: ``Job`` (what to do, as the person asked), ``WorkerJob``
(what one worker process is given, serialised to JSON on its command line) and ``Outcome``
(how the job ended)."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from meshfacts import options as options_table
from meshfacts.errors import RunnerError
from meshfacts.job_options import JobOptions
from runner.job.outputs import default_trace_path


def default_options() -> JobOptions:
    """The default backend's options with every default (a job made without options)."""
    return JobOptions.parse(options_table.get("backend").default, {})


@dataclass
class Job:
    """One job → GLB. ``input``: what it starts from (``runner.job.inputs.ImageInput`` or
    ``AssetInput``: each checks itself and makes its worker job). Paths as given (made
    absolute during validation); ``trace`` None means ``OUT.trace.jsonl`` next to the output;
    ``options``: the job's options, parsed once where they entered
    (``meshfacts.job_options.JobOptions``: the backend, seed, texture size, the backend's
    own options; ``backend`` None for ``runner export``)."""

    input: Any
    output: Path
    options: JobOptions = field(default_factory=default_options)
    trace: Path | None = None
    overwrite: bool = False
    replace_trace: bool | None = None
    """Replace an existing trace of an earlier run (None: the same as ``overwrite``)."""

    @property
    def backend(self) -> str | None:
        """The job's backend (None: ``runner export``, which runs none)."""
        return self.options.backend

    @property
    def stall_timeout(self) -> float | None:
        """Seconds a stalled worker may stay stalled before the job is stopped as ``stalled``
        (``--stall-timeout``; None: never, ``runner.job.stall``)."""
        return self.options.stall_timeout

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

    ``image`` (absolute path of the input image; None for an export process, whose input is the
    hand-over), ``output`` (the partial GLB path the process writes), ``options`` (the job's
    ``JobOptions``; its ``backend`` None for ``runner export``, which runs none), ``mode``
    (one of ``WORKER_MODES``), ``handover`` (the hand-over file's path: required for ``model``
    and ``export``, absent for ``whole``), ``export`` (the name of the export step that turns
    the hand-over into the GLB, ``runner.job.export_step``: decided once, by the backend, when
    the job was made; None for ``whole``), ``stages`` (an export process that enters its
    ``export`` stage itself: the plan it belongs to; None when the supervisor entered it).
    Raises ``ValueError`` naming the field for anything else: the record crosses a process
    boundary and is checked where it is made and where it enters the worker.
    """

    image: str | None
    output: str
    options: JobOptions = field(default_factory=default_options)
    mode: str = "whole"
    handover: str | None = None
    export: str | None = None
    stages: list | None = None
    probed: dict | None = None
    """What the supervisor's probe learnt about the image (``runner.images.reading.ImageInfo`` as a
    dict): the worker then takes the decoded pixels from its stdin (``inputs.read_pixels``)
    instead of decoding the file again. None: the worker decodes ``image`` itself."""

    @property
    def backend(self) -> str | None:
        """The job's backend (None: an export process of ``runner export``)."""
        return self.options.backend

    def __post_init__(self):
        if not isinstance(self.options, JobOptions):
            raise ValueError("worker job: options must be the job's JobOptions")
        if not isinstance(self.output, str) or not self.output:
            raise ValueError("worker job: output must be a non-empty string")
        if self.mode not in WORKER_MODES:
            raise ValueError(f"worker job: mode {self.mode!r} is not one of "
                             f"{', '.join(WORKER_MODES)}")
        if self.mode != "export" and (not isinstance(self.image, str) or not self.image):
            raise ValueError("worker job: image must be a non-empty string")
        if self.mode != "export" and self.backend is None:
            raise ValueError("worker job: a worker that generates needs a backend")
        if (self.mode == "whole") != (self.handover is None):
            raise ValueError(f"worker job: mode {self.mode!r} "
                             + ("takes no handover" if self.mode == "whole"
                                else "needs a handover path"))
        if self.handover is not None and (not isinstance(self.handover, str)
                                          or not self.handover):
            raise ValueError("worker job: handover must be a non-empty string")
        if (self.mode == "whole") != (self.export is None) or \
                (self.export is not None and not isinstance(self.export, str)):
            raise ValueError(f"worker job: export (the export step's name) is "
                             f"{'absent' if self.mode == 'whole' else 'required'} in mode "
                             f"{self.mode!r}")
        if self.stages is not None and (self.mode != "export" or not isinstance(self.stages, list)
                                        or "export" not in self.stages):
            raise ValueError("worker job: stages (a plan with an export stage) belong to an "
                             "export process")
        if self.probed is not None and (self.mode == "export" or not _image_size(self.probed)):
            raise ValueError("worker job: probed must be an image's facts with its width and "
                             "height, for a worker that generates")

    def to_json(self) -> str:
        """The record as one JSON object (the worker's ``--job``)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        """Parse :meth:`to_json`'s output. Raises ``ValueError`` for text that is not a JSON
        object of this record's fields (an unknown or missing field is named, the options are
        checked again: ``JobOptions.from_dict``)."""
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
        missing = [name for name in ("image", "output", "options") if name not in obj]
        if missing:
            raise ValueError(f"worker job: missing field(s) {', '.join(missing)}")
        return cls(**{**obj, "options": JobOptions.from_dict(obj["options"])})


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
