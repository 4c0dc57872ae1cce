"""Targets for ``bounded_export.stoppable.call`` in the child-failure tests (imported by
the child as ``tests.export_engine.child_targets``: the repository root is on its path)."""
from __future__ import annotations

import os
import resource
import time

import numpy as np


def allocate_under_limit(limit: int, nbytes: int) -> dict:
    """Set this process's address-space limit (``RLIMIT_AS``, bytes) to ``limit``, then ask
    numpy for ``nbytes``: numpy's ``_ArrayMemoryError`` (a ``MemoryError``) when it does not
    fit."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return {"a": np.ones(nbytes, dtype=np.uint8)}


def sleep_then_return(pid_file: str, seconds: float) -> dict:
    """Write this process's pid to ``pid_file`` (renamed into place, so a reader sees it whole),
    then sleep ``seconds``."""
    tmp = pid_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(tmp, pid_file)
    time.sleep(seconds)
    return {"slept": np.array([seconds])}


def fail_plainly() -> dict:
    """An unexpected error (a bug): not a memory failure."""
    raise ValueError("a plain bug")


def write_to_a_full_drive(path: str, nbytes: int) -> dict:
    """Write ``nbytes`` to ``path`` (``/dev/full``: every write fails with ENOSPC, a real
    full-drive error from the kernel)."""
    with open(path, "wb") as fh:
        fh.write(b"\0" * nbytes)
        fh.flush()
    return {}
