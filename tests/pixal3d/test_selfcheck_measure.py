"""The deep self-check's CPU measure (stageload.pixal3d.selfcheck.measure) counts the pages a
piece of work takes even where earlier work freed the same amount: glibc keeps freed blocks in
a thread's arena and the next work reuses them without the resident size rising, which made
the second of two compared paths look smaller than it is (the port's attention measured 33 MB
against lean's 84 MB once, in a serial run)."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from stageload.pixal3d.selfcheck.measure import measure

MiB = 1024**2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas: Linux")
def test_work_after_freed_work_is_measured_whole():
    pool = ThreadPoolExecutor(1)  # one thread, one glibc arena, as a torch worker thread has

    def earlier():
        grown = torch.ones(4 * MiB // 4)  # freed at once: glibc's mmap threshold rises past it
        del grown
        pairs = [(torch.ones(MiB // 4), torch.ones(16)) for _ in range(50)]
        return [small for _, small in pairs]  # the small blocks stay, the 1 MiB ones are holes

    def work():
        held = [torch.ones(MiB // 4) for _ in range(50)]  # 50 MiB
        return sum(float(t[0]) for t in held)

    try:
        pins = pool.submit(earlier).result()
        result, out = measure(lambda: pool.submit(work).result(), "cpu")
    finally:
        pool.shutdown()
    assert result == 50.0 and len(pins) == 50
    assert out["memory"]["process"] >= 0.9 * 50 * MiB, out
