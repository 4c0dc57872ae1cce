"""The two records a job is described by: ``Job`` (what to do) and ``Outcome`` (how it ended)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import backends
from .errors import RunnerError
from .outputs import default_trace_path


@dataclass
class Job:
    """One image → GLB job. Paths as given (made absolute during validation); ``trace`` None
    means ``OUT.trace.jsonl`` next to the output; ``options`` are the backend's own options
    (``dest`` → value); ``seed`` (int), ``texture_size`` (px), ``height_m`` (metres) — each
    None for the backend's own default."""

    image: Path
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

    def resolved_trace(self) -> Path:
        """The trace path this job will write (absolute)."""
        out = Path(self.output).expanduser().absolute()
        return Path(self.trace).expanduser().absolute() if self.trace else default_trace_path(out)


@dataclass
class Outcome:
    """How a job ended. ``final`` is the ``result`` or ``error`` event (already in the trace,
    not yet on stdout); ``peak`` is the peak footprint in bytes (None if never sampled);
    ``seconds`` wall time of the job."""

    ok: bool
    final: dict
    exit_code: int
    output: str | None
    trace: str | None
    seconds: float
    peak: int | None
    error: RunnerError | None = None
