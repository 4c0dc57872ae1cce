"""Job options are checked by the supervisor before anything starts:
a bad --height / --texture-size, an option the chosen backend rejects, or another backend's
option is a usage error (exit 2) right after ``hello`` — no input event, no guard, no worker,
no traceback, no output."""
from __future__ import annotations

import pytest

from meshfacts import options
from meshfacts.choices import TEXTURE_SIZES
from meshfacts.job_options import JobOptions
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
    """The job's options accept what each backend documents (no false refusals), and fill in
    each default once."""
    for size in (1, 512, 1024, 4096):
        JobOptions.parse("builtin", {"texture_size": size, "height_m": 1.8})
    for size in (512, 1024, 2048, 4096):
        JobOptions.parse("pixal3d", {"texture_size": size, "pipeline_type": "1536_cascade",
                                     "keep_resident": "1G"})
    parsed = JobOptions.parse("pixal3d", {"load": "eager"})
    assert {o.dest: getattr(parsed, o.dest) for o in backends.get("pixal3d").options} == {
        "pixal3d_dir": None, "pipeline_type": "1024_cascade", "load": "eager",
        "keep_resident": 0, "prefetch": "on", "working_memory": "lean", "export_process": "own",
        "export_profile": "port",
        "export_engine": "bounded", "export_budget": None, "keep_asset": False,
        "decimation_target": None, "remesh": None, "remesh_resolution": None,
        "allow_dense_grid_sample": False, "strict_export": False}


def test_registry_ranges_match_the_backends():
    """The supervisor's figures are the backends' own (it may not import them: no torch)."""
    from runner.backends import pixal3d
    from runner.backends.builtin.texture import MAX_TEXTURE_SIZE
    from stageload.pixal3d.plan import STAGES

    texture = options.get("texture_size")
    assert (texture.low, texture.high) == (1, MAX_TEXTURE_SIZE)
    assert texture.choices_by["pixal3d"] == TEXTURE_SIZES
    assert options.get("height").backends == ("builtin",)
    assert pixal3d.STAGES is STAGES


def _help(repo_root, *command) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "runner", *command, "--help"], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout


def _codes(spec: str) -> set[int]:
    """``"3, 4"`` → {3, 4}; ``"10-17"`` → {10, …, 17}."""
    out: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        out |= set(range(int(low), int(high or low) + 1))
    return out


@pytest.mark.parametrize("command", [(), ("batch",), ("check",)], ids=["run", "batch", "check"])
def test_help_names_sizes_and_gives_each_default_once(repo_root, command):
    """`--keep-resident KEEP_RESIDENT … (default 0) (default: 0)` once: now SIZE like the
    guard's size options, and each default given once."""
    import re

    text = _help(repo_root, *command)
    assert "--keep-resident SIZE" in text and "KEEP_RESIDENT" not in text
    assert "--pixal3d-dir DIR" in text and "PIXAL3D_DIR]" not in text
    for option, help_text in re.findall(r"\n  (--[\w-]+)[^\n]*\n((?:\s{20,}[^\n]*\n)*)", text):
        assert len(re.findall(r"\(default[: ]", help_text)) <= 1, (option, help_text)
    flat = " ".join(text.split())
    assert "(default 0)" not in flat and flat.count("(default: 0)") == 1


def test_run_and_check_help_list_the_exit_statuses(repo_root):
    """`runner --help` ends with the exit statuses, grouped; every group is real (each code a
    kind of meshfacts/errors.py, or 0) and every kind a single run can end with is listed (5,
    batch_failed, is batch only). The same for check's own list, against the kinds it uses."""
    import re

    from meshfacts.errors import KINDS

    known = {k.exit_code for k in KINDS.values()} | {0}
    # 51 (self_check_failed) ends only a deep check, never a run
    export = {0, 1, 2, 3, 4, 11, 18, 20, 21, 22, 23, 34, 39, 40, 41, 42, 47, 48, 130}
    for command, must in (((), known - {5, 51}),
                          (("check",), {0, 2, 30, 31, 32, 33, 34, 35, 36, 37, 42, 51}),
                          (("export",), export)):
        text = _help(repo_root, *command)
        assert "exit status" in text and "runner/PROTOCOL.md" in text
        listed: set[int] = set()
        for spec in re.findall(r"^  (\d[\d, -]*?)\s{2,}\S", text.split("exit status")[-1], re.M):
            listed |= _codes(spec)
        assert listed <= known, (command, listed - known)
        assert must <= listed, (command, must - listed)
        if command == ("export",):  # no image, batch, backend or Pixal3D status
            assert listed == export, listed ^ export


def test_export_help_describes_the_export_only(repo_root):
    """``runner export --help`` speaks of the bounded engine's levers, not of backends or of
    the port (its options table entries' ``command_help``)."""
    text = _help(repo_root, "export")
    flat = " ".join(text.split())
    assert "backend" not in text.lower() and "the port simplifies" not in flat
    assert "export levers:" in text
    assert "--texture-size PX base-colour texture side in pixels, one of 512, 1024, 2048, " \
           "4096 (default: 1024)" in flat
    assert "faces the bounded export engine decimates the mesh to (default: 1,000,000)" in flat
    assert "at least 256M" in flat
