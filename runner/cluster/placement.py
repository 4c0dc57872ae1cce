"""Where and how an image's task is placed, and what a finished attempt means.

Placement: every task asks for one ``image_to_mesh`` slot (``runner.cluster.SLOT``; a node
offers as many as it may run jobs at once) and, with ``--need``/``--need-from``, ``memory=``
that many bytes, so Ray sends it only to a node with a free slot whose offered memory is
still unclaimed. ``memory=`` is admission only (Ray docs, "Resources": logical resources do not
limit what a task uses): on the node the runner's own guard admits and budgets the job, as on
one machine. No CPU is asked for (``num_cpus=0``): slots, not cores, decide.

Retries are ours, not Ray's (``max_retries=0``), so each one is recorded: a lost node (any Ray
system error: node died, worker crashed, object lost) and a node whose guard did not admit the
job in time (``guard_timeout``) give the image back to be placed again — avoiding the nodes that
refused it while others could take it — up to ``MAX_ATTEMPTS`` attempts. A node that cannot run the
job at all (``NODE_LEVEL``: weights or Pixal3D missing there, …) is excluded for the rest of
the batch and the image placed again elsewhere; when no node is left, the image fails with
that kind, naming the nodes. The image's own errors (bad input, ``empty_matte``,
``empty_mesh`` …) are final after one attempt.
"""
from __future__ import annotations

import functools
import threading

from meshfacts.errors import KINDS, RunnerError

from . import SLOT

MAX_ATTEMPTS = 3
"""Attempts per image (the first and two retries on other placements)."""
GIVE_BACK = frozenset({"guard_timeout"})
"""Error kinds that mean "this node had no room", not "this image failed": placed again."""
NODE_LEVEL = frozenset({"no_torch", "worker_unstartable", "backend_unavailable",
                        "pixal3d_missing", "pixal3d_version", "missing_dependency",
                        "bad_weights", "weights_missing"})
"""Error kinds that are the node's problem (its Python, backend, Pixal3D checkout or weights),
not the image's: the node is excluded for the rest of the batch (:class:`Exclusions`) and the
image placed again on another, until no node is left to try."""
NODE_ID_LABEL = "ray.io/node-id"
"""The label every Ray node carries with its own id (``ray.util.placement_group``)."""

#: Options of the batch command that belong to the head, never to a node's job: the folders,
#: the cluster itself and its token file, how this process is cancelled, --overwrite (the node
#: writes into a fresh folder; the head decides what it may replace), and the guard's
#: --need-from (a file on the head: sent as --need BYTES) and --log (a file path on the head:
#: refused with --cluster).
HEAD_ONLY = frozenset({"input_dir", "output_dir", "cluster", "cluster_token_file", "overwrite",
                       "cancel_on_stdin_eof", "ignore_stdin", "guard_need_from", "guard_log",
                       "help"})


def record_raw(parser) -> dict[str, list[str]]:
    """Make ``parser`` remember the text of every value given to an option a node's job
    takes (not ``HEAD_ONLY``); returns the dict (``dest`` → texts, in order) it fills while
    parsing. The texts are passed on as typed, so the node's runner parses them exactly as a
    local run would."""
    raw: dict[str, list[str]] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in HEAD_ONLY or action.nargs == 0:
            continue
        inner = action.type or str

        @functools.wraps(inner)
        def typed(text, _inner=inner, _dest=action.dest, _default=action.default):
            value = _inner(text)
            if text is not _default:  # argparse also types a string default: not given
                raw.setdefault(_dest, []).append(text)
            return value

        action.type = typed
    return raw


def node_argv(parser, ns, raw: dict[str, list[str]], need: int | None) -> list[str]:
    """The job and guard options for a node's ``python -m runner`` (``--flag=value`` form, so
    a value starting with ``-`` stays a value): the values given on the command line, the
    switches set, and ``--need BYTES`` when the need came from ``--need-from``."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in HEAD_ONLY:
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:
            if getattr(ns, action.dest, None) not in (None, False, action.default):
                argv.append(flag)
            continue
        texts = raw.get(action.dest, [])
        keep = texts if isinstance(getattr(ns, action.dest, None), list) else texts[-1:]
        argv += [f"{flag}={text}" for text in keep]
    if need is not None and not raw.get("guard_need"):
        argv.append(f"--need={need}")
    return argv


def task_options(need: int | None, avoid: set[str] = frozenset()) -> dict:
    """Ray task options for one attempt: a slot, ``memory=need`` (bytes) when given, no CPU,
    no retries by Ray, and (``avoid``: node ids) a label selector keeping it off those
    nodes."""
    options = {"num_cpus": 0, "resources": {SLOT: 1}, "max_retries": 0,
               "retry_exceptions": False}
    if need:
        options["memory"] = int(need)
    if avoid:
        options["label_selector"] = {NODE_ID_LABEL: f"!in({','.join(sorted(avoid))})"}
    return options


def avoidable(nodes, refused: set[str], need: int | None) -> set[str]:
    """The nodes to keep the next attempt off: those that ``refused`` it, but only while some
    other alive node (``connect.NodeInfo``) could take it (a slot, enough memory); else none,
    so the image waits for room rather than for ever."""
    others = [n for n in nodes if n.id not in refused and n.slots >= 1
              and (not need or n.memory >= need)]
    return set(refused) if others else set()


class Exclusions:
    """The nodes excluded for the rest of a batch because they cannot run its jobs
    (``NODE_LEVEL``): node id → ``{"node": {"id", "host"}, "kind", "message"}``. Shared by the
    batch's image threads (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._nodes: dict[str, dict] = {}

    def add(self, node: dict, kind: str, message: str) -> bool:
        """Exclude ``node`` (a ``{"id", "host"}`` label); True the first time."""
        with self._lock:
            if node["id"] in self._nodes:
                return False
            self._nodes[node["id"]] = {"node": node, "kind": kind, "message": message}
            return True

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._nodes)

    def failure(self):
        """The image's error when every node that could take it is excluded: the kind of the
        latest exclusion, the message naming each node and its reason. Returns a
        ``RunnerError``."""
        with self._lock:
            entries = list(self._nodes.values())
        kind = entries[-1]["kind"]
        why = "; ".join(f"node {e['node'].get('host', '?')}: {e['kind']}: "
                        f"{e['message'][:300]}" for e in entries)
        return RunnerError(kind, f"No node of the cluster can run this job ({why}).",
                           f"{KINDS[kind].hint} On each node named; `python -m runner check "
                           "--cluster ADDRESS` shows what every node can run.")


def next_avoid(nodes, refused: set[str], excluded: set[str], need: int | None) -> set[str] | None:
    """The nodes to keep the next attempt off: every ``excluded`` one, and those that
    ``refused`` it while another alive node (``connect.NodeInfo``) could take it
    (:func:`avoidable`). None when exclusions left no alive node with a slot (and, with
    ``need`` bytes, that much memory): the image cannot run anywhere."""
    def fits(n) -> bool:
        return n.slots >= 1 and (not need or n.memory >= need)

    usable = [n for n in nodes if n.id not in excluded and fits(n)]
    if excluded and not usable and any(fits(n) for n in nodes):
        return None
    return set(excluded) | avoidable(usable, refused, need)
