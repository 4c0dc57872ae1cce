"""Missing and damaged weights: ``runner check`` lists every file the
plan reads without loading it, and a run fails right after ``hello`` — before the guard, the
trace or the worker — with ``weights_missing`` (the first missing file, where it is expected,
the port's own download advice) or ``bad_weights`` (the file, the tensor when known, what is
wrong, delete and download again), never a traceback. Real files: the stand-in weights copied
and damaged by each test; real ``python -m runner`` processes."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from stageload.pixal3d.build.weights import plan_files, safetensors_problem


def _runner(args, env, cwd, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "runner", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture()
def weights_copy(standin_weights, tmp_path):
    """A private copy of the stand-in Hugging Face cache: (env, snapshot folder of Pixal3D)."""
    home = tmp_path / "hf"
    shutil.copytree(standin_weights.env["HF_HOME"], home)
    snapshot = home / standin_weights.model_dir.relative_to(standin_weights.env["HF_HOME"])
    env = {**os.environ, **standin_weights.env, "HF_HOME": str(home), "PIXAL3D_DEVICE": "cpu"}
    return env, snapshot


def test_every_file_of_the_plan_is_listed_and_whole(standin_dir, standin_weights, monkeypatch):
    monkeypatch.setenv("HF_HOME", standin_weights.env["HF_HOME"])
    files = plan_files(standin_dir)
    assert [f.problem for f in files] == [None] * len(files), files
    names = {f.name for f in files}
    for model in ("sparse_structure_flow_model", "sparse_structure_decoder",
                  "shape_slat_flow_model_512", "shape_slat_flow_model_1024", "shape_slat_decoder",
                  "tex_slat_flow_model_1024", "tex_slat_decoder"):
        assert {f"ckpts/{model}.json", f"ckpts/{model}.safetensors"} <= names, names
    assert "ckpts/tex_slat_flow_model_512.safetensors" not in names  # not in the plan
    repos = {f.repo for f in files}
    assert {"ZhengPeng7/BiRefNet", "camenduru/dinov3-vitl16-pretrain-lvd1689m",
            "Ruicheng/moge-2-vitl"} <= repos


def test_check_and_run_with_an_empty_cache_say_weights_missing(standin_dir, tmp_path, repo_root):
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    env = {**os.environ, "HF_HOME": str(empty), "PIXAL3D_DEVICE": "cpu"}
    env.pop("HF_HUB_CACHE", None)
    check, events = _runner(["check", "--backend", "pixal3d", "--pixal3d-dir", standin_dir], env,
                            repo_root, timeout=300)
    verdict = events[-1]["backends"]["pixal3d"]
    assert check.returncode == 36 and verdict["kind"] == "weights_missing", verdict
    assert all(p.startswith(str(empty)) for p in verdict["missing"])
    assert len(verdict["missing"]) >= 3
    assert "pipeline.json" in verdict["reason"] and str(empty) in verdict["reason"]
    assert "generate_mps.py" in verdict["hint"]
    assert "huggingface-cli download TencentARC/Pixal3D" in verdict["hint"]

    image = next(p for p in (repo_root / "tests" / "data" / "images").glob("*.png"))
    proc, events = _runner([image, "-o", tmp_path / "out.glb", "--backend", "pixal3d",
                            "--pixal3d-dir", standin_dir], env, repo_root)
    # before the guard and the worker
    assert [e["event"] for e in events] == ["hello", "error"], events
    err = events[-1]
    assert err["kind"] == "weights_missing" and proc.returncode == 36, err
    assert err["details"]["missing"] == verdict["missing"]
    assert "Traceback" not in proc.stderr and "runner: weights_missing: " in proc.stderr, \
        proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-cache"]


def test_one_missing_checkpoint_is_named(standin_dir, weights_copy, tmp_path, repo_root, rgb_image):
    env, snapshot = weights_copy
    gone = snapshot / "ckpts" / "tex_slat_decoder.safetensors"
    gone.unlink()
    proc, events = _runner([rgb_image, "-o", tmp_path / "out.glb", "--backend", "pixal3d",
                            "--pixal3d-dir", standin_dir], env, repo_root)
    err = events[-1]
    assert err["kind"] == "weights_missing" and err["details"]["missing"] == [str(gone)], err
    assert (f"ckpts/tex_slat_decoder.safetensors of TencentARC/Pixal3D (tex_slat_decoder) "
            f"is expected at {gone}") in err["message"]


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 64])


def _header_claims_more(path):
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    path.write_bytes(struct.pack("<Q", len(data) * 2) + data[8:])


def _bad_header_json(path):
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    path.write_bytes(data[:8] + b"\xff" * length + data[8 + length:])


def _to_folder(path):
    path.unlink()
    path.mkdir()


def _unreadable(path):
    path.chmod(0)


DAMAGE = {
    "truncated": (_truncate, "the file ends before its data"),
    "header claims more": (_header_claims_more, "claims a header of"),
    "bad header": (_bad_header_json, "not the format's JSON"),
    "zero bytes": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "a folder": (_to_folder, "is a folder, not a file"),
    "unreadable": (_unreadable, "cannot be read (permission denied)"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_weights_are_bad_weights_with_path_and_fix(standin_dir, weights_copy, tmp_path,
                                                           repo_root, rgb_image, case):
    if case == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file without permissions")
    env, snapshot = weights_copy
    target = snapshot / "ckpts" / "shape_slat_decoder.safetensors"
    damage, said = DAMAGE[case]
    damage(target)
    try:
        proc, events = _runner([rgb_image, "-o", tmp_path / "out.glb", "--backend", "pixal3d",
                                "--pixal3d-dir", standin_dir], env, repo_root)
    finally:
        target.chmod(0o755 if target.is_dir() else 0o644)
    assert [e["event"] for e in events] == ["hello", "error"], events
    err = events[-1]
    assert err["kind"] == "bad_weights" and proc.returncode == 35, err
    assert str(target) in err["message"] and said in err["message"], err["message"]
    assert err["details"]["file"] == str(target)
    if case == "truncated":
        assert err["details"]["tensors"] and err["details"]["tensors"][0] in err["message"]
    assert "Delete that file" in err["hint"] and "download" in err["hint"]
    assert "Traceback" not in proc.stderr and proc.stderr.count("runner: bad_weights: ") == 1, \
        proc.stderr


def test_a_truncated_dinov3_file_names_its_path(weights_copy, standin_dir, monkeypatch):
    """The backbone's model.safetensors (read by transformers, where SafetensorError said
    'incomplete metadata' with no path)."""
    env, snapshot = weights_copy
    monkeypatch.setenv("HF_HOME", env["HF_HOME"])
    dino = next(f for f in plan_files(standin_dir) if f.repo.startswith("camenduru/") and
                f.name == "model.safetensors")
    _truncate(__import__("pathlib").Path(dino.path))
    again = next(f for f in plan_files(standin_dir) if f.path == dino.path)
    assert again.problem.startswith("tensor ") and "the file ends before its data" in again.problem


def test_a_whole_file_passes_and_trailing_bytes_do_not(tmp_path):
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "m.safetensors"
    save_file({"a": torch.zeros(3, 4), "b": torch.ones(2, dtype=torch.float16)}, str(path))
    assert safetensors_problem(path) is None
    with open(path, "ab") as f:
        f.write(b"\0" * 10)
    assert "10 bytes longer" in safetensors_problem(path)
    assert safetensors_problem(tmp_path / "none.safetensors") == "missing"
