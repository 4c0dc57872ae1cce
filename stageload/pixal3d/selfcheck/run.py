"""The deep self-check, all of it: :func:`deep_check` runs :data:`.parts.PARTS` in order on a
staged pipeline of the user's port and weights, sends one ``self_check`` event per part, and
returns the report (runner/PROTOCOL.md; docs/pixal3d.md, "Deep self-check").

The pipeline is built as a staged run builds it (``Pixal3DRun``, ``--working-memory port``:
nothing lean installed, the run's stage hooks taken off), so loading the models a part needs
(the backbone and NAF, the shape decoder) reads the user's weights as a run does; each part
installs its own lean part for its lean path only. Raises what ``Pixal3DRun`` raises before
anything loads (``PortError`` subclasses: the port folder, its version, a refused switch); a
part that fails is reported (``status: failed``), the others still run.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from stageload.events import make_event
from stageload.pixal3d.selfcheck import parts as check_parts
from stageload.pixal3d.selfcheck import sizes
from stageload.pixal3d.selfcheck.environment import backends, metal_packages
from stageload.pixal3d.selfcheck.measure import what_is_measured

#: What the check would run, in words (said when it cannot: no weights, no port).
WOULD_CHECK = [what for _, what in check_parts.PARTS.values()]


def mps_state(device: torch.device) -> dict:
    """``{"available", "built", "used", "why"}``: whether MPS exists here and is what the check
    runs on; ``why`` says what could not be checked without it (None when it is used)."""
    mps = getattr(torch.backends, "mps", None)
    built = bool(mps is not None and mps.is_built())
    available = bool(mps is not None and mps.is_available())
    if device.type == "mps":
        why = None
    elif not built:
        why = "this PyTorch was built without MPS"
    elif not available:
        why = "no Metal device is available to this process (not a Mac, or macOS too old)"
    else:
        why = f"the check was asked to run on {device.type} (--device, PIXAL3D_DEVICE)"
    return {"available": available, "built": built, "used": device.type == "mps", "why": why}


def unchecked(device: torch.device) -> list[str]:
    """What this run of the check cannot say, and why (empty on MPS)."""
    state = mps_state(device)
    if state["used"]:
        return []
    return [f"MPS memory (the allocator's current and driver-allocated bytes): {state['why']}; "
            f"measured instead: {what_is_measured(device)}",
            f"agreement on MPS (Metal may round fp32 sums differently): the parts ran on "
            f"{device.type}"]


def deep_check(port_dir=None, *, device: Optional[str] = None,
               pipeline_type: str = "1024_cascade", model_path: Optional[str] = None,
               emit: Optional[Callable[[dict], None]] = None, parts=None) -> dict:
    """Run the parts (``parts``: names of :data:`.parts.PARTS`, default all) and return the
    report: ``ok`` (no part differs or failed), ``device``, ``torch``, ``mps``
    (:func:`mps_state`), ``port`` (``root``, ``version``), ``pipeline_type``, ``backends`` and
    ``metal`` (:mod:`.environment`), ``parts`` (the records, also sent to ``emit`` as
    ``self_check`` events), ``unchecked``, ``bound``, ``seconds``."""
    from stageload.pixal3d.adapter import Pixal3DRun
    from stageload.pixal3d.options import RunOptions
    began = time.perf_counter()
    options = RunOptions(load="staged", pipeline_type=pipeline_type, working_memory="port",
                         prefetch=False)
    run = Pixal3DRun(port_dir, options, device=device, model_path=model_path)
    run.hooks.remove()  # the parts call the pipeline's methods themselves: no stages here
    ctx = check_parts.Context(run, run.device, run.port.root, pipeline_type)
    records = []
    try:
        for name in parts or list(check_parts.PARTS):
            function = check_parts.PARTS[name][0]
            try:
                record = function(ctx)
            except Exception as exc:  # one part's failure is its record; the others still run
                record = check_parts.failed(name, exc)
            record["memory_measured"] = what_is_measured(run.device)
            records.append(record)
            if emit is not None:
                emit(make_event("self_check", **record))
    finally:
        run.close()
    return {"ok": all(r["ok"] is not False for r in records), "device": str(run.device),
            "torch": torch.__version__, "mps": mps_state(run.device),
            "port": {"root": str(run.port.root), "version": dict(run.port.version)},
            "pipeline_type": pipeline_type, "backends": backends(), "metal": metal_packages(),
            "parts": records, "unchecked": unchecked(run.device), "bound": sizes.BOUND,
            "seconds": time.perf_counter() - began}
