"""Reach a Ray cluster: import Ray (optional: the ``cluster`` extra), check the address answers,
``ray.init`` with a time limit, and read the nodes. Every way this can fail is one
``RunnerError('cluster_unavailable')`` naming the address and what to do — or
``cluster_auth`` for a token the cluster requires and did not get (``runner.cluster.auth``) —
raised before any image is touched.

Ray prints to the driver's stdout in places (worker logs, C++ messages): :func:`shield_stdout`
moves the protocol's stream to a private copy of fd 1 and points fd 1 at stderr first, so
stdout keeps carrying only events.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import socket
import sys
import threading
from dataclasses import dataclass

from meshfacts.errors import RunnerError
from meshfacts.options import parse_ray_address
from meshfacts.units import format_size

from . import SLOT
from .auth import prepare, refused

CONNECT_TIMEOUT = 30.0
"""Seconds ``ray.init`` may take once the address answered (Ray itself retries for minutes)."""
PORT_TIMEOUT = 5.0
"""Seconds to wait for a TCP connection to the head's port before calling it unreachable."""

_SETUP_HINT = ("Start the head with `RAY_AUTH_MODE=token ray start --head --port=6379 "
               "--resources='{\"image_to_mesh\": 1}'` (0 keeps the head free of jobs, but then "
               "another node must offer a slot) and each other Mac, holding the head's token "
               "in ~/.ray/auth_token, with `RAY_AUTH_MODE=token ray start --address=HEAD:6379 "
               "--resources='{\"image_to_mesh\": 1}'` (docs/cluster.md); check the address and "
               "that the firewall lets the port through.")
"""Every ``cluster_unavailable`` hint's setup advice: the head offers 1 slot by default, as in
docs/cluster.md step 2 (a 1-machine user given 0 would get a cluster with no slot)."""


def _unavailable(address: str, message: str, hint: str = _SETUP_HINT) -> RunnerError:
    return RunnerError("cluster_unavailable", message, hint, address=address)


def parse_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for ``auto``
    (Ray finds the local cluster); the options table's ``parse_ray_address``, which the add-on's
    preference is checked with too. Raises ``RunnerError('usage')`` for anything else."""
    try:
        return parse_ray_address(address)
    except ValueError:
        raise RunnerError("usage", f"--cluster {address!r} is not a Ray address.",
                          "Give auto, HOST:PORT (e.g. 192.168.1.20:6379) or ray://HOST:10001."
                          ) from None


def _no_ray(address: str, why) -> RunnerError:
    return _unavailable(address, f"Ray is not installed in {sys.executable} ({why}), so the "
                        f"cluster at {address} cannot be used.",
                        f"Install it into the runner's Python: {sys.executable} -m pip "
                        "install 'image-to-mesh[cluster]' (ray[client]==2.60.0), or leave "
                        "--cluster out to run the batch on this machine.")


def require_ray(address: str) -> None:
    """Raise ``cluster_unavailable`` when this Python has no Ray, without importing it (Ray
    reads ``RAY_AUTH_MODE`` once, when imported: ``runner.cluster.auth`` decides it first)."""
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["ray"] is None
        found = False
    if not found:
        raise _no_ray(address, "No module named 'ray'")


def import_ray(address: str):
    """The ``ray`` module. Raises ``cluster_unavailable`` when this Python cannot import it."""
    try:
        import ray  # optional (the cluster extra): imported only by a cluster command
    except ImportError as exc:
        raise _no_ray(address, exc) from None
    return ray


def check_port(address: str, host: str, port: int) -> None:
    """Raise ``cluster_unavailable`` unless a TCP connection to ``host:port`` succeeds within
    ``PORT_TIMEOUT`` seconds (Ray's own connect would retry for minutes)."""
    try:
        with socket.create_connection((host, port), timeout=PORT_TIMEOUT):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _unavailable(address, f"Nothing answers at {host}:{port} ({reason}): no Ray "
                           f"cluster at {address}.") from None


def shield_stdout(emitter) -> None:
    """Give ``emitter`` a private duplicate of fd 1 and point fd 1 (and ``sys.stdout``) at
    stderr, so whatever Ray or a native library prints cannot corrupt the protocol."""
    with emitter._lock:
        emitter.stream.flush()
        emitter.stream = os.fdopen(os.dup(1), "wb", buffering=0)
    sys.stdout.flush()
    os.dup2(2, 1)


class _NoSigtermNotice(logging.Filter):
    """Drops exactly Ray's "SIGTERM handler is not set because current thread is not the main
    thread" warning (``ray._private.worker``, from ``ray.init``; every other record passes).
    ``ray.init`` runs in a thread of ours on purpose: for its time limit, and so that Ray does
    not replace the runner's own SIGTERM handler (the batch's cancel) with its ``sys.exit``
    one, which it installs only when called from the main thread. Ray documents its driver's
    logs as plain Python ``logging`` (docs.ray.io, "Configuring Logging"), so a filter on the
    logger that emits it is the way to leave out one record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SIGTERM handler is not set")


_SIGTERM_FILTER = _NoSigtermNotice()


def connect(address: str, token_file: str | None = None):
    """Import Ray and connect to the cluster at ``address``, authenticated with the token
    from Ray's own sources or ``token_file`` (``runner.cluster.auth``); returns ``(ray, auth)``
    (``auth.Auth``: whether the cluster requires a token, where the token sent comes from).
    Raises ``RunnerError``: ``usage`` (not an address), ``cluster_unavailable``,
    ``cluster_auth``."""
    where = parse_address(address)
    require_ray(address)
    if where is not None:
        check_port(address, *where)
    auth = prepare(address, where, token_file)  # before Ray is imported: it reads the mode once
    ray = import_ray(address)
    outcome: dict = {}

    def init() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            outcome["ok"] = True
        except BaseException as exc:  # Ray raises ConnectionError, RuntimeError, ValueError …
            outcome["error"] = exc

    logging.getLogger("ray._private.worker").addFilter(_SIGTERM_FILTER)  # idempotent
    thread = threading.Thread(target=init, name="runner-ray-init", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT)
    if "ok" in outcome:
        return ray, auth
    if "error" in outcome:
        exc = outcome["error"]
        denied = refused(address, exc)
        if denied is not None:
            raise denied from None
        raise _unavailable(address, f"Could not connect to the Ray cluster at {address} "
                           f"({type(exc).__name__}: {str(exc).strip()[:300]}).") from None
    raise _unavailable(address, f"{address} answered but no Ray cluster connected within "
                       f"{CONNECT_TIMEOUT:.0f} s.")


@dataclass(frozen=True)
class NodeInfo:
    """One alive node: Ray ``id`` (hex), ``host`` (its host name), ``ip``, logical ``memory``
    (bytes Ray may admit there), ``slots`` (``image_to_mesh`` units), ``cpus``."""

    id: str
    host: str
    ip: str
    memory: int
    slots: int
    cpus: float

    def label(self) -> dict:
        """The ``node`` field of events and manifest records: ``{"id", "host"}``."""
        return {"id": self.id, "host": self.host}


def alive_nodes(ray) -> list[NodeInfo]:
    """The cluster's alive nodes (``ray.nodes()``), in Ray's order."""
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources") or {}
        out.append(NodeInfo(id=n["NodeID"], host=n.get("NodeManagerHostname") or "?",
                            ip=n.get("NodeManagerAddress") or "?",
                            memory=int(res.get("memory", 0)), slots=int(res.get(SLOT, 0)),
                            cpus=float(res.get("CPU", 0))))
    return out


def require_room(nodes: list[NodeInfo], address: str, need: int | None) -> None:
    """Raise ``cluster_unavailable`` unless some node offers a slot (and, with ``need`` in
    bytes, that much memory): otherwise every task would wait for ever."""
    slotted = [n for n in nodes if n.slots >= 1]
    if not slotted:
        raise _unavailable(address, f"No node of the cluster at {address} offers the {SLOT} "
                           f"resource ({len(nodes)} node(s) alive), so no image could run.",
                           "Start each node that should run jobs with `RAY_AUTH_MODE=token ray "
                           "start --address=HEAD:6379 --resources='{\"image_to_mesh\": 1}'` "
                           "(docs/cluster.md).")
    if need and not any(n.memory >= need for n in slotted):
        best = max(n.memory for n in slotted)
        raise _unavailable(address, f"No node offering {SLOT} has the {format_size(need)} "
                           f"--need asks for (the most any offers is {format_size(best)}).",
                           "Lower --need, or start a node with more memory for Ray (`ray "
                           "start --memory BYTES`).")
