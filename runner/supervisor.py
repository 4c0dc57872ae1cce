"""The supervisor: one job (image → GLB) run in a worker process under the guard.

This process never imports torch (a test checks ``sys.modules``): it validates the input and
output, asks the guard for admission, starts ``python -m runner.worker`` (same interpreter) in
its own session and process group through ``stageload.guard.Guard``, samples the worker's process
tree from outside with ``stageload.meter.Sampler`` (10 Hz), relays the worker's events, turns
samples into ``memory`` events (4 per second), writes every event and sample to the JSONL trace,
and commits or discards the partial GLB. ``runner/PROTOCOL.md`` defines the events.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import __version__, backends
from .cancel import Cancel, cancel_error
from .errors import KINDS, RunnerError
from .inputs import probe_image
from .outputs import (check_output, check_trace, commit, default_trace_path, discard,
                      failed_runs_trace, sweep_stale_partials, temp_path, trace_conflict)
from .protocol import PROTOCOL_VERSION, encode_line

SAMPLE_INTERVAL = 0.1
"""Seconds between memory samples of the worker's process tree (10 Hz)."""

MEMORY_INTERVAL = 0.25
"""Seconds between ``memory`` events on the protocol stream (4 per second)."""

RUNNER_VERSION = __version__
"""The ``runner`` field of ``hello`` (``runner.__version__``)."""

# Events the worker sends for the supervisor alone; written to the trace, never relayed.
_WORKER_ONLY = {"worker", "worker_done", "error", "probe"}


def log(text: str) -> None:
    """One human line on stderr (the protocol owns stdout)."""
    try:
        print(f"runner: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


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


class MemoryTracker:
    """Turns samples and stage events into ``memory`` events.

    ``level`` of a sample = max(footprint, hwm) — ``hwm`` is the kernel high-water mark since
    the previous sample, so a spike between two samples still counts. ``peak`` = max level of
    the run; ``stage_peak`` = max level since the current stage's ``ready`` event (SPEC §2.1:
    the window begins at ``ready``), None before it. Thread-safe.
    """

    def __init__(self, interval: float = MEMORY_INTERVAL):
        self.interval = interval
        self.peak: int | None = None
        self.stage: str | None = None
        self.stage_peak: int | None = None
        self._window_open = False
        self._last_emit = float("-inf")
        self._lock = threading.Lock()

    def on_event(self, ev: dict) -> None:
        """Follow ``stage`` / ``ready`` events."""
        with self._lock:
            if ev.get("event") == "stage":
                self.stage = ev.get("stage")
                self.stage_peak = None
                self._window_open = False
            elif ev.get("event") == "ready" and ev.get("stage") == self.stage:
                self._window_open = True
                self.stage_peak = None

    def on_sample(self, sample: dict, force: bool = False) -> dict | None:
        """Account one sample; return the fields of a ``memory`` event when one is due."""
        footprint = sample.get("footprint")
        level = max(v for v in (footprint, sample.get("hwm"), 0) if v is not None)
        with self._lock:
            self.peak = level if self.peak is None else max(self.peak, level)
            if self._window_open:
                self.stage_peak = level if self.stage_peak is None else max(self.stage_peak, level)
            now = time.monotonic()
            if not force and now - self._last_emit < self.interval:
                return None
            self._last_emit = now
            return {"footprint": footprint, "peak": self.peak, "stage": self.stage,
                    "stage_peak": self.stage_peak, "swap": sample.get("swap"),
                    "available": sample.get("available"), "total": sample.get("total"),
                    "pressure": sample.get("pressure")}


class _Trace:
    """The job's trace file: buffers lines until opened; a write failure (disk full) disables
    it with one line on stderr instead of failing the job."""

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
        path fails with ``output_exists`` instead of replacing the winner's trace."""
        from stageload.trace import TraceWriter

        try:
            if replace and path.exists():
                path.unlink()  # an earlier run's trace, vetted by check_trace
            self.writer = TraceWriter(path)
        except FileExistsError:
            raise RunnerError("output_exists", f"The trace {path} appeared meanwhile (another "
                              "runner on the same output?); it was left untouched.",
                              "Wait for that job, or choose another output name or --trace.") from None
        except OSError as exc:
            raise RunnerError("output_unwritable", f"Cannot create the trace {path} "
                              f"({exc.strerror or exc}).") from None
        self.path = path
        for obj in self.pending:
            self(obj)
        self.pending = []

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
        with self._lock:
            if self.writer is not None:
                self.writer.close()
                self.writer = None


def summarize_trace(path: Path | None) -> dict | None:
    """``stageload.summary.summarize`` over the trace's lines, or None when the summary module
    is not available or the trace cannot be read (the reason goes to stderr)."""
    if path is None:
        return None
    try:
        from stageload.summary import summarize
    except ImportError:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            summary = summarize(f.read().splitlines())
    except Exception as exc:  # a summary problem must not fail a finished job
        log(f"could not summarise {path}: {type(exc).__name__}: {exc}")
        return None
    if hasattr(summary, "as_dict"):
        summary = summary.as_dict()
    elif hasattr(summary, "__dataclass_fields__"):
        from dataclasses import asdict
        summary = asdict(summary)
    return json.loads(json.dumps(summary, default=str))


def _worker_env() -> dict:
    """The worker's environment: ours, with this package's folder first on ``PYTHONPATH`` so
    the worker imports the same ``runner`` and ``stageload`` even when they are not installed
    (the Blender add-on runs them from its own folder)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    parts = [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def worker_argv(python: str, events_fd: int, payload: dict, *, probe: bool = False) -> list[str]:
    """Command line of the worker (``python -m runner.worker``)."""
    argv = [python, "-m", "runner.worker", "--events-fd", str(events_fd)]
    if probe:
        return argv + ["--probe", "--backend-options", json.dumps(payload)]
    return argv + ["--job", json.dumps(payload)]


def _stderr_fd() -> int | None:
    try:
        fd = sys.stderr.fileno()
        os.fstat(fd)
        return fd
    except (OSError, ValueError, AttributeError):
        return None


def run_job(job: Job, emit: Callable[[dict], None], cancel: Cancel, guard_config, *,
            preamble: list[dict] = (), python: str | None = None, tag: dict | None = None) -> Outcome:
    """Run one job to its end. ``emit`` gets each protocol object for stdout (already with
    ``v``); the trace gets them too, plus the samples. ``preamble`` (e.g. ``hello``) is written
    first into the trace. ``tag`` fields are added to every relayed event (batch: ``item``).
    ``python`` is the worker's interpreter (default: this one). Never raises for a job failure:
    returns an ``Outcome`` whose ``final`` event the caller prints (single run) or summarises
    (batch). Guard from ``stageload.guard`` (imported here, after argument parsing).
    """
    from stageload.guard import Guard

    started = time.time()
    trace = _Trace()
    for obj in preamble:
        trace(obj)
    tracker = MemoryTracker()
    tag = dict(tag or {})
    partial: Path | None = None
    output: Path | None = None

    order = threading.RLock()  # re-entrant: emit's broken-pipe callback may publish again

    def publish(obj: dict) -> None:
        """Trace then print ``obj``, under one lock: the relay and sampler threads publish
        concurrently, and the trace must hold the stdout lines in stdout's order."""
        obj = {**obj, **tag} if tag else obj
        with order:
            trace(obj)
            emit(obj)

    def make(name: str, **fields) -> dict:
        return {"v": PROTOCOL_VERSION, "event": name, "t": time.time(), **fields}

    def finish(error: RunnerError | None, worker_info: dict | None = None) -> Outcome:
        seconds = time.time() - started
        if error is None:
            summary = summarize_trace(trace.path) if trace.writer is not None else None
            final = make("result", output=str(output), trace=str(trace.path) if trace.path else None,
                         seconds=round(seconds, 3), summary=summary, peak=tracker.peak,
                         backend=job.backend, info=worker_info or {})
            if trace.error:
                final["trace_error"] = trace.error
        else:
            final = make("error", **error.fields(),
                         trace=str(trace.path) if trace.path else None,
                         seconds=round(seconds, 3))
        final.update(tag)
        trace(final)
        trace.close()
        return Outcome(ok=error is None, final=final,
                       exit_code=0 if error is None else error.exit_code,
                       output=str(output) if error is None else None,
                       trace=str(trace.path) if trace.path else None, seconds=seconds,
                       peak=tracker.peak, error=error)

    # -- up-front validation (no trace yet: nothing of an earlier run is touched) -----------
    try:
        backend = backends.get(job.backend)
    except KeyError as exc:
        return finish(RunnerError("usage", str(exc.args[0])))
    if not backend.installed():
        return finish(RunnerError("backend_unavailable", f"The {backend.name} backend is not "
                                  "installed here.", backend.install_hint or None))
    try:  # cheap: files and folders only; a bad --pixal3d-dir fails here, with no trace
        backend.run_precheck(job.options)
    except RunnerError as err:
        return finish(err)
    replace = job.overwrite if job.replace_trace is None else job.replace_trace
    try:
        trace_conflict(job.resolved_trace(), job.image, job.output)
        info = probe_image(job.image)
        output = check_output(job.output, job.overwrite)
        trace_path = job.resolved_trace()
        if not replace and failed_runs_trace(trace_path, output):
            log(f"replacing {trace_path}: the trace of an earlier run of {output.name} that "
                "produced no GLB")
            replace = True
        trace_path = check_trace(trace_path, replace)
        trace.open(trace_path, replace)
    except RunnerError as err:
        return finish(err)
    except Exception as exc:  # a bug in validation: this job fails, the process goes on
        import traceback

        traceback.print_exc(file=sys.stderr)
        return finish(RunnerError("internal", f"Unexpected {type(exc).__name__} while checking "
                                  f"the input: {exc}"))
    publish(make("input", **info.as_dict()))
    if cancel:
        return finish(cancel_error(cancel, "before the worker started"))

    # -- admission -----------------------------------------------------------------------------
    try:
        guard = Guard(guard_config, log=lambda ev: publish({"v": PROTOCOL_VERSION, **ev}))
    except ValueError as exc:  # stageload.guard.ConfigError, e.g. --log cannot be opened
        return finish(RunnerError("usage", str(exc)))
    cancel.listeners.append(lambda reason: guard.cancel())
    try:
        admitted = guard.wait_for_admission()
        if cancel:
            return finish(cancel_error(cancel, "while waiting for the guard's admission"))
        if not admitted:
            return finish(RunnerError("guard_timeout", "The guard did not find room to start "
                                      f"within {guard_config.start_timeout:g} s."))

        # -- the worker --------------------------------------------------------------------------
        for stale in sweep_stale_partials(output):
            log(f"removed {stale.name}, left by a runner that was killed")
        partial = temp_path(output)
        payload = {"backend": backend.name, "image": str(Path(job.image).absolute()),
                   "output": str(partial), "seed": job.seed, "texture_size": job.texture_size,
                   "height_m": job.height_m,
                   "options": {o.dest: job.options[o.dest] for o in backend.options
                               if job.options.get(o.dest) is not None}}
        read_fd, write_fd = os.pipe()
        stderr_fd = _stderr_fd()
        try:
            proc = guard.start(worker_argv(python or sys.executable, write_fd, payload),
                               pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                               stdout=stderr_fd if stderr_fd is not None else subprocess.DEVNULL,
                               env=_worker_env(), close_fds=True)
        except OSError as exc:
            os.close(read_fd)
            return finish(RunnerError("no_torch", f"Could not start the worker with "
                                      f"{python or sys.executable} ({exc.strerror or exc}).",
                                      "Check the interpreter path."))
        finally:
            os.close(write_fd)

        worker_events: dict[str, dict] = {}

        def read_events() -> None:
            with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as pipe:
                for line in pipe:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        log(f"worker sent a line that is not JSON: {line[:200]!r}")
                        continue
                    if not isinstance(ev, dict) or "event" not in ev:
                        continue
                    name = ev["event"]
                    if name in _WORKER_ONLY:
                        worker_events[name] = ev
                        trace({**ev, "event": f"worker_{name}" if not name.startswith("worker")
                               else name})
                        continue
                    tracker.on_event(ev)
                    publish({"v": PROTOCOL_VERSION, **ev})

        reader = threading.Thread(target=read_events, name="runner-event-relay", daemon=True)
        reader.start()

        guard_lock = threading.Lock()
        stopped: dict[str, str] = {}
        next_check = [0.0]

        sink_failures: list[str] = []

        def on_sample(sample: dict) -> None:
            # The sampler thread stops for good when its sink raises; the guard's budget rides
            # on it, so nothing here may escape.
            try:
                account(sample)
            except Exception as exc:
                if not sink_failures:
                    log(f"memory sample handling failed ({type(exc).__name__}: {exc}); "
                        "continuing")
                sink_failures.append(repr(exc))

        def account(sample: dict) -> None:
            trace(sample)
            if not sample.get("footprint"):
                return  # the worker has exited (a zombie has no resident memory): no report
            memory = tracker.on_sample(sample)
            if memory is not None:
                publish(make("memory", **memory))
            # The budget is judged every --poll seconds (as `python -m stageload guard` does),
            # on the latest sample, so --kill-samples keeps its documented meaning.
            now = time.monotonic()
            if now < next_check[0]:
                return
            next_check[0] = now + guard_config.poll
            with guard_lock:
                if not stopped and not cancel:
                    decision = guard.check(sample)
                    if decision is not None:
                        stopped["reason"] = decision.get("reason", "over budget")

        from stageload.meter import Sampler

        sampler = Sampler(proc.pid, on_sample, interval=SAMPLE_INTERVAL).start()
        while proc.poll() is None and not cancel and not stopped:
            cancel.wait(0.05)
        if cancel and proc.poll() is None:
            with guard_lock:
                guard.stop(f"cancelled: {cancel.reason}")
        try:
            code = proc.wait(timeout=max(5.0, guard_config.grace + 5.0))
        except Exception:
            with guard_lock:
                guard.stop("the worker did not exit")
            code = proc.wait()
        sampler.stop(final=False)
        if sampler.error is not None:
            log(f"the memory sampler stopped early: {sampler.error!r}")
        reader.join(timeout=3.0)

        # -- outcome -------------------------------------------------------------------------------
        if stopped:
            err = RunnerError("guard_stopped", f"The guard stopped the job: {stopped['reason']}.")
        elif cancel:
            err = cancel_error(cancel, "while the worker ran; the partial output was removed")
        elif "error" in worker_events:
            ev = worker_events["error"]
            kind = ev.get("kind") if ev.get("kind") in KINDS else "backend_failed"
            err = RunnerError(kind, ev.get("message") or "The worker failed.", ev.get("hint"),
                              **(ev.get("details") or {}))
        elif code == 0 and "worker_done" in worker_events:
            try:
                commit(partial, output, job.overwrite)
            except RunnerError as commit_err:
                err = commit_err
            else:
                partial = None
                return finish(None, worker_events["worker_done"].get("info"))
        elif code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            err = RunnerError("worker_killed", f"The worker was killed by {name}.")
        else:
            err = RunnerError("worker_crashed", f"The worker exited with status {code} without "
                              "a result.")
        return finish(err)
    finally:
        if partial is not None:
            discard(partial)
        guard.close()
