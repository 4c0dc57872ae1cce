"""What runs on a node: one image as the same guarded job a local run is (``python -m runner
IMAGE -o OUT.glb`` with the batch's job and guard options: admission, budget, process group,
trace), in a node-local temporary folder, with its events streamed back as they happen.

:func:`node_job` is the body of the Ray task (``runner.cluster.placement`` wraps it with
``ray.remote``); Ray imports it by name on the node, so every node needs this project installed
in the interpreter that runs ``ray start`` (docs/cluster.md). The runner is started with that
same interpreter (``sys.executable``).

However the task ends — finished, failed, cancelled (``ray.cancel`` raises KeyboardInterrupt
here), the runner is stopped (SIGTERM: it stops its worker's group within its ``--grace``, then
SIGKILL) and the folder removed. If the Ray worker itself is killed outright (node lost,
``ray.cancel(force=True)``), the runner sees its parent vanish within 0.2 s and stops its worker
(runner/job/cancel.py); the folder of such a task is removed by the next task on that node
(:func:`sweep_stale_folders`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

FOLDER_PREFIX = "image-to-mesh-node-"
"""Node-local job folders: ``$TMPDIR/image-to-mesh-node-<task pid>-<random>``."""
STOP_WAIT = 3.0
"""Seconds to wait for the runner to exit after SIGTERM before SIGKILL (its grace is 1 s)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sweep_stale_folders(root: Path | None = None) -> int:
    """Remove job folders whose task process is gone (killed outright); returns how many.
    Never raises."""
    root = Path(root or tempfile.gettempdir())
    pattern = re.compile(re.escape(FOLDER_PREFIX) + r"(\d+)-")
    removed = 0
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for entry in entries:
        match = pattern.match(entry.name)
        if match and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM the runner (it cancels its job), SIGKILL after ``STOP_WAIT``; never raises."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except OSError:
        pass


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def node_label() -> dict:
    """This node: ``{"id": Ray node id (hex), "host": host name}``."""
    import ray  # runs inside a Ray task: Ray is there; this module is imported without it too

    return {"id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname()}


def user_names(event, local: dict[Path, str]):
    """``event`` (an event, or any JSON value in one) with every node-local path of ``local``
    (node path → the user's path on the head) replaced by the user's, and each such path's
    bare file name by the user's file name: the node's runner names ``input.png`` in its
    messages, the person knows ``c.png``. One pass (``re.sub`` over all names at once), so a
    replacement is never replaced again."""
    pairs = {}
    for path, theirs in local.items():
        pairs[str(path)] = theirs
        pairs[path.name] = Path(theirs).name
    # longest first: a full path wins over the bare name inside it
    words = sorted(pairs, key=len, reverse=True)
    pattern = re.compile("|".join(rf"(?<![\w.-]){re.escape(w)}(?![\w-])" for w in words))

    def rename(value):
        if isinstance(value, str):
            return pattern.sub(lambda m: pairs[m.group(0)], value)
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        return value

    return rename(event)


def node_job(suffix: str, data: bytes, argv: list[str], names: dict[str, str] | None = None):
    """Run one image (``data``: the file's bytes, ``suffix`` its lower-case suffix, e.g.
    ``.png``) as ``python -m runner`` with ``argv`` (job and guard options) on this node.
    ``names``: the user's ``image``, ``output`` and ``trace`` paths on the head, which the
    events name instead of the node's temporary files (``user_names``).

    Yields dicts: ``{"kind": "started", "node", "task_pid", "runner_pid"}`` once; then
    ``{"kind": "event", "event": <one stdout line of the runner, parsed>}`` per line; finally
    ``{"kind": "end", "node", "exit_code", "glb": bytes | None, "trace": bytes | None}`` (the
    GLB only when the runner exited 0)."""
    sweep_stale_folders()
    node = node_label()
    folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
    proc = None
    try:
        image = folder / f"input{suffix}"
        image.write_bytes(data)
        glb, trace = folder / "job.glb", folder / "job.trace.jsonl"
        local = {path: names[key] for path, key in ((image, "image"), (glb, "output"),
                                                    (trace, "trace")) if (names or {}).get(key)}
        proc = subprocess.Popen([sys.executable, "-m", "runner", str(image), "-o", str(glb),
                                 "--trace", str(trace), *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        yield {"kind": "started", "node": node, "task_pid": os.getpid(),
               "runner_pid": proc.pid}
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield {"kind": "event", "event": user_names(event, local) if local else event}
        code = proc.wait()
        yield {"kind": "end", "node": node, "exit_code": code,
               "glb": _read(glb) if code == 0 else None, "trace": _read(trace)}
    finally:
        _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["node_job", "node_label", "sweep_stale_folders", "user_names"]
