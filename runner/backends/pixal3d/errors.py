"""The Pixal3D adapter's exception classes (``stageload.pixal3d.errors``, which carry no runner
kind) → the runner's error kinds: the worker looks each class of an exception's MRO up here
(``runner.worker.run``), for the model process and the port's export process alike."""
from __future__ import annotations

ERRORS = {"PortMissing": "pixal3d_missing", "PortVersionError": "pixal3d_version",
          "KnobRefused": "usage", "EmptyMeshError": "empty_mesh", "ExportRefused": "export_refused",
          "BadWeights": "bad_weights", "WeightsMissing": "weights_missing",
          "ExportFallbackRefused": "export_fallback",
          "PortError": "pixal3d_missing"}


def kind_of(error_name: str | None) -> str | None:
    """The runner error kind of an adapter exception class name (None → None; an unknown
    class is the port's: ``pixal3d_missing``)."""
    return None if error_name is None else ERRORS.get(error_name, "pixal3d_missing")
