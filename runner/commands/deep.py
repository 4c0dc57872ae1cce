"""``python -m runner check --backend pixal3d --deep [--report FILE]``: the pixal3d backend's
lean parts run against the port's own path on the user's port, weights and device
(``stageload.pixal3d.selfcheck``, in a worker subprocess: the supervisor never imports torch).

The worker (``python -m runner.worker.run --self-check pixal3d``) sends one ``self_check``
event per part as it finishes, then ``self_check_done`` (the report's other facts) or an
``error``. At a terminal each part is one line as it arrives, then the back ends, the Metal
packages, what could not be checked and why, and the report's path; in a pipe the
``self_check`` events are relayed as they come. The ``check`` event then carries ``deep``
(the report: every part, the back ends, the Metal packages, ``unchecked``, ``report``), and
``--report FILE`` gets the whole ``check`` event as JSON — a new file only: an existing one is
never replaced (a ``usage`` error before anything runs, so nothing is lost either way).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

from meshfacts.errors import RunnerError
from meshfacts.units import format_size
from runner.job.child import child_env
from runner.protocol import relay

BACKEND = "pixal3d"
"""The one backend with lean parts to check."""
TIMEOUT = 900.0
"""Seconds the worker may take (about two minutes on an M-series Mac; a CPU run of the real
port is slower): past it, it is stopped and the check fails."""
WOULD_CHECK = ("the conditioning: a texture pass at 256x256, lean against the port's "
               "get_proj_cond_shape; one flow step's attention (4,096 tokens), lean's query "
               "slices against the port's back end; a shape decoder pass on a 512-voxel latent, "
               "lean's row chunks against the port's decode_shape_slat")
"""What the deep check runs, for a person (``stageload.pixal3d.selfcheck.parts.PARTS``; this
process may not import stageload's torch side to read it)."""


def check_report_path(report: Optional[str]) -> Optional[Path]:
    """``--report FILE`` checked before anything runs: its folder exists and it does not.
    Raises ``RunnerError('usage')`` naming what to do."""
    if report is None:
        return None
    path = Path(report).expanduser().absolute()
    if path.exists() or path.is_symlink():
        raise RunnerError("usage", f"--report {report}: the file exists; the check never "
                          "replaces a file.", "Give a new file name, or move the old report.")
    if not path.parent.is_dir():
        raise RunnerError("usage", f"--report {report}: the folder {path.parent} does not "
                          "exist.", "Give a file in an existing folder.")
    return path


def worker_argv(python: str, events_fd: int, options: dict) -> list[str]:
    """The worker's command line for the self-check (backend options as JSON)."""
    return [python, "-m", "runner.worker.run", "--events-fd", str(events_fd), "--self-check",
            BACKEND, "--backend-options", json.dumps(options)]


def run_worker(options: dict, on_event: Callable[[dict], None],
               python: Optional[str] = None) -> dict:
    """Run the self-check worker, hand each event to ``on_event`` as it arrives; return its
    last event (``self_check_done`` or ``error``). Raises ``RunnerError('worker_crashed')``
    when it gave neither (a crash, or stopped after :data:`TIMEOUT`)."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(worker_argv(python or sys.executable, write_fd, options),
                                pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=sys.stderr.fileno(), env=child_env(),
                                start_new_session=True)
    finally:
        os.close(write_fd)
    timer = threading.Timer(TIMEOUT, proc.kill)
    timer.start()
    last = None
    try:
        with os.fdopen(read_fd, "r", encoding="utf-8") as pipe:
            for line in pipe:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if isinstance(ev, dict) and ev.get("event") in ("self_check_done", "error"):
                    last = ev
                elif isinstance(ev, dict):
                    on_event(ev)
        proc.wait()
    finally:
        timer.cancel()
    if last is None:
        raise RunnerError("worker_crashed", f"The deep check's worker gave no answer (exit "
                          f"status {proc.returncode}; stopped after {TIMEOUT:.0f} s when it "
                          "ran that long).", "See the log on stderr; run the check again.")
    return last


def deep_check(options: dict, verdict: dict, emit, say: Callable[[str], None],
               human: bool) -> tuple[dict, int]:
    """The deep check after the plain one (``verdict``: the pixal3d backend's check). Returns
    ``(deep, exit status)``: ``deep`` for the ``check`` event, the status 0 when every part
    agrees (a skipped part is listed, not a failure), else the failure's kind's code."""
    if not verdict.get("ok"):
        kind = verdict.get("kind") or "backend_unavailable"
        say(f"deep check not run: {verdict.get('reason') or 'pixal3d cannot run here'}")
        say(f"it would check {WOULD_CHECK}")
        err = RunnerError(kind, str(verdict.get("reason") or ""))
        return {"ok": False, "ran": False, "error": err.fields(),
                "would_check": WOULD_CHECK}, err.exit_code
    parts: list[dict] = []

    def on_event(ev: dict) -> None:
        if not human:  # a pipe: the events as they come (the lines go to stderr)
            emit(relay(ev))
        if ev.get("event") == "self_check":
            parts.append({k: v for k, v in ev.items() if k not in ("v", "event", "t")})
            say(part_line(ev))

    last = run_worker(options, on_event)
    if last.get("event") == "error":
        fields = {k: last.get(k) for k in ("kind", "message", "hint", "exit_code")}
        say(f"deep check failed: {fields['kind']}: {fields['message']}")
        return {"ok": False, "ran": False, "error": fields, "parts": parts,
                "would_check": WOULD_CHECK}, int(fields.get("exit_code") or 1)
    deep = {k: v for k, v in last.items() if k not in ("v", "event", "t")}
    deep.update(ran=True, parts=parts)
    for line in environment_lines(deep):
        say(line)
    bad = [p for p in parts if p.get("ok") is False]
    if not bad:
        return deep, 0
    err = RunnerError("self_check_failed", "; ".join(
        f"{p['part']} {p['status']}" + (f" ({p['agreement']:.2e} > bound {p['bound']:g})"
                                         if p.get("agreement") is not None else "")
        + (f": {p['note']}" if p.get("note") and p["status"] == "failed" else "")
        for p in bad))
    deep["error"] = err.fields()
    return deep, err.exit_code


def _figures(path: Optional[dict]) -> str:
    if not isinstance(path, dict):
        return "—"
    memory = path.get("memory") if isinstance(path.get("memory"), dict) else {}
    words = {"mps_current": "current", "mps_driver": "driver", "process": "process",
             "cuda": "allocated"}
    held = ", ".join(f"{words.get(k, k)} {format_size(v)}" for k, v in memory.items())
    return f"{path.get('seconds', 0):.1f} s" + (f", {held}" if held else "")


def part_line(ev: dict) -> str:
    """One part for a person: ``conditioning: agrees 4.4e-08 (bound 1e-04) · port 3.2 s,
    current 4.6 GiB, driver 4.8 GiB · lean 2.9 s, … — what was computed``."""
    status = ev.get("status")
    head = f"{ev.get('part')}: {status}"
    if ev.get("agreement") is not None:
        head += f" {ev['agreement']:.1e} (bound {ev.get('bound', 0):.0e})"
    if status in ("agrees", "differs"):
        head += f" · port {_figures(ev.get('port'))} · lean {_figures(ev.get('lean'))}"
    if ev.get("size"):
        head += f" — {ev['size']}"
    if ev.get("note"):
        head += f" ({ev['note']})"
    fell_back = [said for said in ev.get("said") or [] if said.startswith("warning: ")]
    if fell_back:  # lean did not act: the agreement then says nothing about it
        head += f" · lean fell back: {fell_back[0][len('warning: '):]}"
    return head


def environment_lines(deep: dict) -> list[str]:
    """The back ends, the Metal packages (and what a missing one changes), what was not
    checked and why, and how memory was measured — for a person."""
    lines = []
    backends = deep.get("backends") if isinstance(deep.get("backends"), dict) else {}
    env = backends.get("environment") or {}
    set_by = f" (set: {', '.join(f'{k}={v}' for k, v in env.items())})" if env else ""
    lines.append(f"back ends the port chose: attention {backends.get('attention')}, sparse "
                 f"convolution {backends.get('convolution') or 'not named by this port'}"
                 f"{set_by}")
    for package in deep.get("metal") or []:
        if isinstance(package, dict):
            found = "found" if package.get("found") else f"not found: {package.get('effect')}"
            lines.append(f"Metal package {package.get('package')} ({package.get('module')}): "
                         f"{found}")
    for what in deep.get("unchecked") or []:
        lines.append(f"not checked: {what}")
    parts = deep.get("parts") or []
    measured = parts[0].get("memory_measured") if parts else None
    if measured and not any(measured in line for line in lines):  # said once is enough
        lines.append(f"memory: {measured}")
    lines.append(f"device {deep.get('device')}, {deep.get('seconds', 0):.1f} s in all")
    return lines


def write_report(path: Path, check_event: dict) -> None:
    """Write the ``check`` event (with ``deep``) to ``path`` as JSON, a new file only
    (``O_EXCL``: a file that appeared since the start is not replaced either)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(check_event, f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")


__all__ = ["check_report_path", "deep_check", "environment_lines", "part_line", "write_report"]
