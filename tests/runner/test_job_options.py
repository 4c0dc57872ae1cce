"""Job options are checked by the supervisor before anything starts (tester's report, item 2):
a bad --height / --texture-size, an option the chosen backend rejects, or another backend's
option is a usage error (exit 2) right after ``hello`` — no input event, no guard, no worker,
no traceback, no output."""
from __future__ import annotations

import pytest

from runner import backends


BAD = [
    (["--height", "inf"], "--height"),
    (["--height", "nan"], "--height"),
    (["--height", "0"], "--height"),
    (["--height", "-1"], "--height"),
    (["--height", "1000"], "--height"),
    (["--texture-size", "0"], "--texture-size"),
    (["--texture-size", "-5"], "--texture-size"),
    (["--texture-size", "100000"], "--texture-size"),
    (["--texture-size", "big"], "--texture-size"),
    (["--backend", "pixal3d", "--height", "2"], "--height"),
    (["--backend", "pixal3d", "--texture-size", "1000"], "--texture-size"),
    (["--backend", "pixal3d", "--keep-resident", "lots"], "--keep-resident"),
    (["--pipeline-type", "1536_cascade", "--load", "eager"], "--pipeline-type"),
    (["--pixal3d-dir", "/somewhere"], "--pixal3d-dir"),
]


@pytest.mark.parametrize("args,flag", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_option_refused_before_anything_starts(rt, shared_images, tmp_path, args, flag):
    out = tmp_path / "a.glb"
    fin = rt.run([shared_images[0], "-o", out, *args], timeout=60)
    assert fin.kinds() == ["hello", "error"], (fin.kinds(), fin.stderr[-1500:])
    err = fin.last()
    assert err["kind"] == "usage" and fin.returncode == 2 == err["exit_code"]
    assert flag in err["message"], err
    assert "Traceback" not in fin.stderr and "guard:" not in fin.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_other_backends_option_names_its_backend(rt, shared_images, tmp_path):
    fin = rt.run([shared_images[0], "-o", tmp_path / "a.glb", "--load", "eager"])
    err = fin.last()
    assert "--backend pixal3d only" in err["message"] and "--backend pixal3d" in err["hint"]


def test_batch_checks_options_too(rt, shared_images, tmp_path):
    fin = rt.run(["batch", shared_images[0].parent, "-o", tmp_path / "out", "--height", "inf"])
    assert fin.kinds() == ["hello", "error"] and fin.returncode == 2
    assert not (tmp_path / "out").exists()


def test_good_values_pass_validation():
    """The registry accepts what each backend documents (no false refusals)."""
    builtin, pixal3d = backends.get("builtin"), backends.get("pixal3d")
    for size in (1, 512, 1024, 4096):
        builtin.validate(texture_size=size, height_m=1.8, options={})
    for size in (512, 1024, 2048, 4096):
        pixal3d.validate(texture_size=size, height_m=None,
                         options={"pipeline_type": "1536_cascade", "keep_resident": "1G"})
    assert pixal3d.job_options({"load": "eager"}) == {
        "pixal3d_dir": None, "pipeline_type": "1024_cascade", "load": "eager",
        "keep_resident": "0"}


def test_registry_ranges_match_the_backends():
    """The supervisor's figures are the backends' own (it may not import them: no torch)."""
    from runner.backends import pixal3d
    from runner.backends.builtin.texture import MAX_TEXTURE_SIZE

    assert backends.get("builtin").texture_sizes == (1, MAX_TEXTURE_SIZE)
    assert backends.get("pixal3d").texture_sizes == pixal3d.TEXTURE_SIZES
    assert backends.get("pixal3d").height_range is None
