"""Run one long library call in a child process so that a cancel stops it within 0.1 s.

A single native call (fast-simplification's ``simplify`` on millions of faces: tens of seconds)
cannot be interrupted from Python in the same process; a child process can be killed. The
arrays travel through an uncompressed ``.npz`` in the caller's work folder (the same bytes the
asset file held; written and read in a fraction of a second). The child runs with this
interpreter (``sys.executable -m runner.export_engine.stoppable``), in the caller's process
group (so the runner's guard, which stops the export process's group, stops it too), and
exits by itself when its parent dies (parent-pid poll every 0.2 s).

Inside the runner a cancel also reaches the export process as SIGTERM from its supervisor,
which ends it wherever it is; the flag here is for callers of the Python API.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .errors import ExportCancelled

POLL = 0.1


def _child_env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    parts = [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def call(target: str, arrays: dict | None, params: dict, workdir: Path, steps) -> dict:
    """``target`` (``"module:function"``, called as ``function(**arrays, **params)`` and
    returning a dict of arrays) in a child process; returns that dict. ``arrays`` None: the
    function gets ``params`` only (it reads its inputs from files named there). ``steps``: the
    ``Steps`` whose cancel flag is polled (``ExportCancelled`` after killing the child).
    Raises ``RuntimeError`` with the child's last stderr lines when it fails."""
    workdir = Path(workdir)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    inp, out = workdir / f"stoppable-in-{stamp}.npz", workdir / f"stoppable-out-{stamp}.npz"
    err = workdir / f"stoppable-err-{stamp}.txt"
    try:
        np.savez(inp, **(arrays or {}))
        with open(err, "wb") as err_file:
            proc = subprocess.Popen([sys.executable, "-m", "runner.export_engine.stoppable",
                                     target, str(inp), str(out), json.dumps(params)],
                                    stdin=subprocess.DEVNULL, stdout=err_file, stderr=err_file,
                                    env=_child_env())
            _wait(proc, steps)
        if proc.returncode != 0:
            tail = err.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"{target} failed in its child process (exit "
                               f"{proc.returncode}): {' | '.join(tail)}")
        with np.load(out) as data:
            return {key: data[key] for key in data.files}
    finally:
        for path in (inp, out, err):
            path.unlink(missing_ok=True)


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
    _watch_parent()
    module, _, name = target.partition(":")
    func = getattr(importlib.import_module(module), name)
    with np.load(inp) as data:
        arrays = {key: data[key] for key in data.files}
    result = func(**arrays, **json.loads(params))
    np.savez(out, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
