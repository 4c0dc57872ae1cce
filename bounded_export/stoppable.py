"""Run one long library call in a child process so that a cancel stops it within 0.1 s.

A single native call (fast-simplification's ``simplify`` on millions of faces: tens of seconds)
cannot be interrupted from Python in the same process; a child process can be killed. The
arrays travel through an uncompressed ``.npz`` in the caller's work folder (the same bytes the
asset file held; written and read in a fraction of a second). The child runs with this
interpreter (``sys.executable -m bounded_export.stoppable``), in the caller's process
group (so the runner's guard, which stops the export process's group, stops it too), and
exits by itself when its parent dies (parent-pid poll every 0.2 s).

Inside the runner a cancel also reaches the export process as SIGTERM from its supervisor,
which ends it wherever it is; the flag here is for callers of the Python API.
"""
from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bounded_export.errors import BadAsset, ExportCancelled, StepKilled, StepOutOfMemory
from meshfacts.proclimits import CRASH_SIGNALS, cause_chain, memory_limit

POLL = 0.1
NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def _child_env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    parts = [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def call(target: str, arrays: dict | None, params: dict, workdir: Path, steps) -> dict:
    """``target`` (``"module:function"``, called as ``function(**arrays, **params)`` and
    returning a dict of arrays) in a child process; returns that dict. ``arrays`` None: the
    function gets ``params`` only (it reads its inputs from files named there). ``steps``: the
    ``Steps`` whose cancel flag is polled (``ExportCancelled`` after killing the child).
    Raises ``StepOutOfMemory`` when the child ran out of memory (it says so in its failure
    file), ``OSError`` (ENOSPC/EDQUOT, with the file it was writing) when its drive was full —
    the runner's ``disk_full`` —, ``BadAsset`` when the child raised it (the same key, problem
    and hint), ``StepKilled`` when a signal the engine did not send ended
    it, else ``RuntimeError`` with the child's last stderr lines."""
    workdir = Path(workdir)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    inp, out = workdir / f"stoppable-in-{stamp}.npz", workdir / f"stoppable-out-{stamp}.npz"
    err = workdir / f"stoppable-err-{stamp}.txt"
    failure = _failure_path(out)
    try:
        np.savez(inp, **(arrays or {}))
        with open(err, "wb") as err_file:
            proc = subprocess.Popen([sys.executable, "-m", "bounded_export.stoppable",
                                     target, str(inp), str(out), json.dumps(params)],
                                    stdin=subprocess.DEVNULL, stdout=err_file, stderr=err_file,
                                    env=_child_env())
            _wait(proc, steps)
        if proc.returncode != 0:
            _raise_failure(target, proc, err, failure, steps)
        with np.load(out) as data:
            return {key: data[key] for key in data.files}
    finally:
        for path in (inp, out, err, failure):
            path.unlink(missing_ok=True)


def _failure_path(out: Path) -> Path:
    """Where the child writes why it failed (JSON ``{"type", "message", "memory"}``)."""
    return Path(str(out)[:-len(".npz")] + ".failure.json")


def _raise_failure(target: str, proc: subprocess.Popen, err: Path, failure: Path, steps):
    """Raise the error for a child that did not exit 0 (``call``'s three kinds)."""
    step = (steps.current if steps is not None else None) or target
    code = proc.returncode
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        raise StepKilled(step, proc.pid, name, -code in CRASH_SIGNALS)
    try:
        said = json.loads(failure.read_text())
    except (OSError, ValueError):
        said = None
    refused = said.get("bad_asset") if isinstance(said, dict) else None
    if isinstance(refused, dict):  # the child found the asset bad: the same error here
        raise BadAsset(refused.get("key"), str(refused.get("problem")), refused.get("hint") or "")
    if isinstance(said, dict) and said.get("memory") is True:
        raise StepOutOfMemory(step, f"{said.get('type')}: {said.get('message')}",
                              memory_limit())
    if isinstance(said, dict) and said.get("errno") in NO_SPACE:
        filename = said.get("filename")
        raise OSError(said["errno"], f"the export's {step} step: {said.get('message')}",
                      filename if isinstance(filename, str) else None)
    tail = err.read_text(errors="replace").strip().splitlines()[-5:]
    raise RuntimeError(f"{target} failed in its child process (exit {code}): "
                       f"{' | '.join(tail) or 'no output'}")


def _wait(proc: subprocess.Popen, steps) -> None:
    while proc.poll() is None:
        if steps is not None and steps.cancelled():
            proc.kill()
            proc.wait()
            raise ExportCancelled(steps.current or "export")
        if steps is not None:
            steps.heartbeat()
        try:
            proc.wait(timeout=POLL)
        except subprocess.TimeoutExpired:
            pass


def _watch_parent() -> None:
    parent = os.getppid()

    def poll():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(137)

    threading.Thread(target=poll, daemon=True).start()


def main(argv: list[str]) -> int:
    """The child: ``TARGET IN.npz OUT.npz PARAMS_JSON``."""
    target, inp, out, params = argv
    try:
        _watch_parent()
        module, _, name = target.partition(":")
        # the function this child runs is named on its command line (known at run time)
        func = getattr(importlib.import_module(module), name)
        with np.load(inp) as data:
            arrays = {key: data[key] for key in data.files}
        result = func(**arrays, **json.loads(params))
        np.savez(out, **result)
    except Exception as exc:  # said to the parent in the failure file; the traceback on stderr
        _write_failure(Path(out), exc)
        raise
    return 0


def _write_failure(out: Path, exc: Exception) -> None:
    """The failure file for the parent: the exception's type and text, and whether it is an
    allocation failure (``MemoryError`` anywhere in its cause chain — numpy's
    ``_ArrayMemoryError`` is one, fast-simplification's Cython turns ``std::bad_alloc`` into
    one — or, under an address-space limit, a thread that could not start or a
    ``SystemError``: a C extension's "error return without exception set", or the import
    machinery's "returned a result with an exception set" when an import's allocation failed);
    and, for a full drive (ENOSPC/EDQUOT in the chain), its errno and the file being written.
    Never raises."""
    chain = cause_chain(exc)
    limited = memory_limit() is not None and any(
        isinstance(cur, SystemError) or "can't start new thread" in str(cur) for cur in chain)
    memory = limited or any(isinstance(cur, MemoryError) for cur in chain)
    full = next((cur for cur in chain if isinstance(cur, OSError) and cur.errno in NO_SPACE),
                None)
    said = {"type": type(exc).__name__, "message": str(exc), "memory": memory}
    if isinstance(exc, BadAsset):
        said["bad_asset"] = {"key": exc.key, "problem": exc.problem, "hint": exc.hint}
    if full is not None:  # the parent raises it again, which the runner says as disk_full
        said.update(errno=full.errno, filename=None if full.filename is None
                    else os.fsdecode(full.filename))
    try:
        _failure_path(out).write_text(json.dumps(said))
    except Exception:  # out of memory or disk: the parent falls back to the stderr tail
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
