"""The export stage of a Pixal3D run: the port's memory levers, the checks made before export
starts, the hand-over file between the model process and an export process, and the export
itself through the port's own ``asset_to_glb``.

Levers (``ExportOptions``; ``None`` keeps the port's own default):

- ``decimation_target`` (faces, the port's ``--native-decimation-target``, default 1,000,000);
- ``remesh`` (the port's ``--native-remesh`` / ``--no-native-remesh``, default on);
- ``remesh_resolution``: ``"grid"`` (the pipeline's grid, what the port does) or ``512``
  (remesh at ``min(512, grid)``; only where the port's ``to_glb`` can be adjusted, see
  ``steps.remesh_limit_supported`` — refused otherwise, with the reason);
- ``profile="fit"``: the low-memory values a peer validated on a 36 GB Mac (TencentARC/Pixal3D
  pull request #35, "memory-bounded high-quality Metal exporter": remesh at
  ``min(512, resolution)`` and free Metal temporaries between steps; 989,941 faces against
  937,343 with the default export, a relative difference of ``PEER_FACE_TOLERANCE``).
  Explicit values win over the profile's;
- ``allow_dense_grid_sample``: without it, export is refused before it starts when the port's
  o_voxel lacks flex_gemm's sparse grid sample and would build a dense
  ``channels × grid³`` float32 volume (6 × 1024³ × 4 B = 24.0 GiB);
- ``strict``: any fallback export the port takes by itself (``export_fallbacks``) is an error
  instead of a ``warning`` event.

The hand-over (``save_asset`` / ``load_asset``) is the port's own mesh checkpoint — the
``--save-mesh`` / ``--load-mesh`` ``.npz`` of ``save_mesh_checkpoint`` /
``load_mesh_checkpoint`` (vertices, faces, the sparse voxel ``coords``/``attrs``, ``origin``,
``voxel_size``, ``resolution`` and the ``fdg_*`` tensors when present) — and the asset is
rebuilt as the port's ``main()`` does for ``--load-mesh``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from meshfacts.choices import MAX_DECIMATION_TARGET, PROFILES, REMESH_RESOLUTIONS
from meshfacts.units import format_size
from stageload.pixal3d.errors import PortError
from stageload.pixal3d.export.port_lines import hide_port_lines

PEER_FACES = (989_941, 937_343)
PEER_FACE_TOLERANCE = 1 - PEER_FACES[1] / PEER_FACES[0]


class ExportRefused(PortError):
    """Export would not fit or cannot honour a lever: a message with the figure or the reason,
    and what to do (``PortError`` carries no runner kind: runner/backends/pixal3d/errors.py
    maps it)."""


@dataclass(frozen=True)
class ResolvedExport:
    """Resolved levers: ``decimation_target`` (int or None), ``remesh`` (bool or None),
    ``remesh_limit`` (int or None: remesh at ``min(limit, grid)``), ``free_between_steps``,
    ``allow_dense_grid_sample``, ``profile`` (name or None), ``strict`` (refuse fallbacks)."""

    decimation_target: Optional[int] = None
    remesh: Optional[bool] = None
    remesh_limit: Optional[int] = None
    free_between_steps: bool = False
    allow_dense_grid_sample: bool = False
    profile: Optional[str] = None
    strict: bool = False


@dataclass(frozen=True)
class ExportOptions:
    """The export levers as given (see the module docstring). ``resolve()`` validates them and
    applies the profile; raises ``ValueError`` naming the bad value and the choices."""

    decimation_target: Optional[int] = None
    remesh: Optional[bool] = None
    remesh_resolution: Optional[Any] = None
    profile: Optional[str] = None
    allow_dense_grid_sample: bool = False
    strict: bool = False

    def resolve(self) -> ResolvedExport:
        if self.profile is not None and self.profile not in PROFILES:
            raise ValueError(f"export profile {self.profile!r} is unknown; choose one of "
                             f"{', '.join(PROFILES)}")
        preset = PROFILES.get(self.profile, {})
        target = self.decimation_target
        if target is not None and (isinstance(target, bool) or not isinstance(target, int)
                                   or not 1 <= target <= MAX_DECIMATION_TARGET):
            raise ValueError(f"decimation target {target!r} must be a whole number of faces "
                             f"from 1 to {MAX_DECIMATION_TARGET:,}")
        resolution = self.remesh_resolution
        if resolution is None:
            resolution = preset.get("remesh_resolution", "grid")
        if isinstance(resolution, str) and resolution.isdigit():
            resolution = int(resolution)
        if resolution not in REMESH_RESOLUTIONS:
            raise ValueError(f"remesh resolution {resolution!r} must be 'grid' or 512")
        if self.remesh is False and resolution != "grid":
            if self.remesh_resolution is not None:
                raise ValueError("a remesh resolution needs remeshing on (drop --remesh off or "
                                 "the remesh resolution)")
            resolution = "grid"  # the profile's remesh lever has nothing to act on
        return ResolvedExport(decimation_target=target, remesh=self.remesh,
                              remesh_limit=None if resolution == "grid" else int(resolution),
                              free_between_steps=bool(preset.get("free_between_steps", False)),
                              allow_dense_grid_sample=bool(self.allow_dense_grid_sample),
                              profile=self.profile, strict=bool(self.strict))


def port_argv(settings: ResolvedExport) -> list[str]:
    """The port's own command-line options for the levers it has itself."""
    argv = []
    if settings.decimation_target is not None:
        argv += ["--native-decimation-target", str(settings.decimation_target)]
    if settings.remesh is not None:
        argv.append("--native-remesh" if settings.remesh else "--no-native-remesh")
    return argv


def dense_grid_sample_bytes(channels: int, resolution: int) -> int:
    """Bytes of the dense float32 volume o_voxel's grid-sample fallback builds:
    ``channels × resolution³ × 4`` (6 channels at 1024: 25,769,803,776 B)."""
    return 4 * int(channels) * int(resolution) ** 3


def import_postprocess():
    """The port's ``o_voxel.postprocess`` as its in-process bridge would import it, or None
    when it cannot be imported here (the port then falls back by itself)."""
    try:
        from o_voxel import postprocess
    except Exception:
        return None
    return postprocess


def _native_in_process(args) -> bool:
    return (not args.no_texture and not getattr(args, "force_texture_fallback", False)
            and os.environ.get("PIXAL3D_NATIVE_SUBPROCESS", "").strip() != "1")


def check_export(postprocess, args, asset, settings: ResolvedExport) -> None:
    """Refuse (``ExportRefused``) before export starts when a lever cannot be honoured or the
    port would build the dense grid-sample volume without ``allow_dense_grid_sample``."""
    native = _native_in_process(args) and bool(getattr(asset, "has_voxels", False))
    if settings.remesh_limit is not None:
        _check_remesh_limit(postprocess, args, native)
    if native and postprocess is not None and not getattr(postprocess, "_HAS_FLEX_GEMM", True) \
            and not settings.allow_dense_grid_sample:
        channels = int(asset.mesh.attrs.shape[1])
        need = dense_grid_sample_bytes(channels, asset.resolution)
        raise ExportRefused(
            f"The port's o_voxel cannot import flex_gemm's sparse grid sample, so its bake would "
            f"build a dense {channels} × {asset.resolution}³ float32 volume: {format_size(need)} "
            f"({need:,} bytes) on top of the rest of the export.",
            "Install the port's flex_gemm (extern/mtlgemm) into this interpreter, or accept the "
            "dense volume with --allow-dense-grid-sample.", ("flex_gemm",))


def _check_remesh_limit(postprocess, args, native: bool) -> None:
    if not args.native_remesh:
        raise ExportRefused("A remesh resolution was given but the port will not remesh.",
                            "Turn remeshing on, or leave the remesh resolution at the grid.")
    if not native:
        raise ExportRefused("The remesh resolution can only be changed when the port exports "
                            "through its in-process o_voxel bridge (not with "
                            "PIXAL3D_NATIVE_SUBPROCESS=1, --no-texture or the fallback baker).",
                            "Leave the remesh resolution at the grid.")
    if postprocess is None:
        raise ExportRefused("The remesh resolution cannot be changed: the port's "
                            "o_voxel.postprocess cannot be imported in this interpreter.",
                            "Leave the remesh resolution at the grid.", ("o_voxel.postprocess",))
    from stageload.pixal3d.export.steps import remesh_limit_supported
    ok, reason = remesh_limit_supported(postprocess)
    if not ok:
        raise ExportRefused(f"This port does not support another remesh resolution: {reason}.",
                            "Leave the remesh resolution at the grid (the port's own).",
                            ("o_voxel.postprocess.to_glb",))


def save_asset(gm, asset, path: os.PathLike | str) -> Path:
    """Write ``asset`` with the port's own ``save_mesh_checkpoint`` to ``path`` (must end in
    ``.npz``; created private, 0600, and must not exist). Returns the path.

    The port prints ``[Checkpoint] Saved mesh to PATH`` as it writes (meant for its
    ``--save-mesh``, a file the user asked for); the hand-over is the adapter's own temporary,
    deleted once the export has read it, so that line is dropped — a path the user cannot
    find told them nothing (``port_lines``). Whatever else the port prints passes through."""
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"hand-over path {path} must end in .npz (numpy adds it otherwise)")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with hide_port_lines(("[Checkpoint]",), str(path)):
        gm.save_mesh_checkpoint(path, asset.mesh, asset.vertices, asset.faces,
                                asset.resolution)
    return path


def load_asset(gm, path: os.PathLike | str):
    """The port's ``load_mesh_checkpoint(path)`` wrapped as its ``main()`` does for
    ``--load-mesh``: ``Pixal3DAsset(mesh, vertices, faces, resolution, has_voxels)``."""
    mesh, vertices, faces, resolution = gm.load_mesh_checkpoint(Path(path))
    return gm.Pixal3DAsset(mesh, vertices, faces, resolution, gm._mesh_has_voxels(mesh))


def run_export(gm, asset, output: Path, args, settings: ResolvedExport,
               emit: Callable[[dict], None], device) -> None:
    """Check, then export ``asset`` with the port's ``asset_to_glb(asset, output, args)`` while
    ``ExportSteps`` reports the sub-steps to ``emit`` and ``FallbackWatch`` reports (or, with
    ``settings.strict``, refuses) the port's fallback exports. Raises ``ExportRefused`` before
    anything is written when ``check_export`` refuses, ``ExportFallbackRefused`` (strict) and
    the ``OSError`` of a disk that filled during the native export."""
    from stageload.pixal3d.export.fallbacks import FallbackWatch
    from stageload.pixal3d.export.steps import ExportSteps, freer

    postprocess = import_postprocess() if _native_in_process(args) else None
    check_export(postprocess, args, asset, settings)
    steps = ExportSteps(emit, postprocess, remesh=bool(args.native_remesh),
                        remesh_limit=settings.remesh_limit,
                        free=freer(gm, device) if settings.free_between_steps else None)
    with steps, FallbackWatch(gm, args, emit, settings.strict):
        gm.asset_to_glb(asset, output, args)


def port_args(gm, output: Path, *, seed: int, texture_size: int, pipeline_type: str,
              settings: ResolvedExport, no_texture: bool = False):
    """The port's own argument namespace (its defaults) for its export, from its
    ``parse_args`` with a command line built here, the levers' options included. Raises
    ``ValueError`` when the port's parser rejects them."""
    import sys

    argv = [str(Path(gm.__file__)), "image.png", "--output", str(output), "--seed", str(seed),
            "--texture-size", str(texture_size), "--pipeline-type", pipeline_type]
    argv += (["--no-texture"] if no_texture else []) + port_argv(settings)
    old = sys.argv
    sys.argv = argv
    try:
        return gm.parse_args()
    except SystemExit as exc:
        raise ValueError(f"the port's parse_args rejected {argv[2:]} (see its message "
                         "above)") from exc
    finally:
        sys.argv = old


def export_handover(port, handover: os.PathLike | str, output: os.PathLike | str, *, seed: int,
                    texture_size: int, pipeline_type: str, settings: ResolvedExport,
                    emit: Callable[[dict], None], device) -> dict:
    """The export process's work: rebuild the asset from the hand-over file with the port's
    loader, export it (``run_export``). The ``export`` stage (and its ``handover`` sub-step)
    was entered by whoever started this process, as it started (the runner's supervisor:
    ``runner.backends.pixal3d.handover.HandOver.announce``), so its start-up counts in export.
    ``port``: an opened ``Port``; ``output`` must not exist. Returns ``{"output", "vertices",
    "faces", "resolution", "seconds", "substeps"}`` (the decoded mesh's counts)."""
    import time

    start = time.perf_counter()
    output = Path(output)
    if output.exists():
        raise FileExistsError(f"{output} exists; the adapter never overwrites a file")
    asset = load_asset(port.gm, handover)
    args = port_args(port.gm, output, seed=seed, texture_size=texture_size,
                     pipeline_type=pipeline_type, settings=settings)
    seen: list[str] = []

    def sink(event: dict) -> None:
        if event.get("parent") == "export":
            seen.append(event["stage"])
        emit(event)

    run_export(port.gm, asset, output, args, settings, sink, device)
    if not output.is_file() or output.stat().st_size == 0:
        raise RuntimeError(f"the port's export wrote no GLB at {output}")
    return {"output": str(output), "vertices": int(len(asset.vertices)),
            "faces": int(len(asset.faces)), "resolution": int(asset.resolution),
            "seconds": time.perf_counter() - start, "substeps": seen}
