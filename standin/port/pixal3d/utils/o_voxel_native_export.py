"""Stand-in of the port's ``pixal3d/utils/o_voxel_native_export.py``: the bridge that loads the
mesh ``.npz`` ``generate_mps.py`` wrote, runs ``o_voxel.postprocess.to_glb`` and writes the GLB.
Same options as the real bridge for what the stand-in mirrors; ``main(argv)`` returns the exit
status (the port's ``_run_native_o_voxel_in_process`` calls it in-process)."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

DEFAULT_LAYOUT = {"base_color": slice(0, 3), "metallic": slice(3, 4), "roughness": slice(4, 5),
                  "alpha": slice(5, 6)}

OUTPUT_TRANSFORMS = {
    "o_voxel": np.eye(4),
    "pixal3d": np.diag([-1.0, 1.0, -1.0, 1.0]),
    "y_up": np.array([[1, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=np.float64),
}


def _load_npz(path: Path):
    data = np.load(str(path))
    vertices = torch.from_numpy(data["vertices"].astype(np.float32))
    faces = torch.from_numpy(data["faces"].astype(np.int32))
    attrs = torch.from_numpy(data["attrs"].astype(np.float32))
    coords = torch.from_numpy(data["coords"].astype(np.int32))
    origin = data["origin"].astype(np.float32)
    voxel_size = float(data["voxel_size"])
    resolution = int(data["resolution"])
    aabb = np.stack([origin, origin + voxel_size * resolution]).astype(np.float32)
    return vertices, faces, attrs, coords, aabb, resolution


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Export a Pixal3D mesh NPZ with native o_voxel "
                                                 "(stand-in)")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--texture-size", type=int, default=2048)
    parser.add_argument("--decimation-target", type=int, default=1_000_000)
    parser.add_argument("--remesh", action="store_true")
    parser.add_argument("--remesh-band", type=float, default=1.0)
    parser.add_argument("--remesh-project", type=float, default=0.0)
    parser.add_argument("--output-transform", choices=sorted(OUTPUT_TRANSFORMS), default="pixal3d")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--no-tqdm", action="store_true")
    args, _unknown = parser.parse_known_args(argv)  # the real bridge has many more knobs
    return args


FAULT_ENV = "PIXAL3D_STANDIN_BRIDGE_FAULT"


def _injected_fault(output) -> None:
    """Tests' fault injection (not in the real bridge): ``$PIXAL3D_STANDIN_BRIDGE_FAULT`` =
    ``memory`` raises ``MemoryError``, ``nospace`` ``OSError(ENOSPC)`` where the real bridge
    meets them (the bake done, the GLB about to be written) — the failures seen with an
    address-space limit and a nearly full disk, made deterministic."""
    import errno
    import os

    fault = os.environ.get(FAULT_ENV, "").strip()
    if fault == "memory":
        raise MemoryError("stand-in bridge: injected MemoryError")
    if fault == "nospace":
        raise OSError(errno.ENOSPC, "No space left on device (stand-in: injected)", str(output))


def main(argv=None) -> int:
    args = parse_args(argv)
    from o_voxel import postprocess

    vertices, faces, attrs, coords, aabb, resolution = _load_npz(Path(args.input))
    textured = postprocess.to_glb(vertices=vertices, faces=faces, attr_volume=attrs, coords=coords,
                                  attr_layout=DEFAULT_LAYOUT, aabb=aabb, grid_size=resolution,
                                  decimation_target=args.decimation_target,
                                  texture_size=args.texture_size, remesh=args.remesh,
                                  remesh_band=args.remesh_band, remesh_project=args.remesh_project,
                                  verbose=args.verbose, use_tqdm=not args.no_tqdm)
    _injected_fault(args.output)
    matrix = OUTPUT_TRANSFORMS[args.output_transform]
    textured.apply_transform(matrix)
    if np.linalg.det(matrix[:3, :3]) < 0:
        textured.faces = textured.faces[:, [0, 2, 1]]
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    textured.export(str(output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
