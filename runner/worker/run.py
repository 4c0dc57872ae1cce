"""The worker: the process that runs a backend (and imports torch when the backend needs it).
Started by the supervisor as ``python -m runner.worker.run --events-fd N --job JSON`` (a
``runner.job.records.WorkerJob``) in its own process group; never by hand.

Channels: events go as JSON lines to file descriptor ``N`` (a pipe the supervisor reads); file
descriptor 1 is pointed at stderr first thing, so a stray ``print`` in a backend or a native
library can never corrupt the protocol stream. Worker-only events, which the supervisor consumes
and does not relay: ``worker`` (started: pid, python, torch version), ``worker_done`` (the partial
GLB path and the backend's returned dict) and ``error`` (kind/message/hint, then the worker exits
with the kind's code).

``python -m runner.worker.run --probe --events-fd N [--backend-options JSON]`` writes one ``probe``
event instead: Python, torch, devices and every backend's ``check()`` (used by
``python -m runner check``); ``--self-check BACKEND`` runs that backend's deep self-check
(``python -m runner check --deep``: its ``self_check`` events, then ``self_check_done``).

If the supervisor dies (even by SIGKILL) the worker notices — Linux ``PR_SET_PDEATHSIG`` and a
parent-pid poll every 0.2 s everywhere — and kills its own process group.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import functools
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback

from meshfacts.errors import KINDS, RunnerError
from meshfacts.events import make
from meshfacts.job_options import JobOptions
from runner import backends
from runner.images.reading import load_image, read_pixels
from runner.job.limits import cause_chain, memory_error, resource_error
from runner.job.records import WorkerJob
from runner.stdfds import reopen_closed_std_fds
from runner.worker.oom import volunteer_for_oom_killer

_PR_SET_PDEATHSIG = 1


class _EventPipe:
    """Writes one JSON object per line to a file descriptor; thread-safe; a closed pipe (the
    supervisor is gone) makes the worker kill its group."""

    def __init__(self, fd: int):
        self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def __call__(self, obj: dict) -> None:
        obj = dict(obj)
        obj.setdefault("t", time.time())
        # ASCII escapes: a path that holds lone surrogates (non-UTF-8 locale) still travels.
        line = json.dumps(obj, ensure_ascii=True, default=str)
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except (BrokenPipeError, OSError):
                _kill_own_group()


def _kill_own_group() -> None:
    """SIGKILL this process's whole group when the worker leads it (as the supervisor starts
    it); otherwise only exit, never touching a group the worker does not own."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(137)


def _watch_parent() -> None:
    """Die with the supervisor: ``PR_SET_PDEATHSIG`` on Linux, plus a 0.2 s parent-pid poll."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent or parent == 1:  # already orphaned between fork and here
        _kill_own_group()

    def poll():
        while True:
            if os.getppid() != parent:
                _kill_own_group()
            time.sleep(0.2)

    threading.Thread(target=poll, name="runner-parent-watch", daemon=True).start()


def _import_torch():
    """Import torch or raise ``RunnerError('no_torch')`` naming this interpreter."""
    try:
        import torch  # noqa: F401  (the worker is the torch process)
    except Exception as exc:  # ImportError, or a broken install raising OSError
        raise RunnerError(
            "no_torch", f"The Python at {sys.executable} cannot import torch "
            f"({type(exc).__name__}: {exc}).",
            f"Install PyTorch into it ({sys.executable} -m pip install torch) or choose an "
            "interpreter that has it.", python=sys.executable) from None
    return torch


def _devices(torch) -> dict:
    """Which compute devices this torch can use."""
    cuda = {"available": False}
    try:
        if torch.cuda.is_available():
            count = torch.cuda.device_count()
            cuda = {"available": True, "count": count,
                    "names": [torch.cuda.get_device_name(i) for i in range(count)]}
    except Exception as exc:
        cuda = {"available": False, "error": str(exc)}
    mps = {"available": False}
    try:
        backend = getattr(torch.backends, "mps", None)
        if backend is not None:
            mps = {"available": bool(backend.is_available()), "built": bool(backend.is_built())}
    except Exception as exc:
        mps = {"available": False, "error": str(exc)}
    return {"cpu": {"available": True, "threads": torch.get_num_threads()}, "cuda": cuda,
            "mps": mps}


_chain = cause_chain


_OOM_WORDING = ("can't allocate memory", "out of memory")
"""Lower-case phrases of allocators' out-of-memory errors: torch's CPU allocator raises
``RuntimeError("... DefaultCPUAllocator: can't allocate memory: you tried to allocate N
bytes ...")``; CUDA and MPS say "CUDA out of memory" / "MPS backend out of memory" (as
``torch.OutOfMemoryError`` in recent torch, a plain ``RuntimeError`` in older ones)."""


def _is_out_of_memory(exc: BaseException) -> bool:
    """True for ``MemoryError``, ``torch.OutOfMemoryError`` (looked up only when torch is
    already imported) and a ``RuntimeError`` with an allocator's out-of-memory wording."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if isinstance(oom_type, type) and isinstance(exc, oom_type):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(w in text for w in _OOM_WORDING)


def _own_kind(exc: BaseException, module) -> str | None:
    """The kind ``exc`` names itself (a ``kind`` attribute) or the backend module's
    ``ERRORS`` table gives its class (class name → kind); None when neither is a known kind."""
    kind = getattr(exc, "kind", None)
    if isinstance(kind, str) and kind in KINDS:
        return kind
    table = getattr(module, "ERRORS", {}) if module is not None else {}
    for cls in type(exc).__mro__:
        if table.get(cls.__name__) in KINDS:
            return table[cls.__name__]
    return None


def _describe(exc: BaseException) -> str:
    """What ``exc`` says: its ``message`` attribute, its text, or its class name."""
    return str(getattr(exc, "message", None) or exc) or type(exc).__name__


def _classify(exc: BaseException, module) -> RunnerError:
    """Turn a backend's exception into a ``RunnerError``. The exception's own kind (a
    ``RunnerError``, a ``kind`` attribute, the module's ``ERRORS`` table — on it or on the first
    exception of its cause chain that has one, e.g. ``BadWeights`` inside the staged models'
    ``LoaderError``) wins, with that exception's message, hint and ``details``; otherwise the
    whole cause chain is walked to its root: ``ENOSPC``/``EDQUOT`` → ``disk_full``, an
    out-of-memory error (``_is_out_of_memory``) → ``out_of_memory``; else ``backend_failed``
    naming the root cause. The exception's ``hint`` (if any) is kept."""
    if isinstance(exc, RunnerError):
        return exc
    if isinstance(exc, SystemExit):  # a backend (or code it imports) called sys.exit()
        return RunnerError("backend_failed", f"The backend ended the worker with SystemExit("
                           f"{exc.code!r}): code that calls sys.exit() or argparse's parse_args() "
                           "while the job runs.", "See the log on stderr for where it was "
                           "raised; that code must not exit a process it does not own.")
    chain = _chain(exc)
    # the exception's own kind, or one in its cause chain (a loader error wrapping BadWeights)
    own = next(((cur, _own_kind(cur, module)) for cur in chain
                if _own_kind(cur, module) is not None), None)
    if own is not None:
        cur, kind = own
        details = getattr(cur, "details", None)
        return RunnerError(kind, _describe(cur), getattr(cur, "hint", None),
                           **(details if isinstance(details, dict) else {}))
    text = _describe(exc)
    for cur in chain:
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
            return RunnerError("disk_full", f"No space left on the drive while writing "
                               f"({cur.filename or 'the output'}).")
    limited = resource_error(chain, "The worker") or memory_error(chain, text)
    if limited is not None:
        return limited
    oom = next((cur for cur in chain if _is_out_of_memory(cur)), None)
    if oom is not None:
        said = text if oom is exc else f"{text} — {type(oom).__name__}: {_describe(oom)}"
        return RunnerError("out_of_memory", f"The backend ran out of memory ({said}).")
    root = chain[-1]
    cause = "" if root is exc else f" (caused by {type(root).__name__}: {_describe(root)})"
    return RunnerError("backend_failed", f"The backend failed: {type(exc).__name__}: "
                       f"{text}{cause}", getattr(exc, "hint", None))


EXPORT_FAILED_HINT = ("See the log on stderr and the trace: the export failed on this asset "
                      "(a bug, or a library it calls); run it again, and report it with the "
                      "trace and the asset if it happens again.")
"""The hint of an export process's ``backend_failed`` (``runner export``, a run's export
stage): the kind's own hint, "try another image or backend", does not apply to an export."""


def _load_backend(backend):
    """Import ``backend``'s module. A dependency this interpreter lacks (SciPy, trimesh …)
    raises ``RunnerError('missing_dependency')`` naming it and the interpreter."""
    try:
        return backend.load()
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("runner", "stageload"):
            raise
        raise RunnerError(
            "missing_dependency", f"The Python at {sys.executable} cannot import {exc.name}, "
            f"which the {backend.name} backend needs.",
            f"Install it into that interpreter ({sys.executable} -m pip install {exc.name}), "
            "or choose an interpreter that has it.", python=sys.executable) from None


def run_worker(job: WorkerJob, emit) -> int:
    """Run one ``runner.job.records.WorkerJob`` sending events to ``emit``; returns the exit status.
    ``whole``: the backend's ``run_job`` writes the GLB to ``job.output``; ``model``: it is
    given ``handover`` and writes the decoded asset there instead of exporting; ``export``:
    this is the export process — the job's export step (``job.export``, named when the job
    was made: ``runner.job.export_step``) from ``handover`` to the GLB."""
    module = None
    try:
        if job.mode == "export":
            module = step = backends.export_step_named(job.export)  # its ERRORS, if any
            emit(_started(_import_torch() if step.needs_torch else None))
            result = step.run(job.handover, job.output, job.options, emit=emit,
                              stages=job.stages)
        else:
            module, call = _backend_call(job, emit)
            result = call()
        emit(make("worker_done", output=job.output, info=result or {}))
        return 0
    except BaseException as exc:  # everything becomes one error event, never a traceback on stdout
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = _classify(exc, module)
        if job.mode == "export" and err.kind == "backend_failed" \
                and err.hint == KINDS["backend_failed"].hint:  # not another image or backend
            err.hint = EXPORT_FAILED_HINT
        # A traceback only for a bug or an unexpected backend failure (runner/PROTOCOL.md);
        # a known kind (empty_matte, disk_full, pixal3d_missing …) is explained in one line by
        # the supervisor.
        if err.kind in ("backend_failed", "internal"):
            traceback.print_exc(file=sys.stderr)
        if err.kind == "disk_full":
            _quiet_full_disk_finalizers()
        emit(make("error", **err.fields()))
        return err.exit_code


def _started(torch) -> dict:
    """The worker-only ``worker`` event: started, with its pid, Python and torch version."""
    return make("worker", state="started", pid=os.getpid(), python=sys.executable,
                torch=getattr(torch, "__version__", None))


def _backend_call(job: WorkerJob, emit):
    """The backend's part of :func:`run_worker`, up to the call: torch imported only for a
    backend that uses it (the built-in backend runs in an interpreter without torch:
    Blender's own Python with the extension's wheels, docs/blender.md), ``worker`` started,
    the image loaded, the module imported. Returns ``(module, call)``: ``call()`` runs the
    module's ``run_job`` with the job's options (and, in mode ``model``, its hand-over
    file)."""
    backend = backends.get(job.backend)
    torch = _import_torch() if backend.needs_torch else None
    emit(_started(torch))
    if not backend.installed():
        raise RunnerError("backend_unavailable", f"The {backend.name} backend is not "
                          "installed.", backend.install_hint or None)
    if job.probed is not None:  # decoded once, by the supervisor's probe
        image, info = read_pixels(sys.stdin.buffer, job.probed)
    else:
        image, info = load_image(job.image)
    module = _load_backend(backend)
    extra = {"handover": job.handover} if job.mode == "model" else {}
    return module, functools.partial(module.run_job, image, job.output, job.options,
                                     had_alpha=info.had_alpha, emit=emit, **extra)


def _quiet_full_disk_finalizers() -> None:
    """After a ``disk_full`` error: objects the failed write leaves behind (a ``ZipFile`` of
    ``numpy.savez``, a buffered file) flush again when they are finalised, fail with the same
    ENOSPC, and Python prints "Exception ignored in ZipFile.__del__ …" with a traceback
    (``sys.unraisablehook``'s default). The error event already says the disk is full: such
    ENOSPC/EDQUOT reports are dropped from now on; any other unraisable error is printed as
    before."""
    previous = sys.unraisablehook
    full = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))

    def hook(unraisable):
        exc = unraisable.exc_value
        if isinstance(exc, OSError) and exc.errno in full:
            return
        previous(unraisable)

    sys.unraisablehook = hook


def probe(options: dict, emit) -> int:
    """Emit one ``probe`` event: python, torch, devices, backends (each backend's check)."""
    out = {"python": {"version": platform.python_version(), "executable": sys.executable,
                      "implementation": platform.python_implementation()},
           "platform": {"system": platform.system(), "machine": platform.machine(),
                        "release": platform.release()}}
    try:
        torch = _import_torch()
        out["torch"] = {"version": torch.__version__, "ok": True}
        out["devices"] = _devices(torch)
    except RunnerError as err:
        out["torch"] = {"version": None, "ok": False, "reason": err.message, "hint": err.hint}
        out["devices"] = {"cpu": {"available": True}, "cuda": {"available": False},
                          "mps": {"available": False}}
    checks = {}
    for name in backends.names():
        backend = backends.get(name)
        if backend.needs_torch and not out["torch"]["ok"]:
            checks[name] = {"ok": False, "reason": "torch cannot be imported",
                            "hint": out["torch"]["hint"]}
        else:
            checks[name] = backend.check(JobOptions.parse(name, {
                o.dest: options.get(o.dest) for o in backend.options}))
        checks[name]["title"] = backend.title
    out["backends"] = checks
    emit(make("probe", **out))
    return 0


def self_check(name: str, options: dict, emit) -> int:
    """The deep self-check of backend ``name`` (its module's ``self_check(options, emit=)``
    with the backend's own ``options`` parsed, ``JobOptions``:
    the pixal3d backend's lean parts against the port): its ``self_check`` events as they come,
    then one ``self_check_done`` event with the report (without the parts, already sent), or
    an ``error`` event (the kind its exception maps to). Returns the exit status."""
    module = None
    try:
        _import_torch()
        backend = backends.get(name)
        module = backend.load()
        function = getattr(module, "self_check", None)
        if function is None:
            raise RunnerError("usage", f"The {name} backend has no deep self-check (it has no "
                              "lean parts).", "Use --deep with --backend pixal3d.")
        report = function(JobOptions.parse(name, {o.dest: options.get(o.dest)
                                                  for o in backend.options}), emit=emit)
    except Exception as exc:
        err = _classify(exc, module)
        emit(make("error", **err.fields()))
        return err.exit_code
    emit(make("self_check_done", **{k: v for k, v in report.items() if k != "parts"}))
    return 0


def main(argv=None) -> int:
    """Entry point of ``python -m runner.worker.run``; returns the exit status."""
    reopen_closed_std_fds()  # before dup2(2, 1) below, which fails on a closed stderr
    parser = argparse.ArgumentParser(prog="python -m runner.worker.run")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--job", help="the job as JSON (runner.job.records.WorkerJob)")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--self-check", metavar="BACKEND")
    parser.add_argument("--backend-options", default="{}")
    args = parser.parse_args(argv)
    # stdout → stderr before anything can print: the supervisor's stdout is the protocol.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    emit = _EventPipe(args.events_fd)
    _watch_parent()
    volunteer_for_oom_killer()  # this process grows; Blender and the supervisor must not pay
    if args.probe:
        return probe(json.loads(args.backend_options), emit)
    if args.self_check:
        return self_check(args.self_check, json.loads(args.backend_options), emit)
    try:
        job = WorkerJob.from_json(args.job or "")
    except (TypeError, ValueError) as exc:  # a supervisor of another version, or a bug
        err = RunnerError("internal", f"The worker was given a job it cannot read: {exc}.")
        emit(make("error", **err.fields()))
        return err.exit_code
    return run_worker(job, emit)


if __name__ == "__main__":
    status = main()
    # Skip interpreter teardown (a second or more with torch loaded): every event is already
    # flushed to the pipe and the GLB is closed by the backend.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
