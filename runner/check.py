"""``python -m runner check [--backend NAME] [backend options]``: can this machine run a job?

Prints one JSON object (also a protocol line: ``"v": 1, "event": "check"``) with ``python``
(version, executable), ``platform``, ``torch`` (``version`` or null with ``reason``/``hint``),
``devices`` (``cpu``, ``cuda``, ``mps``: each ``available`` plus details) and ``backends``
(name → ``ok``, ``reason``, ``hint``, ``title``). torch is imported in a worker subprocess
(``python -m runner.worker --probe``), never in this process.

Exit status: 0 when every requested backend (``--backend``, default ``builtin``) can run;
``backend_unavailable`` (31) when one cannot, ``no_torch`` (30) when torch cannot be imported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from . import backends
from .cli import ArgumentParser, backend_options, usage_failure
from .errors import RunnerError
from .protocol import Emitter, make

PROBE_TIMEOUT = 180.0
"""Seconds the probe subprocess may take (importing torch on a cold disk can be slow)."""


def probe(options: dict, python: str | None = None) -> dict:
    """Run the worker's ``--probe`` in a subprocess and return its ``probe`` event. Raises
    ``RunnerError('worker_crashed')`` when it gives none."""
    from .supervisor import _worker_env, worker_argv

    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(worker_argv(python or sys.executable, write_fd, options, probe=True),
                                pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=sys.stderr.fileno(), env=_worker_env(),
                                start_new_session=True)
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "r", encoding="utf-8") as pipe:
        lines = pipe.read().splitlines()
    try:
        proc.wait(timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "probe":
            return ev
    raise RunnerError("worker_crashed", f"The probe with {python or sys.executable} gave no "
                      f"answer (exit status {proc.returncode}).")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m runner check``; returns the exit status."""
    parser = ArgumentParser(prog="python -m runner check",
                            description="Python, torch, devices and which backends can run here "
                                        "(one JSON object on stdout).")
    parser.add_argument("--backend", choices=backends.names(), action="append",
                        help="backend(s) whose readiness sets the exit status (default: builtin)")
    group = parser.add_argument_group("backend options")
    for opt in backends.all_options():
        group.add_argument(opt.flag, dest=opt.dest, default=opt.default, choices=opt.choices,
                           help=opt.help)
    try:
        ns = parser.parse_args(argv)
    except RunnerError as err:
        return usage_failure(err, "check")
    emitter = Emitter()
    try:
        result = probe(backend_options(ns))
    except RunnerError as err:
        emitter.event("error", **err.fields())
        return err.exit_code
    result.pop("event", None)
    result.pop("t", None)
    wanted = ns.backend or [backends.DEFAULT]
    result["requested"] = wanted
    result["ok"] = all(result["backends"].get(b, {}).get("ok") for b in wanted)
    emitter.emit(make("check", **result))
    if result["ok"]:
        return 0
    if not result["torch"].get("ok"):
        return RunnerError("no_torch", "").exit_code
    return RunnerError("backend_unavailable", "").exit_code
