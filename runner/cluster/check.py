"""``python -m runner check --cluster ADDRESS``: the cluster's nodes, what each offers (the
memory Ray may admit there, ``image_to_mesh`` slots, CPUs) and which backends can run there —
each node's own ``python -m runner check`` (same backend options), run as a Ray task pinned to
that node (``NodeAffinitySchedulingStrategy(soft=False)``, no CPU asked for).

One ``check`` line on stdout: ``cluster`` {``address``, ``nodes``: [{``id``, ``host``, ``ip``,
``memory``, ``slots``, ``cpus``, ``backends`` (the node's verdicts) or ``error``}]},
``requested`` and ``ok`` (some node with a slot can run every requested backend). Exit 0 when
ok, else ``cluster_unavailable`` (37); an unreachable cluster is an ``error`` line (37).
"""
from __future__ import annotations

import json
import subprocess
import sys

from ..errors import RunnerError
from ..jobtrace import log
from ..protocol import make
from ..verdicts import backend_lines

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
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

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
    address, slots, memory and Python, then its backends (``runner.check.backend_lines``) or
    why it could not be checked; then the verdict naming the nodes ready for ``wanted``."""
    from stageload.units import format_size

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


def cluster_check(address: str, argv: list[str], wanted: list[str], emitter) -> int:
    """Check the cluster at ``address`` (``argv``: the backend options for each node's own
    check); prints the ``check`` line and returns the exit status. Raises ``RunnerError``
    (``usage``, ``cluster_unavailable``) before printing anything."""
    from .connect import alive_nodes, connect, shield_stdout

    shield_stdout(emitter)
    ray = connect(address)
    try:
        rows = _probe_all(ray, alive_nodes(ray), argv)
    finally:
        ray.shutdown()
    ok = any(r["slots"] >= 1 and all((r.get("backends") or {}).get(b, {}).get("ok")
                                     for b in wanted) for r in rows)
    emitter.emit(make("check", cluster={"address": address, "nodes": rows}, requested=wanted,
                      ok=ok))
    for line in summary_lines(address, rows, wanted, ok):  # for a person, as a local check
        log(f"check: {line}")
    return 0 if ok else RunnerError("cluster_unavailable", "").exit_code
