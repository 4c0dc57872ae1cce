"""``new_run``: a ``Pixal3DRun`` from keywords, the run's options (``RunOptions`` fields: load,
seed, texture side …) and the constructor's own (device, events, fingerprint …) told apart, so
the tests read as the library is used."""
from __future__ import annotations

from dataclasses import fields

from stageload.pixal3d import Pixal3DRun, RunOptions

OPTION_FIELDS = {f.name for f in fields(RunOptions)}


def run_options(**kwargs) -> RunOptions:
    """``RunOptions`` of the option keywords of ``kwargs`` (the rest ignored)."""
    return RunOptions(**{k: v for k, v in kwargs.items() if k in OPTION_FIELDS})


def new_run(port_dir, **kwargs) -> Pixal3DRun:
    """``Pixal3DRun(port_dir, RunOptions(options…), device="cpu", rest…)``."""
    rest = {k: v for k, v in kwargs.items() if k not in OPTION_FIELDS}
    rest.setdefault("device", "cpu")
    return Pixal3DRun(port_dir, run_options(**kwargs), **rest)
