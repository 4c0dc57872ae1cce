"""``check --static``: the port's sources compared with the known commits by ``ast`` alone (no
torch, no port import); the stand-in's table equals the one recorded from the real sources;
a renamed function or a changed signature is named exactly, with its own exit status; a missing
required file fails, a missing optional file is "not checked"; the commit comes from ``.git``."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from stageload.pixal3d.port import known
from stageload.pixal3d.port.static import check_static, scan

CMD = [sys.executable, "-m", "stageload.pixal3d", "check", "--static", "--pixal3d-dir"]


def _copy(standin_dir, tmp_path, edits=(), remove=()):
    dst = tmp_path / "port"
    shutil.copytree(standin_dir, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in edits:
        text = (dst / rel).read_text()
        assert old in text, (rel, old)
        (dst / rel).write_text(text.replace(old, new, 1))
    for rel in remove:
        (dst / rel).unlink()
    return dst


def _check(folder):
    proc = subprocess.run(CMD + [str(folder)], capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_the_standin_has_exactly_the_recorded_table_of_the_newest_commit(standin_dir):
    table = scan(standin_dir)
    api = known.KNOWN_COMMITS[known.NEWEST].api
    assert {name: table["generate"].get(name) for name in api.generate} == api.generate
    assert {name: table["pipeline"].get(name) for name in api.pipeline} == api.pipeline
    assert set(api.generate_names) <= set(table["generate_names"])


def test_the_standin_passes_names_the_commit_and_imports_neither_torch_nor_the_port(standin_dir):
    code, report = _check(standin_dir)
    assert code == 0, report
    assert report["ok"] and report["matches"] == "0be9e69a" and report["drift"] == []
    probe = ("import sys, json; from stageload.pixal3d.port.open import static_report; "
             f"r = static_report({str(standin_dir)!r}); "
             "print(json.dumps([r['ok'], sorted(m for m in sys.modules if m.split('.')[0] in "
             "('torch', 'generate_mps', 'pixal3d', 'numpy'))]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         check=True)
    assert json.loads(out.stdout) == [True, []]


@pytest.mark.parametrize("edit, item", [
    (("generate_mps.py", "def sampler_overrides(", "def stage_overrides("),
     "generate_mps.sampler_overrides (missing; renamed to stage_overrides?)"),
    (("generate_mps.py", "def asset_to_glb(asset, glb_path, args):",
      "def asset_to_glb(asset, glb_path, args, report):"),
     "generate_mps.asset_to_glb(asset, glb_path, args) "
     "(the port has (asset, glb_path, args, report): gained required parameter report)"),
    (("pixal3d/pipelines/pixal3d_image_to_3d.py", "    def decode_latent(",
      "    def decode_latents("),
     "Pixal3DImageTo3DPipeline.decode_latent (missing; renamed to decode_latents?)"),
    # the held-back mutation — a hooked method gains a required parameter
    (("pixal3d/pipelines/pixal3d_image_to_3d.py", "    def decode_latent(self, ",
      "    def decode_latent(self, required_extra, "),
     "Pixal3DImageTo3DPipeline.decode_latent(self, shape_slat, tex_slat, resolution) (the port has "
     "(self, required_extra, shape_slat, tex_slat, resolution): gained required parameter "
     "required_extra)"),
    # ... or loses one
    (("pixal3d/pipelines/pixal3d_image_to_3d.py",
      "    def decode_latent(self, shape_slat, tex_slat, ",
      "    def decode_latent(self, shape_slat, "),
     "Pixal3DImageTo3DPipeline.decode_latent(self, shape_slat, tex_slat, resolution) (the port has "
     "(self, shape_slat, resolution): lost parameter tex_slat)"),
    (("pixal3d/pipelines/pixal3d_image_to_3d.py", "    def get_proj_cond_ss(",
      "    def proj_cond_ss("),
     "Pixal3DImageTo3DPipeline.get_proj_cond_ss (missing; renamed to proj_cond_ss?)"),
])
def test_a_renamed_function_or_changed_signature_is_named_exactly(standin_dir, tmp_path, edit,
                                                                  item):
    code, report = _check(_copy(standin_dir, tmp_path, [edit]))
    assert code == 3 and not report["ok"]
    assert report["error"] == "PortVersionError"
    assert report["drift"] == [item]
    assert item in report["reason"]


def test_a_changed_call_order_is_named(standin_dir, tmp_path):
    edit = ("generate_mps.py",
            "    asset = image_to_asset(pipeline, image, args, device, tmp_dir=glb_path.parent)\n",
            "    asset = None\n")
    code, report = _check(_copy(standin_dir, tmp_path, [edit]))
    assert code == 3
    assert report["drift"] == ["call order in generate_mps.py:main: expected " + " -> ".join(
        known.API_0BE9E69A.orders["generate_mps.py:main"])]


def test_required_files_fail_and_other_files_are_listed_not_checked(standin_dir, tmp_path):
    partial = _copy(standin_dir, tmp_path, remove=["pixal3d/pipelines/rembg/BiRefNet.py"])
    code, report = _check(partial)
    assert code == 0 and report["not_checked"] == ["pixal3d/pipelines/rembg/BiRefNet.py"]
    (partial / "pixal3d/pipelines/pixal3d_image_to_3d.py").unlink()
    code, report = _check(partial)
    assert code == 1 and report["error"] == "PortMissing"
    assert report["missing"] == ["pixal3d/pipelines/pixal3d_image_to_3d.py"]


def test_the_commit_comes_from_git_and_is_named_known_or_not(standin_dir, tmp_path):
    folder = _copy(standin_dir, tmp_path)
    (folder / ".git" / "refs" / "heads").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / ".git" / "refs" / "heads" / "main").write_text(known.NEWEST + "\n")
    code, report = _check(folder)
    assert code == 0 and report["commit"] == known.NEWEST and report["known_commit"] == "0be9e69a"
    (folder / ".git" / "refs" / "heads" / "main").write_text("f" * 40 + "\n")
    code, report = _check(folder)
    assert code == 0 and report["known_commit"] is None and report["matches"] == "0be9e69a"
    assert check_static(folder, "f" * 40)["commit"] == "f" * 40
