"""One image of a cluster batch, seen from the head: check and claim its outputs here, send
the picture to a node (a Ray task running ``runner.cluster.node.node_job``), relay its events
tagged with ``item`` and ``node``, place it again when its node was lost or had no room
(``runner.cluster.placement``), and write the GLB and trace it returns into OUTDIR with the
same atomic, claimed writes as a local job (``runner.job.claims``, ``runner.job.outputs.commit``).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from meshfacts.errors import KINDS, RunnerError
from meshfacts.events import make
from runner.job.cancel import cancel_error
from runner.job.claims import claim_all, release_all
from runner.job.outputs import (
    check_output,
    check_trace,
    commit,
    discard,
    failed_runs_trace,
    temp_path,
    unwritable,
)
from runner.job.records import Job, Outcome

from .placement import GIVE_BACK, MAX_ATTEMPTS, NODE_LEVEL, next_avoid, task_options


class Lost(Exception):
    """An attempt ended by a Ray system error (node lost, worker crashed, object lost):
    ``node`` (label or None when it never started), ``reason`` (str)."""

    def __init__(self, node: dict | None, reason: str):
        super().__init__(reason)
        self.node, self.reason = node, reason


class RemoteJob:
    """Image ``job`` (index ``index`` in the batch) on the cluster of ``batch``
    (``runner.cluster.batch.ClusterBatch``: its ``ray``, ``remote``, ``nodes``, ``need``,
    ``node_argv``, ``emitter``, ``cancel``, ``lock`` and the in-flight registry).
    :meth:`run` returns the ``Outcome`` (``extra``: ``node``, ``retries``), or None when the
    batch was cancelled before the image was placed anywhere."""

    def __init__(self, batch, job: Job, index: int, digest: str | None = None):
        self.batch, self.job, self.index, self.digest = batch, job, index, digest
        self.began = time.time()
        self.node: dict | None = None
        self.retries: list[dict] = []
        self.peak: int | None = None
        self.final: dict | None = None
        self.notes: list = []
        self.started = False
        self.claims: list = []

    # -- the whole image -----------------------------------------------------------------------
    def run(self) -> Outcome | None:
        """Claim, place (again when given back), write; never raises for a job failure."""
        try:
            try:
                self.claim()
                data = self.read_image()
                end = self.place(data)
                if end is None:
                    return None
                return self.finish(end)
            except RunnerError as err:
                return self.failed(err)
        finally:
            release_all(self.claims)

    def claim(self) -> None:
        """Check the GLB and trace paths as a local job does and claim both (held until the
        image is written). Raises ``RunnerError``."""
        job = self.job
        replace = job.overwrite if job.replace_trace is None else job.replace_trace
        output = check_output(job.output, job.overwrite)
        trace = job.resolved_trace()
        self.claims = claim_all([output, trace])
        check_output(output, job.overwrite)
        if not replace and failed_runs_trace(trace, output):
            replace = True
        check_trace(trace, replace)
        self.replace_trace = replace

    def read_image(self) -> bytes:
        try:
            return self.job.input.path.read_bytes()
        except OSError as exc:
            raise RunnerError("input_missing", f"Cannot read {self.job.input.path} "
                              f"({exc.strerror or exc}).") from None

    def place(self, data: bytes) -> dict | None:
        """Attempts until one ends on a node for good; returns its ``end`` message, or None
        (cancelled before placement). Raises ``RunnerError`` (cancelled, nodes lost too
        often)."""
        refused: set[str] = set()
        while True:
            if self.batch.cancel:
                if not self.started:
                    return None
                raise cancel_error(self.batch.cancel, f"on node {self._host()}")
            avoid = next_avoid(self.batch.nodes, refused, self.batch.exclusions.ids(),
                               self.batch.need)
            if avoid is None:  # every node that could take it cannot run the job
                raise self.batch.exclusions.failure()
            try:
                end = self.attempt(data, avoid)
            except Lost as lost:
                if self.batch.cancel:
                    continue
                self.retries.append({"node": lost.node, "reason": lost.reason})
                if len(self.retries) >= MAX_ATTEMPTS:
                    raise RunnerError("worker_killed", f"{len(self.retries)} attempts ended "
                                      f"with their node lost (last: {lost.reason}).",
                                      "Check the nodes (`python -m runner check --cluster "
                                      "ADDRESS`) and run the batch again.") from None
                self.batch.refresh_nodes()
                continue
            kind = (self.final or {}).get("kind")
            if end["exit_code"] != 0 and kind in NODE_LEVEL:  # the node's fault: another one
                message = str(self.final.get("message") or "")
                self.retries.append({"node": end["node"], "reason": f"{kind}: {message}"})
                self.batch.exclude(end["node"], kind, message, self.index)
                continue
            if end["exit_code"] == 0 or kind not in GIVE_BACK or \
                    len(self.retries) + 1 >= MAX_ATTEMPTS:
                return end
            self.retries.append({"node": end["node"], "reason": f"{kind}: "
                                 f"{self.final.get('message')}"})
            refused.add(end["node"]["id"])

    # -- one attempt ---------------------------------------------------------------------------
    def attempt(self, data: bytes, avoid: set[str]) -> dict:
        """One task on some node: relay its events; returns its ``end`` message. Raises
        ``Lost`` for a Ray system error, ``RunnerError('internal')`` for a bug in the task."""
        ray = self.batch.ray
        self.final, node = None, None
        suffix = self.job.input.path.suffix.lower()
        names = {"image": str(self.job.input.path), "output": str(self.job.output),
                 "trace": str(self.job.resolved_trace())}
        gen = self.batch.remote.options(**task_options(self.batch.need, avoid)).remote(
            suffix, data, self.batch.node_argv, names)
        self.batch.track(self.index, gen)
        try:
            for ref in gen:
                message = ray.get(ref)
                if message["kind"] == "started":
                    node = message["node"]
                    self.on_started(message)
                elif message["kind"] == "event":
                    self.relay(message["event"])
                elif message["kind"] == "end":
                    return message
            raise Lost(node, "the task ended without an answer")
        except ray.exceptions.RayTaskError as exc:
            if self.batch.cancel:
                raise Lost(node, "cancelled") from None
            raise RunnerError("internal", f"The node task failed: {exc}") from None
        except ray.exceptions.RayError as exc:
            raise Lost(node, f"{type(exc).__name__}: {str(exc).strip()[:300]}") from None
        finally:
            self.batch.untrack(self.index)

    def on_started(self, message: dict) -> None:
        self.node, self.started = message["node"], True
        attempt = len(self.retries) + 1
        self.batch.emitter.emit(make("placed", item=self.index,
                                     image=str(self.job.input.path),
                                     node=self.node, attempt=attempt,
                                     pid=message["runner_pid"]))

    def relay(self, event: dict) -> None:
        """Publish one of the node runner's events with ``item`` and ``node``; its ``hello``
        (the batch printed its own) and its ``result``/``error`` (kept as the image's final
        event, as in a local batch) are not printed."""
        name = event.get("event")
        if name in ("result", "error"):
            self.final = event
            return
        if name == "memory" and isinstance(event.get("peak"), int):
            self.peak = event["peak"]
        if name == "input" and isinstance(event.get("notes"), list):
            self.notes = event["notes"]
        if name != "hello":
            self.batch.emitter.emit({**event, "item": self.index, "node": self.node})

    # -- the end -------------------------------------------------------------------------------
    def finish(self, end: dict) -> Outcome:
        """Write what the node returned (under the batch's lock: one writer of OUTDIR at a
        time) and build the ``Outcome``."""
        final = self.final or RunnerError("worker_crashed", "The node's runner exited "
                                          f"{end['exit_code']} without a last event.").fields()
        with self.batch.lock:
            trace = self.write_trace(end.get("trace"))
            if end["exit_code"] == 0 and end.get("glb") is not None:
                self.write_glb(end["glb"])
                return self.outcome(True, final, 0, trace)
        code = final.get("exit_code") if isinstance(final.get("exit_code"), int) else 1
        err = RunnerError(final["kind"], final.get("message") or "", final.get("hint")) \
            if final.get("kind") in KINDS else None
        return self.outcome(False, final, code, trace, err)

    def write_glb(self, data: bytes) -> None:
        output = Path(self.job.output).absolute()
        partial = temp_path(output)
        try:
            partial.write_bytes(data)
        except OSError as exc:
            discard(partial)
            raise unwritable(exc, output.parent, "output") from None
        commit(partial, output, self.job.overwrite)

    def batch_trace(self, data: bytes) -> bytes:
        """The node's trace as this batch's trace of the image: its ``hello`` (a single run of
        the node's temporary ``input.png``) becomes the item's (``Batch.item_hello``: image,
        output, ``sha256``, ``options``, so a lost manifest is rebuilt from it as for a local
        batch), and the node's paths in the other lines the user's (``node.user_names``). A
        trace whose first line is not a ``hello`` is kept as it came."""
        from .node import user_names  # the node's module: it imports ray only when run

        lines = data.decode("utf-8", "surrogateescape").split("\n")
        try:
            node_hello = json.loads(lines[0])
        except ValueError:
            return data
        if not isinstance(node_hello, dict) or node_hello.get("event") != "hello":
            return data
        theirs = {"image": str(self.job.input.path), "output": str(self.job.output),
                  "trace": str(self.job.resolved_trace())}
        local = {Path(node_hello[k]): v for k, v in theirs.items()
                 if isinstance(node_hello.get(k), str) and node_hello[k]}
        hello = {**node_hello, **self.batch.item_hello(self.job, self.index, self.digest),
                 "t": node_hello.get("t"), "node": self.node}
        out = [json.dumps(hello, ensure_ascii=False)]
        for line in lines[1:]:
            try:
                event = json.loads(line)
            except ValueError:  # a blank end, or a last line cut by a kill: as it was
                out.append(line)
                continue
            out.append(json.dumps(user_names(event, local), ensure_ascii=False))
        return "\n".join(out).encode("utf-8", "surrogateescape")

    def write_trace(self, data: bytes | None) -> str | None:
        if data is None:
            return None
        data = self.batch_trace(data)
        trace = self.job.resolved_trace()
        partial = trace.with_name(f".{trace.name}.partial-{os.getpid()}-{threading.get_ident()}")
        try:
            partial.write_bytes(data)
            commit(partial, trace, self.replace_trace)
        except (OSError, RunnerError):
            discard(partial)
            return None
        return str(trace)

    def outcome(self, ok: bool, final: dict, code: int, trace: str | None,
                error: RunnerError | None = None) -> Outcome:
        output = str(Path(self.job.output).absolute()) if ok else None
        peak = final.get("peak") if isinstance(final.get("peak"), int) else self.peak
        return Outcome(ok=ok, final=final, exit_code=code, output=output, trace=trace,
                       seconds=time.time() - self.began, peak=peak, error=error,
                       notes=list(self.notes),
                       extra={"node": self.node, "retries": list(self.retries)})

    def failed(self, err: RunnerError) -> Outcome:
        return self.outcome(False, make("error", **err.fields()), err.exit_code, None, err)

    def _host(self) -> str:
        return (self.node or {}).get("host", "?")
