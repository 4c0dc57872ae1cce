"""Which image runs where in a batch on a Ray cluster: :class:`NodeBoard`, fed the batch's
events, gives one line per node (its current image, stage and memory). Pure Python: no bpy.

``python -m runner batch … --cluster ADDRESS`` runs several images at once, one per node slot;
every event of an image's job carries ``item`` and ``node`` (``{"id", "host"}``), ``placed``
says where an image (re)starts and ``batch_item`` where it ended (runner/PROTOCOL.md,
docs/cluster.md). Events are checked where they enter (``events.clean``); an event of an image
that was not placed on that node is ignored. A local batch has no ``node``: the board stays
empty and the panel shows no node lines.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import events as _events
from .view import human_bytes

PLACED, WAITING, RUNNING = "placed", "waiting", "running"  # a NodeJob's status
ID_CHARS = 8  # characters of a node id shown when two nodes share a host name


@dataclass
class NodeJob:
    """One image on a node: ``item`` (the batch's 1-based index), ``image`` (file name),
    ``attempt`` (1-based), ``status`` (:data:`PLACED` / :data:`WAITING` for memory /
    :data:`RUNNING`), the current ``stage`` with its 0-based ``index`` of ``count`` and
    ``fraction`` (0..1), ``footprint`` and ``peak`` (bytes, the node's supervisor's readings)."""

    item: int
    image: str
    attempt: int = 1
    status: str = PLACED
    stage: str | None = None
    index: int | None = None
    count: int | None = None
    fraction: float = 0.0
    footprint: int | None = None
    peak: int | None = None


@dataclass
class NodeLine:
    """One node: Ray ``id`` (hex), ``host`` name, the ``jobs`` running there (item →
    :class:`NodeJob`; more than one where the node offers several slots) and ``last``, what
    its last image gave (``"orc.png done"``)."""

    id: str
    host: str
    jobs: dict = field(default_factory=dict)
    last: str = ""


class NodeBoard:
    """The nodes of a cluster batch, in the order they first appear. :attr:`history` records
    every change of what a node line says (``(host, image, status, stage)``; ``image`` None:
    idle), however quickly the next follows, for a test or a log."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeLine] = {}
        self.history: list[tuple] = []
        self._said: dict[str, list[tuple]] = {}

    def apply(self, ev: dict) -> bool:
        """Apply one runner event (a dict); returns True when it was a cluster job's event
        (it carried a valid ``node``), which then belongs to this board, not to one image's
        ``JobState``. Never raises."""
        if not isinstance(ev, dict):
            return False
        checked, _notes = _events.clean(ev)
        if checked is None:  # a kind the schema does not declare: nothing to show, but a
            # cluster job's all the same, never taken for a new image of the batch
            return _events.is_node(ev.get("node")) and ev.get("item") is not None
        ev = checked
        kind, node, item = ev.get("event"), ev.get("node"), ev.get("item")
        if kind == "batch_item":
            self._ended(ev)
            return False  # the controller imports and records it
        if not isinstance(node, dict) or item is None:
            return False
        line = self._line(node)
        if kind == "placed" and isinstance(ev.get("image"), str):
            for other in self.nodes.values():
                other.jobs.pop(item, None)
            line.jobs[item] = NodeJob(item, Path(ev["image"]).name, ev.get("attempt") or 1)
        elif item in line.jobs:
            self._update(line.jobs[item], kind, ev)
        self._record()
        return True

    @staticmethod
    def _update(job: NodeJob, kind: str, ev: dict) -> None:
        if kind == "stage" and ev.get("parent") is None and ev.get("stage"):
            job.stage, job.fraction, job.status = ev["stage"], 0.0, RUNNING
            job.index, job.count = ev.get("index"), ev.get("count")
        elif kind == "progress" and ev.get("stage") in (None, job.stage) \
                and ev.get("fraction") is not None:
            job.fraction = float(ev["fraction"])
        elif kind == "memory":
            job.footprint = ev.get("footprint", job.footprint)
            job.peak = ev.get("peak", job.peak)
        elif kind == "guard" and ev.get("state") == "waiting":
            job.status = WAITING
        elif kind == "guard" and ev.get("state") == "started" and job.status != RUNNING:
            job.status = RUNNING

    def _ended(self, ev: dict) -> None:
        """``batch_item``: the image is off every node; its node says what it gave."""
        index = ev.get("index")
        for line in self.nodes.values():
            line.jobs.pop(index, None)
        node = ev.get("node")
        if isinstance(node, dict) and isinstance(ev.get("image"), str):
            self._line(node).last = f"{Path(ev['image']).name} {ev.get('status')}"
        self._record()

    def _line(self, node: dict) -> NodeLine:
        line = self.nodes.get(node["id"])
        if line is None:
            line = self.nodes[node["id"]] = NodeLine(node["id"], node["host"])
        return line

    def _record(self) -> None:
        for line in self.nodes.values():
            said = [(line.host, j.image, j.status, j.stage) for j in line.jobs.values()] or \
                [(line.host, None, "idle", None)]
            if self._said.get(line.id) != said:
                self._said[line.id] = said
                self.history += said

    # ------------------------------------------------------------------ view
    def label(self, line: NodeLine) -> str:
        """The node's name for people: its host, with the start of its id when another node
        has the same host name (several nodes on one machine)."""
        same = sum(1 for n in self.nodes.values() if n.host == line.host)
        return f"{line.host} · {line.id[:ID_CHARS]}" if same > 1 else line.host

    def lines(self) -> list[tuple[str, bool]]:
        """One ``(text, busy)`` per node and image running there, e.g. ``("mac-2: orc.png ·
        export (4/4) 30 % · 1.2 GiB, peak 1.9 GiB", True)``; an idle node ``("mac-3: idle ·
        last orc.png done", False)``."""
        out = []
        for line in self.nodes.values():
            name = self.label(line)
            if not line.jobs:
                last = f" · last {line.last}" if line.last else ""
                out.append((f"{name}: idle{last}", False))
            for job in line.jobs.values():
                out.append((f"{name}: {job_text(job)}", True))
        return out


def job_text(job: NodeJob) -> str:
    """``orc.png · export (4/4) 30 % · 1.2 GiB, peak 1.9 GiB`` (attempt 2 and later say so)."""
    parts = [job.image]
    if job.attempt > 1:
        parts.append(f"attempt {job.attempt}")
    if job.status == WAITING:
        parts.append("waiting for memory")
    elif job.stage is not None:
        where = f" ({job.index + 1}/{job.count})" if job.index is not None and job.count else ""
        parts.append(f"{job.stage}{where} {job.fraction * 100:.0f} %")
    else:
        parts.append("starting")
    if job.footprint is not None:
        parts.append(f"{human_bytes(job.footprint)}, peak {human_bytes(job.peak)}")
    return " · ".join(parts)
