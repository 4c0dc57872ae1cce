"""``python -m runner check [--backend NAME] [--json] [backend options]``: can this machine run
a job?

At a terminal (stdout ``isatty``, no ``--json``) it prints its answer for a person, one line
each (Python and torch, the devices, each backend, the verdict) and no JSON. A pipe or a file
(and ``--json``) gets one JSON object (a protocol line: ``"v": 1, "event": "check"``) with
``python`` (version, executable), ``platform``, ``torch`` (``version`` or null with
``reason``/``hint``), ``devices`` (``cpu``, ``cuda``, ``mps``: each ``available`` plus details)
and ``backends`` (name → ``ok``, ``reason``, ``hint``, ``title``); the lines for a person then
go to stderr (``runner: check: …``). torch is imported in a worker subprocess
(``python -m runner.worker.run --probe``), never in this process.

Exit status: 0 when every requested backend (``--backend``, default ``builtin``) can run;
``no_torch`` (30) when torch cannot be imported; otherwise the kind the failing backend's check
names (``pixal3d_missing`` 32, ``pixal3d_version`` 33, ``bad_weights`` 35,
``weights_missing`` 36 — the codes a run exits with for the same
reason), or ``backend_unavailable`` (31) when it names none; ``usage`` (2) for a bad command
line or a backend option value a run would refuse too (``--keep-resident abc``). Every answer is
one line on stdout: the ``check`` event, or an ``error`` event (no ``hello``: that belongs to
runs and batches; runner/PROTOCOL.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from meshfacts.errors import KINDS, RunnerError, explain
from meshfacts.events import make
from meshfacts.job_options import JobOptions
from runner import backends
from runner.backends.verdicts import backend_lines, verdict_exit_code
from runner.cluster.auth import require_cluster_for_token
from runner.cluster.check import cluster_check
from runner.cluster.placement import node_argv, record_raw
from runner.commands import console, deep
from runner.commands.cli import (
    ArgumentParser,
    add_json_argument,
    backend_options,
    usage_failure,
)
from runner.commands.option_args import add_arguments as add_table_arguments
from runner.job.child import child_env
from runner.job.trace import log
from runner.job.worker_process import probe_argv
from runner.protocol import Emitter

CHECK_EPILOG = """\
exit status (runner/PROTOCOL.md):
  0        every requested backend (--backend, default builtin) can run
  2        usage: bad command line or option value (the same ones a run refuses)
  30       torch cannot be imported by this Python
  31       a requested backend cannot run here (the check event says why)
  32, 33   the Pixal3D folder is missing or incomplete / of an unknown version
  34       this Python lacks Pillow, NumPy or psutil
  35, 36   a Pixal3D weight file is damaged / missing (the check lists every missing file)
  37       --cluster: Ray missing, the cluster unreachable, or no node can run the
           requested backends (docs/cluster.md)
  38       --cluster: the cluster's token missing here or refused
  42       the probe subprocess gave no answer
  51       --deep: a lean part disagrees with the port's own path (the report names it)
"""

PROBE_TIMEOUT = 180.0
"""Seconds the probe subprocess may take (importing torch on a cold disk can be slow)."""


def probe(options: dict, python: str | None = None) -> dict:
    """Run the worker's ``--probe`` in a subprocess and return its ``probe`` event. Raises
    ``RunnerError('worker_crashed')`` when it gives none."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(probe_argv(python or sys.executable, write_fd, options),
                                pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=sys.stderr.fileno(), env=child_env(),
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


def build_parser() -> ArgumentParser:
    """The parser of ``python -m runner check`` (every option of the options table's ``check``
    command, so every backend's)."""
    parser = ArgumentParser(prog="python -m runner check",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            description="Python, torch, devices and which backends can run here: "
                                        "lines for a person at a terminal,\none JSON line (the "
                                        "check event, or an error event) in a pipe or with "
                                        "--json.",
                            epilog=CHECK_EPILOG)
    parser.add_argument("--backend", choices=backends.names(), action="append",
                        help="backend(s) whose readiness sets the exit status (default: builtin)")
    add_json_argument(parser, "print the check event (runner/PROTOCOL.md) on stdout even when "
                              "it is a terminal, which otherwise gets lines for a person; a "
                              "pipe or a file always gets the event")
    parser.add_argument("--deep", action="store_true",
                        help="with --backend pixal3d: run each lean part against the port's "
                             "own path on your port, weights and device, at reduced sizes "
                             "(about two minutes on an M-series Mac): agreement, memory and "
                             "time per part, the back ends and Metal packages "
                             "(docs/pixal3d.md, Deep self-check)")
    parser.add_argument("--report", metavar="FILE",
                        help="with --deep: write the check's answer, the deep check's report "
                             "included, to FILE as JSON (a new file: an existing one is never "
                             "replaced)")
    add_table_arguments(parser, "check")
    return parser


def check_deep_options(ns) -> None:
    """``--deep`` needs ``--backend pixal3d`` and runs on this machine (not ``--cluster``);
    ``--report`` needs ``--deep`` and a new file (:func:`deep.check_report_path`). Raises
    ``RunnerError('usage')``; sets ``ns.report_path``."""
    ns.report_path = None
    if ns.report is not None and not ns.deep:
        raise RunnerError("usage", "--report writes the deep check's report: it goes with "
                          "--deep.", "Add --deep --backend pixal3d, or leave --report out.")
    if not ns.deep:
        return
    if deep.BACKEND not in (ns.backend or []):
        raise RunnerError("usage", "--deep checks the pixal3d backend's lean parts against "
                          "the port.", "Add --backend pixal3d.")
    if ns.cluster is not None:
        raise RunnerError("usage", "--deep runs on this machine, not on a cluster's nodes.",
                          "Leave --cluster out (run the check on each node to check it).")
    ns.report_path = deep.check_report_path(ns.report)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m runner check``; returns the exit status."""
    parser = build_parser()
    raw = record_raw(parser)  # the option texts each node's own check is given
    try:
        ns = parser.parse_args(argv)
        check_backend_options(ns)
        check_deep_options(ns)
        require_cluster_for_token(ns)
    except RunnerError as err:
        if err.kind == "usage" and err.hint == KINDS["usage"].hint:
            err.hint = "Run `python -m runner check --help` for the options."
        # at a terminal the stderr line is the answer (no error event before it)
        return usage_failure(err, "check", sys.argv[1:] if argv is None else list(argv))
    human = console.wanted(ns.json)
    emitter = console.Console() if human else Emitter()  # at a terminal: the lines below, no JSON
    say = print if human else (lambda line: log(f"check: {line}"))
    if ns.cluster is not None:
        return _cluster(parser, ns, raw, emitter)
    try:
        result = probe(backend_options(ns))
    except RunnerError as err:
        explain(err.fields())
        emitter.event("error", **err.fields())
        return err.exit_code
    for key in ("v", "event", "t"):  # the probe's own envelope; check gets its own
        result.pop(key, None)
    wanted = ns.backend or [backends.DEFAULT]
    result["requested"] = wanted
    result["ok"] = all(result["backends"].get(b, {}).get("ok") for b in wanted)
    for line in summary_lines(result):  # for a person; a pipe's JSON is the interface
        say(line)
    deep_status = _deep(ns, result, emitter, say, human) if ns.deep else 0
    event = make("check", **result)
    emitter.emit(event)
    if ns.report_path is not None:
        deep.write_report(ns.report_path, event)
        say(f"report: {ns.report_path}")
    if result["ok"]:
        return 0
    if not result["torch"].get("ok") and any(backends.get(b).needs_torch for b in wanted
                                             if b in backends.BACKENDS):
        return RunnerError("no_torch", "").exit_code
    return deep_status or verdict_exit_code(result["backends"], wanted)


def _deep(ns, result: dict, emitter: Emitter, say, human: bool) -> int:
    """``--deep`` (:mod:`runner.commands.deep`): its lines, ``result["deep"]`` and
    ``result["ok"]``; returns its exit status (0: every part agrees)."""
    try:
        found, status = deep.deep_check(backend_options(ns), result["backends"].get(
            deep.BACKEND) or {}, emitter.emit, say, human)
    except RunnerError as err:
        explain(err.fields())
        found, status = {"ok": False, "ran": False, "error": err.fields()}, err.exit_code
    if ns.report_path is not None:
        found["report"] = str(ns.report_path)
    result["deep"] = found
    result["ok"] = bool(result["ok"] and found["ok"])
    if found.get("ran"):
        error = found.get("error")
        say("self-check: every lean part agrees with the port" if found["ok"] else
            f"self-check FAILED: {error['message'] if error else 'see above'}")
    return status


def summary_lines(result: dict) -> list[str]:
    """The ``check`` event's ``result`` for a person, one line each (printed on stderr as
    ``runner: check: LINE``): Python and torch, the devices available, every backend (``ok``,
    or its ``kind``, ``reason`` and ``hint``), and the verdict for the requested backends."""
    python = result.get("python") or {}
    torch = result.get("torch") or {}
    torch_text = f"torch {torch.get('version')}" if torch.get("ok") else \
        f"no torch ({torch.get('reason') or 'cannot be imported'})"
    devices = [name for name, d in (result.get("devices") or {}).items()
               if isinstance(d, dict) and d.get("available")]
    lines = [f"Python {python.get('version', '?')} ({python.get('executable', '?')}); "
             f"{torch_text}; devices: {', '.join(devices) or 'none'}"]
    lines += backend_lines(result.get("backends"))
    wanted = ", ".join(result.get("requested") or [])
    lines.append(f"ready for {wanted}" if result.get("ok") else f"NOT ready for {wanted}")
    return lines


def _cluster(parser, ns, raw: dict, emitter: Emitter) -> int:
    """``check --cluster ADDRESS`` (``runner.cluster.check``); an unreachable cluster is one
    ``error`` line."""
    try:
        return cluster_check(ns.cluster, node_argv(parser, ns, raw, None),
                             ns.backend or [backends.DEFAULT], emitter, ns.cluster_token_file)
    except RunnerError as err:
        explain(err.fields())
        emitter.event("error", **err.fields())
        return err.exit_code


def check_backend_options(ns) -> None:
    """Refuse the backend option values a run would refuse (``--keep-resident abc``), with the
    same ``RunnerError('usage')`` (exit 2) and message: ``JobOptions.parse`` of each backend
    over its own options as given. Unlike a run, an option of a backend that was not requested is
    allowed (``check --pixal3d-dir DIR`` reports every backend, the add-on's Check does that)."""
    given = backend_options(ns)
    for name in backends.names():
        entry = backends.get(name)
        JobOptions.parse(name, {o.dest: given.get(o.dest) for o in entry.options})
