"""A batch over a folder: which image is next, what each one gave, and the summary. No bpy.

The add-on runs the images one after another, each as its own runner job (so the panel shows
each image's stages and memory like a single run), and keeps going past failures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BatchItem:
    """The outcome of one image: ``status`` is ``done`` / ``failed`` / ``cancelled``;
    ``detail`` is the object name (done) or the error message with its kind (failed)."""
    image: Path
    status: str
    detail: str = ""


@dataclass
class BatchRun:
    """Sequential batch state over ``images`` (paths, in run order)."""
    folder: Path
    images: list[Path]
    items: list[BatchItem] = field(default_factory=list)
    cancelled: bool = False

    @property
    def count(self) -> int:
        """Number of images in the batch."""
        return len(self.images)

    @property
    def finished(self) -> bool:
        """True once every image has an outcome or the batch was cancelled."""
        return self.cancelled or len(self.items) >= len(self.images)

    def next_image(self) -> Path | None:
        """The image to run now, or None when the batch is finished."""
        return None if self.finished else self.images[len(self.items)]

    def record(self, status: str, detail: str = "") -> None:
        """Record the outcome of the current image (see :class:`BatchItem`)."""
        self.items.append(BatchItem(self.images[len(self.items)], status, detail))

    def progress_text(self) -> str:
        """``"3 / 12"``: the image now running (1-based) over the count; the count when done."""
        if self.finished:
            return f"{len(self.items)} / {self.count}"
        return f"{len(self.items) + 1} / {self.count}"

    def summary(self) -> str:
        """One report for people, e.g. ``"Batch: 3 of 4 done, 1 failed: broken.png (not_an_image:
        broken.png is not an image …)"``."""
        done = [i for i in self.items if i.status == "done"]
        failed = [i for i in self.items if i.status == "failed"]
        text = f"Batch: {len(done)} of {self.count} done"
        if failed:
            text += f", {len(failed)} failed: " + "; ".join(
                f"{i.image.name} ({i.detail})" for i in failed)
        if self.cancelled:
            text += f"; cancelled after {len(self.items)}"
        return text
