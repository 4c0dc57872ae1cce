"""Per-stage working memory for the benchmark: a real, touched buffer held while a stage runs.

The stand-in port's tiny models use almost no activation memory, but the real port's stages do
(SPEC §1: the texture stage peaks at 30.1 GB of which 2.6 GB is the model). ``WorkingMemory``
stands for that memory: at a stage's ``ready`` it allocates the stage's share (bytes from
``bench.pixal3d.sizes.scaled_working_bytes``) and writes every page, so it is resident, not just
reserved; at the end of the stage it holds for ``hold`` seconds (so the outside sampler at
>= 10 Hz sees the stage's peak with its weights loaded) and frees the buffer.

The same object runs in the benchmark's "alone" process, where no weights are loaded, so the
peak over baseline measured there is exactly this allocation's cost on this machine (allocator
and page granularity included).
"""
from __future__ import annotations

import time

import torch


class WorkingMemory:
    """Allocate, hold and free one stage's working buffer.

    Arguments: ``sizes`` maps stage name -> bytes (a stage not in it gets 0); ``hold`` is the
    seconds to keep the stage's full state before freeing (>= 0).

    Methods: ``allocate(stage)`` frees any previous buffer, then allocates ``sizes[stage]``
    bytes and writes them (a ``torch.uint8`` tensor filled with ones); ``finish()`` sleeps
    ``hold`` seconds and frees the buffer; ``held`` is the bytes held now; ``allocated``:
    stage → bytes allocated for it (the last time); ``check(stages)`` raises when one of them
    got no allocation. Raises ``ValueError`` for a negative ``hold`` or size, and from
    ``allocate`` for a stage that is not in ``sizes`` (a sub-step or a renamed stage: its
    share would silently be 0 and the figure would shrink instead of failing).
    """

    def __init__(self, sizes: dict[str, int], hold: float):
        if hold < 0:
            raise ValueError(f"hold must be >= 0 seconds, got {hold}")
        bad = {k: v for k, v in sizes.items() if v < 0}
        if bad:
            raise ValueError(f"working memory sizes must be >= 0 bytes, got {bad}")
        self.sizes = dict(sizes)
        self.hold = float(hold)
        self._buffer: torch.Tensor | None = None
        self.stage: str | None = None
        self.allocated: dict[str, int] = {}

    @property
    def held(self) -> int:
        """Bytes of the buffer held now (0 when none)."""
        return 0 if self._buffer is None else self._buffer.numel()

    def allocate(self, stage: str) -> int:
        """Free the previous buffer, allocate and touch this stage's; return its bytes."""
        self.free()
        if stage not in self.sizes:
            raise ValueError(f"no working memory is known for stage {stage!r} (stages: "
                             f"{', '.join(self.sizes)}); a sub-step taken for a stage?")
        self.stage = stage
        n = int(self.sizes[stage])
        if n > 0:
            self._buffer = torch.ones(n, dtype=torch.uint8)  # ones: every page written
        self.allocated[stage] = n
        return n

    def check(self, stages) -> None:
        """Raise ``RuntimeError`` naming every stage of ``stages`` with a working share in
        ``sizes`` that was never allocated (the benchmark would under-state its peak)."""
        missing = [s for s in stages if self.sizes.get(s, 0) > 0 and s not in self.allocated]
        if missing:
            raise RuntimeError(f"working memory was never allocated for {', '.join(missing)}: "
                               "the benchmark did not measure these stages")

    def free(self) -> None:
        """Drop the buffer now (no hold). The tensor's only reference goes, so its memory is
        returned at once (a large block is its own mapping); no ``gc.collect`` is needed."""
        self._buffer = None

    def finish(self) -> None:
        """End of the stage: keep the full state ``hold`` seconds, then free the buffer."""
        if self.hold:
            time.sleep(self.hold)
        self.free()
        self.stage = None
