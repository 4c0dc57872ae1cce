"""``python -m runner check --cluster ADDRESS``: the cluster's nodes, what each offers (the
memory Ray may admit there, ``image_to_mesh`` slots, CPUs) and which backends can run there —
each node's own ``python -m runner check`` (same backend options), run as a Ray task pinned to
that node (``NodeAffinitySchedulingStrategy(soft=False)``, no CPU asked for).

One ``check`` line on stdout: ``cluster`` {``address``, ``auth`` {``required``: whether the
cluster requires a token (null: not known for an ``auto`` or ``ray://`` address),
``token_from``: where the token sent comes from, or null}, ``nodes``: [{``id``, ``host``,
``ip``, ``memory``, ``slots``, ``cpus``, ``backends`` (the node's verdicts) or ``error``}]},
``requested`` and ``ok`` (some node with a slot can run every requested backend). A cluster
that requires no token gets ``runner: warning: …`` on stderr (anyone reaching it runs code on
its nodes). Exit 0 when ok, else ``cluster_unavailable`` (37); an unreachable cluster is an
``error`` line (37), a token missing or refused one of kind ``cluster_auth`` (38).
"""
from __future__ import annotations

import json
import subprocess
import sys

from meshfacts.errors import RunnerError
from meshfacts.events import make
from meshfacts.units import format_size
from runner.backends.verdicts import backend_lines
from runner.job.trace import log

from .connect import alive_nodes, connect, shield_stdout

NODE_CHECK_TIMEOUT = 180.0
"""Seconds a node's own check may take (it imports torch in a subprocess)."""


def node_check(argv: list[str]) -> dict:
    """On a node: ``python -m runner check ARGV`` with this interpreter; returns its one
    line, parsed (the ``check`` or ``error`` event)."""
    proc = subprocess.run([sys.executable, "-m", "runner", "check", *argv],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=NODE_CHECK_TIMEOUT)
    for line in proc.stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return {"event": "error", "message": f"no answer (exit {proc.returncode}): "
                                         f"{proc.stderr.strip()[-300:]}"}


def _probe_all(ray, nodes, argv: list[str]) -> list[dict]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # Ray: optional

    remote = ray.remote(node_check)
    refs = [remote.options(num_cpus=0, max_retries=0, scheduling_strategy=
                           NodeAffinitySchedulingStrategy(n.id, soft=False)).remote(argv)
            for n in nodes]
    rows = []
    for node, ref in zip(nodes, refs, strict=True):
        row = {"id": node.id, "host": node.host, "ip": node.ip, "memory": node.memory,
               "slots": node.slots, "cpus": node.cpus}
        try:
            answer = ray.get(ref, timeout=NODE_CHECK_TIMEOUT + 30)
        except Exception as exc:  # the node was lost, or its check hung
            row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        else:
            if answer.get("event") == "check":
                row["backends"] = answer.get("backends")
                row["python"] = (answer.get("python") or {}).get("version")
            else:
                row["error"] = answer.get("message")
        rows.append(row)
    return rows


def summary_lines(address: str, rows: list[dict], wanted: list[str], ok: bool) -> list[str]:
    """The cluster check for a person (stderr, ``runner: check: LINE``): per node its host,
    address, slots, memory and Python, then its backends
    (``runner.commands.check.backend_lines``) or why it could not be checked; then the verdict
    naming the nodes ready for ``wanted``."""
    lines, ready = [], []
    for row in rows:
        lines.append(f"node {row['host']} ({row['ip']}): {row['slots']} slot(s), "
                     f"{format_size(row['memory'])} for Ray, Python {row.get('python') or '?'}")
        if "error" in row:
            lines.append(f"  could not check it: {row['error']}")
            continue
        lines += [f"  {line}" for line in backend_lines(row.get("backends"))]
        if row["slots"] >= 1 and all((row.get("backends") or {}).get(b, {}).get("ok")
                                     for b in wanted):
            ready.append(row["host"])
    names = ", ".join(wanted)
    lines.append(f"ready for {names} on {len(ready)} node(s): {', '.join(ready)}" if ok else
                 f"NOT ready for {names}: no node with a slot can run it ({address})")
    return lines


def auth_lines(address: str, auth) -> tuple[str, str | None]:
    """What ``check --cluster`` says of the cluster's authentication (``auth.Auth``): the
    line for a person, and the warning when the cluster requires no token (None otherwise)."""
    if auth.required:
        return f"token authentication: required; token from {auth.token_from}", None
    if auth.required is None:
        sent = f"token from {auth.token_from}" if auth.token_from else "no token sent"
        return f"token authentication: not known for this address ({sent})", None
    return ("token authentication: NOT required", f"the Ray cluster at {address} does not "
            "require a token: anyone who can reach its port can run code on every node. "
            "Restart the head and the nodes with RAY_AUTH_MODE=token (docs/cluster.md).")


def cluster_check(address: str, argv: list[str], wanted: list[str], emitter,
                  token_file: str | None = None) -> int:
    """Check the cluster at ``address`` (``argv``: the backend options for each node's own
    check; ``token_file``: ``--cluster-token-file``); prints the ``check`` line and returns
    the exit status. Raises ``RunnerError`` (``usage``, ``cluster_unavailable``,
    ``cluster_auth``) before printing anything."""
    shield_stdout(emitter)
    ray, auth = connect(address, token_file)
    try:
        rows = _probe_all(ray, alive_nodes(ray), argv)
    finally:
        ray.shutdown()
    ok = any(r["slots"] >= 1 and all((r.get("backends") or {}).get(b, {}).get("ok")
                                     for b in wanted) for r in rows)
    emitter.emit(make("check", cluster={"address": address, "auth": auth.fields(),
                                        "nodes": rows}, requested=wanted, ok=ok))
    line, warning = auth_lines(address, auth)
    log(f"check: {line}")
    for line in summary_lines(address, rows, wanted, ok):  # for a person, as a local check
        log(f"check: {line}")
    if warning:
        log(f"warning: {warning}")
    return 0 if ok else RunnerError("cluster_unavailable", "").exit_code
