"""A decoded asset for the export tests, written in the port's mesh-checkpoint format (the
``--save-mesh`` ``.npz``): a voxel ball's surface at the 64 grid with colour voxels, without
running the pipeline.

``python export_fixture.py ASSET.npz OUT.glb [--limit N] [--no-remesh] [--target N]`` runs the
stand-in's native bridge on it under ``ExportSteps`` and prints one JSON line: sub-steps seen,
faces written, the process's peak RSS (bytes, its own ``VmHWM``: ``ru_maxrss`` would include the
peak of the pytest process that started it) and that mark before the export."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from standin import PORT_DIR as STANDIN  # the stand-in port folder (standin/port)


def write_asset(path: Path, radius: float = 0.3, grid: int = 64) -> Path:
    """Write the ball asset to ``path`` (.npz); returns it."""
    import numpy as np
    import torch
    sys.path.insert(0, str(STANDIN))
    from pixal3d.utils.mesh_extract import voxel_surface_to_mesh

    axis = (np.arange(grid) + 0.5) / grid - 0.5
    x, y, z = np.meshgrid(axis, axis, axis, indexing="ij")
    occ = (x ** 2 + y ** 2 + z ** 2) < radius ** 2
    vertices, faces = voxel_surface_to_mesh(torch.from_numpy(occ))
    coords = np.argwhere(occ).astype(np.int32)
    attrs = np.concatenate([(coords / grid).astype(np.float32),
                            np.full((len(coords), 3), 0.5, np.float32)], axis=1)
    np.savez(str(path), vertices=vertices.numpy(), faces=faces.numpy(), coords=coords,
             attrs=attrs, origin=np.full(3, -0.5, np.float32), voxel_size=np.float32(1 / 1024),
             resolution=np.int32(1024))
    return path


def _run(argv) -> dict:
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("asset")
    p.add_argument("out")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--no-remesh", action="store_true")
    p.add_argument("--target", type=int, default=1_000_000)
    a = p.parse_args(argv)
    sys.path.insert(0, str(STANDIN))
    import trimesh
    from o_voxel import postprocess
    from pixal3d.utils import o_voxel_native_export as bridge

    from stageload.pixal3d.export.steps import ExportSteps

    events = []
    from stageload.meter import high_water_mark
    before = high_water_mark(os.getpid())
    bridge_argv = ["--input", a.asset, "--output", a.out, "--texture-size", "512",
                   "--decimation-target", str(a.target)] + ([] if a.no_remesh else ["--remesh"])
    with ExportSteps(events.append, postprocess, remesh=not a.no_remesh, remesh_limit=a.limit):
        rc = bridge.main(bridge_argv)
    peak = high_water_mark(os.getpid())
    scene = trimesh.load(a.out)
    faces = sum(len(g.faces) for g in scene.geometry.values())
    return {"rc": rc, "steps": [e["stage"] for e in events],
            "parents": sorted({e.get("parent") for e in events}), "faces": faces,
            "peak": peak, "before": before}


if __name__ == "__main__":
    print(json.dumps(_run(sys.argv[1:])))
