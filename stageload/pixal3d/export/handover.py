"""The end of a Pixal3D run's generation: hand the decoded asset over to an export process
(the port's own mesh checkpoint, ``export.save_asset``), or run the ``export`` stage in this
process (``export.run_export``; the 0578f857-shaped path: ``legacy.legacy_export``)."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from stageload.pixal3d.export.legacy import legacy_export
from stageload.pixal3d.export.run import ResolvedExport, run_export, save_asset
from stageload.pixal3d.port.open import HANDOVER_NAMES

log = logging.getLogger(__name__)


def hand_over_or_export(run, asset, output: Path, args, settings: ResolvedExport,
                        handover: Optional[os.PathLike | str]) -> Optional[os.PathLike | str]:
    """With ``handover`` (a ``.npz`` path that must not exist) and a port that can write it
    (``run.can_hand_over``): release every model of ``run`` (the process exits next: nothing
    stays loaded meanwhile) and write the asset there; returns ``handover``. Otherwise (no
    ``handover``, or a port without ``port.HANDOVER_NAMES``: a warning is logged) the
    ``export`` stage here (:func:`export_here`); returns None."""
    if handover is not None and not run.can_hand_over:
        log.warning("this port cannot write the hand-over (%s): exporting in this process",
                    ", ".join(n for n in HANDOVER_NAMES if not hasattr(run.gm, n)))
        handover = None
    if handover is not None:
        if run.models is not None:
            run.models.close()
        save_asset(run.gm, asset, handover)
    else:
        export_here(run, asset, output, args, settings)
    return handover


def export_here(run, asset, output: Path, args, settings: ResolvedExport) -> None:
    """The ``export`` stage in this process: release every model, then the port's
    ``asset_to_glb`` with the levers and the sub-step events (``export.run_export``); notes
    the stage's resident bytes. Raises ``RuntimeError`` when the port wrote no GLB."""
    run.enter("export")
    if run.models is not None:
        run.models.close()  # pinned ones too: export needs no weights
    if run.entry_points:
        try:  # the run's relay: each sub-step gets the allocator's figures on an accelerator
            run_export(run.gm, asset, output, args, settings, run.relay, run.device)
        except SystemExit as exc:
            raise RuntimeError(f"the port's asset_to_glb wrote no GLB at {output}: "
                               f"{exc.code}") from None
    else:
        from stageload.pixal3d.export.fallbacks import FallbackWatch

        with FallbackWatch(run.gm, args, run.relay, settings.strict):
            legacy_export(run.gm, asset, output, args)
    if not output.is_file() or output.stat().st_size == 0:
        raise RuntimeError(f"the port's export wrote no GLB at {output}")
    run.resident_bytes["export"] = run.loaded_bytes()
