"""``ClusterBatch``: ``python -m runner batch DIR -o OUTDIR --cluster ADDRESS`` on the head.

The same command as a local batch (``runner.batch.folder.Batch``: the folder, the output names, the
resume rules, the manifest merged under the folder's lock, ``batch_item``/``batch_done``), with
the images run at once as Ray tasks (``runner.cluster.remote.RemoteJob``, one thread each) instead
of one after another here. Each record in the manifest and each ``batch_item`` also carries
``node`` (``{"id", "host"}``, the node that ran the image's last attempt, null when it never
ran) and ``retries`` (``[{"node", "reason"}]``, the attempts given back: node lost, or no room
in time).

Order: ``hello`` → connect (``cluster_unavailable``, or ``cluster_auth`` for a token the
cluster requires and did not get, before any image is touched) → the folder
→ the skips (name order, as planned: the manifest is read once per image when it is planned,
not when its node starts it) → per image ``placed`` then its job's events (``item``, ``node``)
and ``batch_item``, in the order the nodes finish → ``batch_done``.

Cancel (SIGTERM, SIGINT, SIGHUP, a closed stdin with ``--cancel-on-stdin-eof``, the parent
gone): every task is cancelled with ``ray.cancel`` (the running ones get KeyboardInterrupt and
stop their runner, see ``runner.cluster.node``), those still running after ``FORCE_AFTER``
seconds are cancelled with ``force=True`` (the worker process is killed; its runner stops its
job on its parent's death); nothing is written for an image that did not finish; the images
that were running are recorded ``cancelled``; the batch ends with ``error`` ``cancelled`` (130).
"""
from __future__ import annotations

import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from meshfacts.errors import RunnerError
from meshfacts.events import make
from runner.batch.folder import Batch, output_names
from runner.job.records import Outcome, explain_warning
from runner.job.trace import log

from .auth import require_cluster_for_token
from .connect import alive_nodes, connect, parse_address, require_room, shield_stdout
from .node import node_job
from .placement import Exclusions, node_argv
from .remote import RemoteJob

FORCE_AFTER = 2.0
"""Seconds between the gentle ``ray.cancel`` and ``force=True`` for tasks still running."""
MAX_THREADS = 64
"""At most this many images are in flight (submitted to Ray) at once."""


def check_cluster_options(ns) -> None:
    """Options that cannot apply on a cluster, and ``--cluster-token-file`` without
    ``--cluster`` (a token for no cluster). Raises ``RunnerError('usage')``."""
    require_cluster_for_token(ns)
    if ns.cluster is None:
        return
    parse_address(ns.cluster)
    if getattr(ns, "guard_log", None):
        raise RunnerError("usage", "--log names a file on this machine; the guards of a "
                          "cluster batch run on the nodes.", "Leave --log out with --cluster: "
                          "each image's trace holds its guard's decisions.")


class ClusterBatch(Batch):
    """A batch on the Ray cluster at ``ns.cluster``. ``parser``/``raw``: the batch parser and
    the option texts ``runner.cluster.placement.record_raw`` kept (the nodes' job options)."""

    def __init__(self, ns, options: dict, config, emitter, cancel, *, parser, raw):
        super().__init__(ns, options, config, emitter, cancel)

        self.address = ns.cluster
        self.need = config.need
        self.node_argv = node_argv(parser, ns, raw, config.need)
        self.lock = threading.RLock()  # OUTDIR's files, the manifest, the counts
        self.ray = None
        self.remote = None
        self.nodes: list = []

        self.exclusions = Exclusions()  # nodes that cannot run this batch's jobs
        self._inflight: dict[int, object] = {}
        self._finished = threading.Event()

    def run(self) -> int:
        shield_stdout(self.emitter)
        self.ray, auth = connect(self.address, self.ns.cluster_token_file)
        try:
            self.nodes = alive_nodes(self.ray)
            require_room(self.nodes, self.address, self.need)
            slots = sum(n.slots for n in self.nodes)
            token = f"token from {auth.token_from}" if auth.token_from else \
                "no token required (docs/cluster.md)" if auth.required is False else "no token"
            log(f"cluster {self.address}: {len(self.nodes)} node(s), {slots} slot(s), {token}")
            self.remote = self.ray.remote(node_job)
            images = self.images()
            self.open_manifest()
            names = output_names(images)
            planned = []
            for index, image in enumerate(images, 1):
                plan = self.plan(index, len(images), image, names[image])
                if plan is not None:
                    planned.append((index, image, *plan))
            self._watch_cancel()
            if planned and not self.cancel:
                with ThreadPoolExecutor(min(len(planned), MAX_THREADS),
                                        thread_name_prefix="runner-cluster-image") as pool:
                    for _ in pool.map(lambda p: self.remote_item(len(images), *p), planned):
                        pass
            return self.conclude(images)
        finally:
            self._finished.set()
            self.ray.shutdown()

    def remote_item(self, count: int, index: int, image, job, digest) -> None:
        """Run one planned image on the cluster and record it (not when the batch was
        cancelled before it was placed)."""
        began = time.time()
        try:
            outcome = RemoteJob(self, job, index, digest).run()
        except Exception as exc:  # a bug on this image must not stop the others
            traceback.print_exc(file=sys.stderr)
            err = RunnerError("internal", f"Unexpected {type(exc).__name__}: {exc}")
            outcome = Outcome(ok=False, final=make("error", **err.fields()),
                              exit_code=err.exit_code, output=None, trace=None,
                              seconds=time.time() - began, peak=None, error=err)
        if outcome is not None:
            with self.lock:
                self.record(index, count, image, job.output, outcome, digest, began)

    def refresh_nodes(self) -> None:
        """Read the alive nodes again (after one was lost)."""
        try:
            self.nodes = alive_nodes(self.ray)
        except Exception as exc:  # keep the old list; placement still works without it
            log(f"cluster: could not list the nodes ({exc})")

    def exclude(self, node: dict, kind: str, message: str, item: int) -> None:
        """Keep ``node`` (``{"id", "host"}``) out of the rest of the batch: it failed image
        ``item`` with a node-level ``kind`` (``placement.NODE_LEVEL``). The first time, a
        ``warning`` event (with ``node`` and ``kind``) and its stderr line say so."""
        if not self.exclusions.add(node, kind, message):
            return

        event = make("warning", message=f"node {node.get('host', '?')} cannot run this batch's "
                     f"jobs ({kind}: {message[:300]}); it is left out for the rest of the "
                     "batch and its images are placed on other nodes", source="cluster",
                     node=node, kind=kind, item=item)
        self.emitter.emit(event)
        explain_warning(event)

    # -- in-flight tasks and cancel ------------------------------------------------------------
    def track(self, index: int, gen) -> None:
        with self.lock:
            self._inflight[index] = gen
        if self.cancel:
            self._cancel_tasks(force=False)

    def untrack(self, index: int) -> None:
        with self.lock:
            self._inflight.pop(index, None)

    def _cancel_tasks(self, force: bool) -> None:
        with self.lock:
            gens = list(self._inflight.values())
        for gen in gens:
            try:
                self.ray.cancel(gen, force=force, recursive=True)
            except Exception as exc:  # already finished, or its node is gone
                log(f"cluster: cancel: {type(exc).__name__}: {exc}")

    def _watch_cancel(self) -> None:
        """A thread that, once cancelled, cancels every task (gently, then by force)."""

        def watch() -> None:
            while not self.cancel.wait(0.2):
                if self._finished.is_set():
                    return
            log(f"cluster: cancelling {len(self._inflight)} task(s)")
            self._cancel_tasks(force=False)
            end = time.monotonic() + FORCE_AFTER
            while self._inflight and time.monotonic() < end:
                time.sleep(0.1)
            if self._inflight:
                self._cancel_tasks(force=True)

        threading.Thread(target=watch, name="runner-cluster-cancel", daemon=True).start()
