"""A port at 0578f857's shape (``main()`` inlines ``init_pipeline``, the camera, ``run()`` and
the export functions; ``parse_args()`` reads ``sys.argv``; no ``load_pipeline`` /
``image_to_asset`` / ``asset_to_glb``): made here from the stand-in, the static check
recognises it as 0578f857's API, and the adapter's older driver gives exactly what the
entry-point driver gives on the stand-in, staged and eager."""
from __future__ import annotations

import shutil

import pytest

from stageload.pixal3d import compare
from stageload.pixal3d.port.static import check_static
from tests.pixal3d.runs import new_run

OLD_MAIN = '''def main():
    args = parse_args()
    glb_path = output_glb_path(args.output)
    load_runtime_deps()
    device = resolve_device(args.device)
    pipeline = init_pipeline(args.model_path, device)
    image_preprocessed = pipeline.preprocess_image(Image.open(args.image))
    camera_params = {"camera_angle_x": float(args.fov), "distance": 2.0,
                     "mesh_scale": args.mesh_scale}
    torch.manual_seed(args.seed)
    mesh_list, (shape_slat, tex_slat, resolution) = pipeline.run(
        image_preprocessed, camera_params=camera_params, seed=args.seed, preprocess_image=False,
        return_latent=True, pipeline_type=args.pipeline_type, max_num_tokens=args.max_num_tokens)
    mesh = mesh_list[0]
    vertices, faces = mesh.vertices.cpu().numpy(), mesh.faces.cpu().numpy()
    if not try_export_native_o_voxel_glb(mesh, resolution, vertices, faces, glb_path, args):
        export_fallback_texture_glb(mesh, vertices, faces, glb_path, args)


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def legacy_dir(standin_dir, tmp_path_factory):
    dst = tmp_path_factory.mktemp("legacy") / "port"
    shutil.copytree(standin_dir, dst, ignore=shutil.ignore_patterns("__pycache__"))
    path = dst / "generate_mps.py"
    text = path.read_text()
    text = text.replace("def parse_args(argv=None):", "def parse_args():").replace(
        "    return p.parse_args(argv)", "    return p.parse_args()")
    for name in ("load_pipeline", "image_to_asset", "asset_to_glb"):
        text = text.replace(f"def {name}(", f"def _absent_{name}(")
    text = text[:text.index("def main():")] + OLD_MAIN
    path.write_text(text)
    return dst


def test_the_static_check_recognises_0578f857s_api(legacy_dir):
    report = check_static(legacy_dir)
    assert report["ok"] and report["matches"] == "0578f857" and report["runs"] == "main_inline"


@pytest.mark.parametrize("load", ["staged", "eager"])
def test_the_older_driver_gives_what_the_entry_points_give(standin_dir, standin_weights, legacy_dir,
                                                           rgb_image, tmp_path, load):
    results = {}
    for name, folder in (("entry", standin_dir), ("legacy", legacy_dir)):
        run = new_run(folder, load=load, seed=5, texture_size=512,
                      fingerprint=tmp_path / f"{name}.fp")
        assert run.entry_points is (name == "entry")
        results[name] = run.generate(rgb_image, tmp_path / f"{name}.glb", fov=0.6, steps=2)
        run.close()
    report = compare(results["entry"]["fingerprint"], results["legacy"]["fingerprint"])
    assert report["identical"] and "mesh" in report["entries"], report
    assert (tmp_path / "legacy.glb").stat().st_size > 0
