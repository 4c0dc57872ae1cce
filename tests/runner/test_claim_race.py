"""Claims taken at once by many threads of one process in one folder (a cluster batch claims
each image's outputs from its own thread): each ``claim_all`` also sweeps the
folder's stale claims, and that sweep must never make another thread's fresh claim look held by
"another runner". Real files, real flock; no cluster needed."""
from __future__ import annotations

import threading
import time

from meshfacts.errors import RunnerError
from runner.job.claims import claim_all, claim_path, release_all, sweep_stale_claims

THREADS = 8
SECONDS = 1.5


def test_threads_claiming_and_sweeping_one_folder_never_refuse_each_other(tmp_path):
    """8 threads, each claiming then releasing its own two paths (GLB, trace) over and over,
    plus a thread that only sweeps: no claim is ever refused, and none is left."""
    failures: list[str] = []
    counts = [0] * THREADS
    stop = time.monotonic() + SECONDS

    def claimer(i: int) -> None:
        paths = [tmp_path / f"image_{i}.glb", tmp_path / f"image_{i}.trace.jsonl"]
        while time.monotonic() < stop and not failures:
            try:
                taken = claim_all(paths)
            except RunnerError as err:
                failures.append(f"thread {i}: {err.kind}: {err.message}")
                return
            counts[i] += 1
            release_all(taken)

    def sweeper() -> None:
        while time.monotonic() < stop and not failures:
            sweep_stale_claims(tmp_path)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(THREADS)]
    threads.append(threading.Thread(target=sweeper))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert min(counts) > 20, counts  # every thread really claimed, many times
    assert not list(tmp_path.glob(".*")), list(tmp_path.glob(".*"))


def test_a_held_claim_still_refuses_another_taker_with_its_pid(tmp_path):
    """The fix must not weaken the refusal: a second claim of a held path is output_exists,
    naming the holder's pid (written before the claim file is visible)."""
    import os

    import pytest

    held = claim_all([tmp_path / "a.glb"])
    try:
        assert claim_path(tmp_path / "a.glb").read_text() .strip().startswith(str(os.getpid()))
        with pytest.raises(RunnerError) as info:
            claim_all([tmp_path / "a.glb"])
        assert info.value.kind == "output_exists"
        assert f"pid {os.getpid()}" in info.value.message
    finally:
        release_all(held)
    assert not list(tmp_path.glob(".*"))
