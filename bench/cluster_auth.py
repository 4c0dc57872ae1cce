"""``python -m bench.cluster_auth``: what token authentication costs a cluster batch, and how
long a refusal takes to reach the person.

Usage (from the repository root; needs the cluster extra)::

    .venv/bin/python -m bench.cluster_auth                  # 5 runs of each
    .venv/bin/python -m bench.cluster_auth --runs 9 --out /tmp/a.json

One head node on this machine, started as docs/cluster.md says (``RAY_AUTH_MODE=token ray
start --head …``, the token in a file named by ``RAY_AUTH_TOKEN_PATH``, every port chosen
free, a temporary folder of its own), then, each in a fresh process with a home folder that
holds no token:

1. ``question_ms``: ``runner.cluster.auth.gcs_requires_token`` — the question the runner asks
   the head before importing Ray — without and with the token, ``--runs`` times each in one
   process (milliseconds, median and max): what every ``--cluster`` batch now spends on it;
2. ``refused_seconds``: ``python -m runner batch … --cluster`` without a token, wall seconds
   to its ``cluster_auth`` exit (median of ``--runs``);
3. ``ray_init_seconds``: what the same mistake costs without the question — ``ray.init`` on
   that address from a Python without the token, wall seconds to its ``ConnectionError``
   (once: Ray retries for about 20 s).

The head is stopped (its process group, SIGKILL for what SIGTERM leaves) and the bench fails
when a process of it is left. The result is JSON in ``--out`` (default
``bench/results/cluster_auth_bench.json``). One machine, no network between driver and head.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cluster import machine_facts

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = HERE / "results" / "cluster_auth_bench.json"
PORT_FLAGS = ("--port", "--node-manager-port", "--object-manager-port", "--metrics-export-port",
              "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port",
              "--runtime-env-agent-port", "--dashboard-port", "--ray-client-server-port")
RAY_INIT = ("import logging, sys, ray\ntry:\n    ray.init(address=sys.argv[1], "
            "log_to_driver=False, logging_level=logging.ERROR)\nexcept Exception as exc:\n"
            "    print(type(exc).__name__)\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(tmp: Path, token_file: Path) -> tuple[str, int]:
    """``RAY_AUTH_MODE=token ray start --head`` in a session of its own; returns the address
    and its process group."""
    ports = {flag: _free_port() for flag in PORT_FLAGS}
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file),
           "HOME": str(tmp / "head-home")}
    env.pop("RAY_AUTH_TOKEN", None)
    ray = Path(sys.executable).with_name("ray")
    argv = [str(ray if ray.exists() else shutil.which("ray")), "start", "--head",
            "--include-dashboard=false", f"--temp-dir={tmp / 'ray'}", "--num-cpus=1",
            "--node-ip-address=127.0.0.1", "--disable-usage-stats",
            *[f"{flag}={port}" for flag, port in ports.items()]]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out, _ = proc.communicate(timeout=180)
    if proc.returncode != 0:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(f"bench.cluster_auth: ray start failed: {out[-2000:]}")
    return f"127.0.0.1:{ports['--port']}", proc.pid


def stop_head(group: int) -> int:
    """SIGTERM then SIGKILL the head's process group; returns how many processes are left."""
    import psutil

    def members() -> list:
        out = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == group and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (psutil.Error, OSError):
                pass
        return out

    procs = members()
    procs += [c for p in procs for c in p.children(recursive=True)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=10)
    return len([p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])


def timed(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    began = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - began, proc


def measure(address: str, token: str, tmp: Path, runs: int) -> dict:
    from runner.cluster.auth import gcs_requires_token

    host, port = address.split(":")
    questions: dict = {}
    for name, given in (("without_token", None), ("with_token", token)):
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            answer = gcs_requires_token(host, int(port), given)
            times.append((time.perf_counter() - began) * 1000)
        if answer is not (given is None):
            raise SystemExit(f"bench.cluster_auth: the head answered {answer} {name}")
        questions[name] = {"median": round(statistics.median(times), 2),
                           "max": round(max(times), 2)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(tmp / "driver-home"), PYTHONPATH=str(REPO))
    (tmp / "in").mkdir()
    shutil.copy(REPO / "tests" / "data" / "images" / "character_1.png", tmp / "in")
    refused = []
    for _ in range(runs):
        wall, proc = timed([sys.executable, "-m", "runner", "batch", str(tmp / "in"), "-o",
                            str(tmp / "out"), "--cluster", address], env)
        if proc.returncode != 38:
            raise SystemExit(f"bench.cluster_auth: expected cluster_auth (38), got "
                             f"{proc.returncode}: {proc.stderr[-2000:]}")
        refused.append(wall)
    wall, proc = timed([sys.executable, "-c", RAY_INIT, address], env)
    if "ConnectionError" not in proc.stdout:
        raise SystemExit(f"bench.cluster_auth: ray.init without a token: {proc.stdout!r}")
    return {"question_ms": questions,
            "refused_seconds": {"median": round(statistics.median(refused), 3),
                                "max": round(max(refused), 3)},
            "ray_init_seconds": round(wall, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_auth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each timed step")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    # Ray's socket paths must stay under 108 bytes: a short temporary folder
    with tempfile.TemporaryDirectory(prefix="auth-") as tmp:
        tmp = Path(tmp)
        token = secrets.token_hex(32)
        (tmp / "token").write_text(token + "\n")
        address, group = start_head(tmp, tmp / "token")
        try:
            figures = measure(address, token, tmp, args.runs)
        finally:
            left = stop_head(group)
        if left:
            raise SystemExit(f"bench.cluster_auth: {left} process(es) of the head were left")
    result = {"bench": "cluster_auth", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {**machine_facts(), "load_average": round(os.getloadavg()[0], 2)},
              "runs": args.runs, **figures,
              "note": "driver and head on one machine (127.0.0.1)"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
