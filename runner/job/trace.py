"""The job's JSONL trace as the supervisor writes it (``JobTrace``) and reads it back for the
``result`` event's summary (``summarize_trace``). The line format is ``stageload.trace``'s
(docs/ARCHITECTURE.md, "Trace")."""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from meshfacts.errors import RunnerError
from runner.protocol import encode_line
from stageload.summary import summarize
from stageload.trace import TraceWriter, iter_lines


def log(text: str) -> None:
    """One human line on stderr, ``runner: TEXT`` (the protocol owns stdout); a closed stderr
    is ignored."""
    try:
        print(f"runner: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


class JobTrace:
    """The job's trace file: a callable sink taking one JSON-serialisable dict per line.

    Lines given before :meth:`open` are kept in memory and written when it opens (the
    ``hello`` comes before the output is validated). A write failure (disk full) disables the
    trace with one line on stderr instead of failing the job; ``error`` then says why.
    Thread-safe.
    """

    def __init__(self):
        self.writer = None
        self.path: Path | None = None
        self.pending: list[dict] = []
        self.error: str | None = None
        self._lock = threading.Lock()

    def open(self, path: Path, replace: bool = False) -> None:
        """Create the trace at ``path`` and write the buffered lines. An existing file is
        removed first only when ``replace`` (``check_trace`` vetted it); otherwise
        ``TraceWriter`` refuses it (``O_EXCL``), so a runner that lost the race for the same
        path fails with ``output_exists`` instead of replacing the winner's trace. Raises
        ``RunnerError('output_exists' | 'output_unwritable')``."""
        try:
            if replace and path.exists():
                path.unlink()  # an earlier run's trace, vetted by check_trace
            self.writer = TraceWriter(path)
        except FileExistsError:
            raise RunnerError("output_exists", f"The trace {path} appeared meanwhile (another "
                              "runner on the same output?); it was left untouched.",
                              "Wait for that job, or choose another output name or "
                              "--trace.") from None
        except OSError as exc:
            raise RunnerError("output_unwritable", f"Cannot create the trace {path} "
                              f"({exc.strerror or exc}).") from None
        self.path = path
        for obj in self.pending:
            self(obj)
        self.pending = []

    @property
    def is_open(self) -> bool:
        """True while lines go to the file (opened and no write failure yet)."""
        return self.writer is not None

    def __call__(self, obj: dict) -> None:
        with self._lock:
            if self.writer is None:
                if self.error is None:
                    self.pending.append(obj)
                return
            try:
                try:
                    self.writer(obj)
                except UnicodeEncodeError:  # lone surrogates from a non-UTF-8 locale's argv
                    self.writer(json.loads(encode_line(obj).decode("utf-8")))
            except (OSError, ValueError) as exc:
                self.error = f"trace writing stopped: {exc}"
                log(self.error)
                try:
                    self.writer.close()
                except OSError:
                    pass
                self.writer = None

    def close(self) -> None:
        """Close the file (lines already written stay written); idempotent."""
        with self._lock:
            if self.writer is not None:
                self.writer.close()
                self.writer = None


def summarize_trace(path: Path | None) -> dict | None:
    """``stageload.summary.summarize`` over the trace at ``path`` (a JSON-serialisable dict,
    bytes and seconds), or None when ``path`` is None or the trace cannot be summarised (the
    reason goes to stderr: a summary problem must not fail a finished job)."""
    if path is None:
        return None

    try:
        return summarize(iter_lines(path), source=str(path))  # streamed: bounded memory
    except Exception as exc:
        log(f"could not summarise {path}: {type(exc).__name__}: {exc}")
        return None
