"""What a job starts from. Each kind checks itself where it enters and says what worker job it
makes; ``runner.job.run.JobRun`` runs any of them through the same steps:

- ``ImageInput``: an image file a backend turns into a mesh (``python -m runner IMAGE``, each
  image of a batch). Entering: the backend is looked up and its cheap precheck run
  (``Backend.run_precheck``: files and folders only); the image is decoded and checked
  (``runner.images.reading.probe_image``) and its facts published as ``input``. The worker runs the
  backend (mode ``whole``, or ``model`` when the backend exports in a process of its own).
- ``AssetInput``: a saved asset (``.npz``: a Pixal3D run's ``--keep-asset``, the port's
  ``--save-mesh``) turned into a GLB by the bounded export engine (``python -m runner
  export``). Entering: the levers (the job's ``JobOptions``, parsed on the command line) are
  checked once against the engine, when the input is made (:meth:`AssetInput.enter`); the
  asset's size and headers against the budget's plan (no array read), published as
  ``asset``. The worker is the export process (mode ``export``, no backend: the export step
  :data:`runner.job.export_step.BOUNDED`). An asset refused for what it holds (``bad_asset``)
  leaves nothing behind: no default trace, no folder the job made.

A batch's folder is the third way in (``runner.batch.folder.Batch.images``): it makes one
``ImageInput`` per image.
"""
from __future__ import annotations

from pathlib import Path

from bounded_export import BadAsset
from bounded_export.asset import inspect_asset
from bounded_export.budget import asset_sizes, check_file, plan
from meshfacts.errors import RunnerError
from meshfacts.events import make
from runner.images.reading import load_image
from runner.job.export_step import BOUNDED, levers
from runner.job.records import WorkerJob


class ImageInput:
    """An image file (``path``, as given) for ``backend`` (the job's entry of the backend
    registry, ``runner.backends.Backend``: the command that makes the job looks it up, so a
    job knows no registry)."""

    noun = "image"
    """The input in messages (``outputs.trace_conflict``)."""
    refused_kinds: tuple[str, ...] = ()
    """Error kinds after which the job leaves nothing behind (none: a failed run's trace
    stays, so the same command can tell what happened)."""
    process = ("worker", "the worker")
    """The child's name (``runner.job.child.Child``) and how messages name it."""

    def __init__(self, path: Path | str, backend):
        self.path = Path(path)
        self.entry = backend
        self.facts: dict | None = None
        self.pixels: bytes | None = None

    def backend(self, job):
        """The job's backend after the cheap checks: installed (else ``backend_unavailable``),
        its precheck passed (e.g. ``pixal3d_missing``)."""
        backend = self.entry
        if not backend.installed():
            raise RunnerError("backend_unavailable", f"The {backend.name} backend is not "
                              "installed here.", backend.install_hint or None)
        backend.run_precheck(job.options)  # cheap: files and folders only
        return backend

    def stages(self, backend) -> list[str]:
        """The job's stage plan: the backend's."""
        return backend.planned_stages()

    def check(self, job) -> tuple[dict, list[str]]:
        """Decode and check the image (``load_image``, absolute as in ``hello``): the
        ``input`` event with its facts (``ImageInfo``) and the notes on what was converted.
        The decoded pixels are kept for the worker (:meth:`handover_pixels`): the image is
        decoded once per job. Raises ``RunnerError`` with the image's kind (``not_an_image``,
        ``image_truncated`` …)."""
        image, info = load_image(self.path.absolute())
        try:
            self.pixels = image.tobytes()
        finally:
            image.close()
        self.facts = info.as_dict()
        return make("input", **self.facts), list(info.notes)

    def handover_pixels(self) -> bytes | None:
        """The decoded RGBA pixels for the worker's stdin, once (they are not kept after)."""
        pixels, self.pixels = self.pixels, None
        return pixels

    def hand_over(self, backend, job):
        """The job's export in a process of its own (``Backend.hand_over``: the backend
        decides, once), or None: the backend exports in the model process."""
        return backend.hand_over_of(job.options)

    def worker_mode(self, hand_over) -> str:
        """``model`` with a hand-over (the job's :meth:`hand_over`), else ``whole``."""
        return "whole" if hand_over is None else "model"

    def worker_job(self, job, mode: str, output: Path, handover: str | None,
                   hand_over) -> WorkerJob:
        """The worker's job in ``mode``, writing to ``output`` (the partial GLB); in mode
        ``model`` with the hand-over file ``handover`` (a path in the job folder) and the name
        of the export step that continues from it (``hand_over.step``)."""
        return WorkerJob(image=str(self.path.absolute()), output=str(output),
                         options=job.options, mode=mode, handover=handover,
                         export=None if hand_over is None else hand_over.step.name,
                         probed=self.facts)


class AssetInput:
    """A saved asset (``path``) and the export levers it is exported with (``chosen``:
    ``bounded_export.ExportLevers``, checked); make it with :meth:`enter`."""

    noun = "asset"
    refused_kinds = ("bad_asset",)
    """The asset cannot be exported as it is (found from its headers before the trace opens,
    or from its values in the export process's ``load`` step): the job leaves nothing."""
    process = ("export", "the export process")
    STAGES = ("export",)
    """The job's stage plan: one stage, which the export process enters itself."""

    def __init__(self, path: Path | str, chosen):
        self.path = Path(path)
        self.chosen = chosen

    @classmethod
    def enter(cls, path: Path | str, options) -> AssetInput:
        """The asset at ``path`` with the levers of ``options`` (the job's ``JobOptions``,
        without a backend), checked now against the engine (``export_step.levers``: e.g. a
        budget below 256M) — the one check of the levers in this process. Raises
        ``RunnerError('usage')`` naming a bad value."""
        return cls(path, levers(options))

    def backend(self, job) -> None:
        """No backend: the export process runs the bounded export engine itself."""
        return None

    def stages(self, backend) -> list[str]:
        """The job's stage plan: :data:`STAGES`."""
        return list(self.STAGES)

    def hand_over(self, backend, job) -> None:
        """None: the export process is the whole job (the bounded export engine, always)."""
        return None

    def worker_mode(self, hand_over) -> str:
        return "export"

    def handover_pixels(self) -> None:
        """No pixels: the export process reads the asset itself."""
        return None

    def check(self, job) -> tuple[dict, list[str]]:
        """The ``asset`` event with the asset's facts (``check_asset``); no notes."""
        return make("asset", **check_asset(self.path, self.chosen)), []

    def worker_job(self, job, mode: str, output: Path, handover: str | None,
                   hand_over) -> WorkerJob:
        """The export process's job: from the asset (its hand-over) to ``output`` with the
        job's levers and the bounded engine; it enters the one-stage plan itself."""
        return WorkerJob(image=None, output=str(output), options=job.options, mode="export",
                         handover=str(self.path.expanduser().absolute()),
                         export=BOUNDED.name, stages=list(self.STAGES))


def check_asset(path: Path, chosen) -> dict:
    """The ``asset`` event's facts (``path``, ``bytes``, ``faces``, ``vertices``, ``voxels``,
    ``predicted_peak``) after the cheap checks — the file's size and headers, and the budget's
    plan for the levers ``chosen`` (``ExportLevers``, already checked), no array read. Raises
    ``RunnerError`` ``input_missing`` or ``bad_asset`` (the engine's message, naming the
    key)."""
    path = path.expanduser().absolute()
    if not path.exists():
        raise RunnerError("input_missing", f"The asset {path} does not exist.",
                          "Check the path of the asset (.npz).")
    try:
        if not path.is_file():
            raise BadAsset(None, f"{path} is not a file")
        check_file(path.stat().st_size, chosen.budget)
        members = inspect_asset(path)
        faces, voxels = members["faces"].shape[0], members["coords"].shape[0]
        predicted = plan(**asset_sizes(members), target=chosen.decimation_target,
                         texture=chosen.texture_size, file_bytes=path.stat().st_size,
                         budget=chosen.budget).peak
    except BadAsset as err:  # its details: the key at fault, or the budget it does not fit
        raise RunnerError("bad_asset", err.message, err.hint, **err.details) from None
    return {"path": str(path), "bytes": path.stat().st_size, "faces": faces,
            "vertices": members["vertices"].shape[0], "voxels": voxels,
            "predicted_peak": predicted}
