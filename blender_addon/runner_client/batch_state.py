"""A batch over a folder: what each image gave, the progress, and the summary. No bpy.

The add-on runs the whole folder as one ``python -m runner batch`` job, which keeps a manifest
in its output folder: running the batch again (after a cancel, a crash, or with new images)
skips every image already done with the same settings. This object is fed the runner's
``batch_item`` events (runner/PROTOCOL.md) in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

DONE, FAILED, SKIPPED, CANCELLED = "done", "failed", "skipped", "cancelled"


@dataclass
class BatchItem:
    """The outcome of one image: ``status`` is ``done`` / ``failed`` / ``skipped`` (done by an
    earlier run of the batch, per the runner's manifest) / ``cancelled``; ``detail`` is the
    object name (done) or the error message with its kind (failed)."""
    image: Path
    status: str
    detail: str = ""


@dataclass
class BatchRun:
    """Batch state over ``count`` images of ``folder`` (the count is updated from the
    runner's events, which are authoritative)."""
    folder: Path
    count: int
    items: list[BatchItem] = field(default_factory=list)
    cancelled: bool = False
    ended: bool = False  # the runner's batch has finished (batch_done, or it exited)
    error: str = ""  # why the batch as a whole did not run (e.g. cluster_unavailable)
    item: int | None = None  # the runner's index (1-based) of the image now running
    stages: list = field(default_factory=list)  # the batch's stage plan (its hello)

    @property
    def finished(self) -> bool:
        """True once the runner's batch has ended or was cancelled."""
        return self.cancelled or self.ended

    def record(self, image: Path, status: str, detail: str = "", count: int | None = None
               ) -> None:
        """Record one image's outcome (see :class:`BatchItem`); ``count``: the runner's image
        count, when its event gives one."""
        self.items.append(BatchItem(Path(image), status, detail))
        if count is not None and count >= len(self.items):
            self.count = count

    def progress_text(self) -> str:
        """``"3 / 12"``: the image now running (1-based) over the count; the count when done."""
        if self.finished or len(self.items) >= self.count:
            return f"{len(self.items)} / {self.count}"
        return f"{len(self.items) + 1} / {self.count}"

    def summary(self) -> str:
        """One report for people, e.g. ``"Batch: 3 of 4 done, 1 failed: broken.png (not_an_image:
        broken.png is not an image …)"``; images an earlier run had done are counted as
        skipped."""
        done = [i for i in self.items if i.status == DONE]
        skipped = [i for i in self.items if i.status == SKIPPED]
        failed = [i for i in self.items if i.status == FAILED]
        if self.error:
            return f"Batch did not run: {self.error}"
        text = f"Batch: {len(done)} of {self.count} done"
        if skipped:
            text += f", {len(skipped)} skipped (done by an earlier run)"
        if failed:
            text += f", {len(failed)} failed: " + "; ".join(
                f"{i.image.name} ({i.detail})" for i in failed)
        if self.cancelled:
            text += f"; cancelled after {len(self.items)} (Run Batch again to resume)"
        return text

    def headline(self) -> str:
        """The batch's outcome in a few words, for the panel's headline once it has ended:
        ``"Done: 4 of 4 done"``, ``"Done with failures: 9 of 15 done, 6 failed"``,
        ``"Failed: 3 of 3 failed"``, ``"Cancelled: 2 of 5 done"``, ``"Batch did not run"``;
        skipped images (done by an earlier run) are named when there are any."""
        count = {s: sum(1 for i in self.items if i.status == s) for s in (DONE, FAILED, SKIPPED)}
        if self.error:
            return "Batch did not run"
        done = f"{count[DONE]} of {self.count} done"
        if count[SKIPPED]:
            done += f", {count[SKIPPED]} skipped"
        if self.cancelled:
            return f"Cancelled: {done}"
        if count[FAILED] and not (count[DONE] or count[SKIPPED]):
            return f"Failed: {count[FAILED]} of {self.count} failed"
        if count[FAILED]:
            return f"Done with failures: {done}, {count[FAILED]} failed"
        return f"Done: {done}"

    def view(self, job_view):
        """``job_view`` (the ``view.PanelView`` of the image that ran last) headed by the
        batch's outcome (:meth:`headline`) once the batch has ended — its last error stays
        in the view — else ``job_view`` itself."""
        if not self.finished:
            return job_view
        return replace(job_view, headline=self.headline())
