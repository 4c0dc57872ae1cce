"""The add-on's runner plumbing without bpy: the reader thread, cancel escalation, interpreter
resolution, command lines (checked against the real option parsers of stageload.guard)."""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from blender_addon.runner_client import config
from blender_addon.runner_client import job_spec as job
from blender_addon.runner_client.batch_state import BatchRun
from blender_addon.runner_client.process import (
    BAD_LINE,
    EOF,
    EVENT,
    RunnerProcess,
    SpawnError,
    runner_env,
)
from meshfacts.job_options import JobOptions
from runner.commands.option_args import given

PY = sys.executable

# A stand-in "runner" for the plumbing tests only (the real runner is exercised in
# test_addon.py): prints two events and a stray line, then ignores SIGTERM when asked to.
FAKE = textwrap.dedent("""
    import json, signal, sys, time
    if "--ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(json.dumps({"v": 1, "event": "hello", "t": time.time(), "stages": ["a"]}), flush=True)
    print("oops, not json", flush=True)
    print(json.dumps({"v": 1, "event": "stage", "t": time.time(), "stage": "a", "index": 0,
                      "count": 1}), flush=True)
    if "--hang" in sys.argv:
        time.sleep(600)
""")


def fake(tmp_path, *flags):
    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE)
    return RunnerProcess([PY, str(script), *flags], runner_env(tmp_path), cwd=tmp_path)


def test_reader_thread_queues_events_bad_lines_and_eof(tmp_path):
    job = fake(tmp_path)
    job.start()
    items = list(job.iter_blocking())
    kinds = [k for k, _ in items]
    assert kinds == [EVENT, BAD_LINE, EVENT, EOF]
    assert items[0][1]["event"] == "hello" and items[2][1]["stage"] == "a"
    assert "oops, not json" in items[1][1]
    assert job.poll() == 0


def test_cancel_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    job = fake(tmp_path, "--hang", "--ignore-term")
    job.start()
    while not any(k == EVENT and p["event"] == "stage" for k, p in job.drain()):
        time.sleep(0.02)  # the handler is installed before the first line is printed
    t0 = time.monotonic()
    job.cancel(grace=0.5, block=True)
    assert not job.alive
    assert 0.4 < time.monotonic() - t0 < 5
    assert job.poll() == -9
    assert not psutil.pid_exists(job.pid) or psutil.Process(job.pid).status() == "zombie"


def test_cancel_without_blocking_returns_at_once(tmp_path):
    job = fake(tmp_path, "--hang")
    job.start()
    t0 = time.monotonic()
    job.cancel(grace=5)
    assert time.monotonic() - t0 < 0.2
    assert job.wait(timeout=5) is not None  # SIGTERM's default action ends it


def test_spawn_error_names_the_interpreter(tmp_path):
    job = RunnerProcess([str(tmp_path / "nope" / "python"), "-m", "runner"], runner_env(tmp_path),
                        cwd=tmp_path)
    with pytest.raises(SpawnError, match="nope/python"):
        job.start()


def test_runner_env_puts_the_runtime_first_and_never_inherits_pythonpath(tmp_path):
    base = {"PYTHONPATH": "/stale/packages", "PYTHONHOME": "/blender/python",
            "PYTHONSTARTUP": "/x.py"}
    env = runner_env(tmp_path, (), base)
    assert env["PYTHONPATH"] == str(tmp_path)  # Blender's PYTHONPATH is dropped
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONNOUSERSITE"] == "1"
    assert "PYTHONHOME" not in env and "PYTHONSTARTUP" not in env
    env = runner_env(tmp_path, ["/ext/site-packages"], base)
    assert env["PYTHONPATH"] == f"{tmp_path}{os.pathsep}/ext/site-packages"


def test_a_stale_pythonpath_in_blender_does_not_reach_the_runner(tmp_path):
    """A package on Blender's PYTHONPATH that shadows one the runner imports (a broken
    ``psutil``) would break the runner; with runner_env the real runner still answers."""
    from blender_addon.runner_client.process import run_quick

    stale = tmp_path / "stale"
    (stale / "psutil").mkdir(parents=True)
    (stale / "psutil" / "__init__.py").write_text("raise ImportError('stale psutil')\n")
    runtime = config.runtime_dir()
    rc, out, err = run_quick([PY, "-m", "runner", "check"],
                             runner_env(runtime, (), dict(os.environ, PYTHONPATH=str(stale))),
                             cwd=runtime)
    assert rc == 0 and "stale psutil" not in out + err, (out, err)


def test_resolve_interpreter_messages(tmp_path):
    with pytest.raises(config.ConfigError, match="Runner Python not found: .*venv/bin/python"):
        config.resolve_interpreter(str(tmp_path / "missing" / "python"))
    with pytest.raises(config.ConfigError, match="is a folder"):
        config.resolve_interpreter(str(tmp_path))
    f = tmp_path / "python"
    f.write_text("#!/bin/sh\n")
    f.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(config.ConfigError, match="not executable"):
        config.resolve_interpreter(str(f))
    with pytest.raises(config.ConfigError, match="not on PATH"):
        config.resolve_interpreter("python-that-does-not-exist-3.99")
    with pytest.raises(config.ConfigError, match="is empty"):
        config.resolve_interpreter("  ")
    assert config.resolve_interpreter(PY) == PY


def test_a_relative_interpreter_path_is_refused_or_made_absolute(tmp_path, monkeypatch):
    """A preference has no folder to be relative to: refused, naming the full path to set.
    ``--python`` typed in a shell is taken from the folder it was typed in."""
    venv = Path(PY).parents[1]
    rel = os.path.relpath(PY, venv.parent)  # e.g. .venv/bin/python
    monkeypatch.chdir(tmp_path)  # the process's folder is not where the user typed it
    with pytest.raises(config.ConfigError, match="is a relative path. Set .* to a full path"):
        config.resolve_interpreter(rel)
    assert config.resolve_interpreter(rel, base_dir=str(venv.parent)) == PY
    with pytest.raises(config.ConfigError, match="not found"):
        config.resolve_interpreter(rel, base_dir=str(tmp_path))


def test_choose_interpreter_per_backend(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    blender_py = PY
    builtin = config.choose_interpreter("builtin", "", "", blender_py, str(site))
    assert builtin == config.Interpreter(blender_py, (str(site),), builtin.why)
    assert "Blender's own Python" in builtin.why
    # Pixal3D without a folder, or a folder without a venv: refused, saying what to set.
    with pytest.raises(config.ConfigError, match="no Pixal3D-mac folder is set"):
        config.choose_interpreter("pixal3d", "", "", blender_py, str(site))
    port = tmp_path / "Pixal3D-mac"
    port.mkdir()
    with pytest.raises(config.ConfigError, match="no .venv or venv in"):
        config.choose_interpreter("pixal3d", "", str(port), blender_py, str(site))
    (port / ".venv" / "bin").mkdir(parents=True)
    (port / ".venv" / "bin" / "python").symlink_to(PY)
    pix = config.choose_interpreter("pixal3d", "", str(port), blender_py, str(site))
    assert pix.python == str(port / ".venv" / "bin" / "python") and pix.extra_path == ()
    assert "Pixal3D-mac folder" in pix.why
    # The Runner Python preference wins for every backend, without the wheels.
    for backend in job.BACKENDS:
        chosen = config.choose_interpreter(backend, PY, str(port), blender_py, str(site))
        assert (chosen.python, chosen.extra_path) == (PY, ())
    assert config.wheel_site(str(tmp_path)) is None
    version = "python{}.{}".format(*sys.version_info[:2])
    made = tmp_path / ".local" / "lib" / version / "site-packages"
    made.mkdir(parents=True)
    assert config.wheel_site(str(tmp_path)) == str(made)


def test_runtime_in_a_checkout_is_the_repository():
    repo = Path(config.__file__).resolve().parents[2]
    assert config.runtime_dir() == repo


def test_guard_settings_parse_with_the_real_guard_options():
    from stageload.guard.config import GuardConfig, add_guard_arguments

    g = job.JobSettings(wait_free_percent=40, kill_free_percent=10, swap_budget_gb=6,
                        start_timeout=300, busy="ffmpeg|blender_render", quiet_for=180)
    ap = argparse.ArgumentParser()
    add_guard_arguments(ap)

    def guard_argv(settings):
        return [w for w in job.JobSpec(Path("a"), Path("b"), Path("c"), settings).options()
                if w != "--cancel-on-stdin-eof"]

    cfg = GuardConfig.from_args(ap.parse_known_args(guard_argv(g))[0])
    assert cfg.wait_free.percent == 40 and cfg.kill_free.percent == 10
    assert cfg.swap_budget == 6 * 1024**3
    assert cfg.start_timeout == 300 and cfg.busy == ["ffmpeg|blender_render"]
    assert cfg.quiet_for == 180
    off = GuardConfig.from_args(ap.parse_known_args(
        guard_argv(job.JobSettings(kill_free_percent=0, swap_budget_gb=0)))[0])
    assert off.kill_free is None and off.swap_budget is None and off.wait_free is None


def test_free_output_paths_never_reuse_a_name(tmp_path):
    glb, trace = config.free_output_paths(tmp_path / "out", "goblin")
    assert (glb.name, trace.name) == ("goblin.glb", "goblin.trace.jsonl")
    trace.write_text("")  # not the runner's trace: never taken over
    assert config.free_output_paths(tmp_path / "out", "goblin")[0].name == "goblin_2.glb"


def _runner_trace(trace, glb, last: dict) -> None:
    import json

    hello = {"v": 1, "event": "hello", "runner": "0.1", "pid": 1, "output": str(glb)}
    trace.write_text(json.dumps(hello) + "\n" + json.dumps({"event": "stage"}) + "\n"
                     + json.dumps(last) + "\n")


@pytest.mark.parametrize("last,free", [
    ({"event": "error", "kind": "cancelled"}, True),  # the runner replaces its own leftover
    ({"event": "error", "kind": "bad_asset"}, True),
    ({"event": "result", "output": "x"}, False),  # a success's trace stays protected
    ({"event": "stage"}, False),  # no end: maybe a live run
])
def test_free_output_paths_reuse_a_failed_runs_own_leftover_trace(tmp_path, last, free):
    out = tmp_path / "out"
    glb, trace = config.free_output_paths(out, "goblin_reexport")
    _runner_trace(trace, glb, last)
    assert config.leftover_trace(trace, glb) is free
    again = config.free_output_paths(out, "goblin_reexport")[0].name
    assert again == ("goblin_reexport.glb" if free else "goblin_reexport_2.glb")
    _runner_trace(trace, out / "other.glb", {"event": "error"})  # another output's trace
    assert config.free_output_paths(out, "goblin_reexport")[0].name == "goblin_reexport_2.glb"
    _runner_trace(trace, glb, {"event": "error"})
    glb.write_bytes(b"glTF")  # the GLB itself is there: never reused
    assert config.free_output_paths(out, "goblin_reexport")[0].name == "goblin_reexport_2.glb"


def test_batch_bookkeeping(tmp_path):
    b = BatchRun(tmp_path, 4)
    assert b.progress_text() == "1 / 4" and not b.finished
    b.record(tmp_path / "a.png", "skipped", count=4)
    b.record(tmp_path / "b.png", "failed", "not_an_image: b.png is not an image")
    assert b.progress_text() == "3 / 4"
    b.record(tmp_path / "c.png", "done", "c")
    b.record(tmp_path / "d.png", "done", "d", count=4)
    b.ended = True
    assert b.finished and b.progress_text() == "4 / 4"
    assert b.summary() == ("Batch: 2 of 4 done, 1 skipped (done by an earlier run), 1 failed: "
                           "b.png (not_an_image: b.png is not an image)")
    c = BatchRun(tmp_path, 3)
    c.record(tmp_path / "a.png", "done", "a")
    c.cancelled = True
    assert c.finished and c.summary().endswith("; cancelled after 1 (Run Batch again to resume)")
    assert config.list_images(tmp_path) == []
    with pytest.raises(config.ConfigError, match="Batch folder not found"):
        config.list_images(tmp_path / "nope")


def test_job_command_line_parses_with_the_runner_parser(tmp_path):
    """The add-on's command line against the runner's own parser
    (runner.commands.cli.build_parser)."""
    from runner.commands.cli import build_parser

    spec = job.JobSpec(image=tmp_path / "gob lin é.png", output=tmp_path / "o.glb",
                       trace=tmp_path / "o.trace.jsonl", overwrite=True,
                       settings=job.JobSettings(backend="pixal3d", seed=42, texture_size=2048,
                                                pipeline_type="1536_cascade",
                                                pixal3d_dir="~/Pixal3D-mac",
                                                wait_free_percent=40))
    argv = spec.argv("/py")
    assert argv[:3] == ["/py", "-m", "runner"]
    ns = build_parser().parse_args(argv[3:])
    parsed = JobOptions.parse(ns.backend, given(ns))  # as the runner parses them, once
    assert ns.image == str(spec.image) and ns.output == str(spec.output)
    assert ns.trace == str(spec.trace) and ns.backend == "pixal3d" and parsed.seed == 42
    assert parsed.texture_size == 2048 and parsed.pipeline_type == "1536_cascade"
    assert ns.overwrite and parsed.pixal3d_dir == os.path.expanduser("~/Pixal3D-mac")
    assert ns.guard_wait_free.percent == 40


def test_batch_command_line_parses_with_the_runners_batch_parser(tmp_path):
    from runner.commands.batch import build_parser

    spec = job.JobSpec(image=tmp_path, output=tmp_path, trace=tmp_path,
                       settings=job.JobSettings(seed=3, texture_size=512))
    out = config.batch_output_dir(tmp_path / "out", tmp_path / "my art")
    assert out == tmp_path / "out" / "my art_meshes"
    argv = spec.batch_argv("/py", tmp_path / "my art", out)
    assert argv[:4] == ["/py", "-m", "runner", "batch"]
    ns = build_parser().parse_args(argv[4:])
    parsed = JobOptions.parse(ns.backend, given(ns))
    assert parsed.seed == 3 and parsed.texture_size == 512 and ns.cancel_on_stdin_eof


def test_check_summary_from_the_real_runner(tmp_path):
    """`runner check` with the .venv, and with a bare venv that lacks the project's packages
    (what a Mac user gets from /usr/bin/python3): both answers become clear text."""
    from blender_addon.runner_client.process import run_quick

    runtime = config.runtime_dir()
    rc, out, err = run_quick([PY, "-m", "runner", "check"], runner_env(runtime), cwd=runtime)
    assert rc == 0, err
    lines = config.summarize_check(out).splitlines()
    assert lines[0].startswith("Python 3.11") and "torch 2." in lines[0]
    assert "devices: cpu" in lines[1]
    assert "builtin: ready" in lines
    assert any(x.startswith("pixal3d: not available — ") for x in lines)

    import venv
    venv.create(tmp_path / "bare", with_pip=False)
    bare = tmp_path / "bare" / "bin" / "python"
    rc, out, err = run_quick([bare, "-m", "runner", "check"], runner_env(runtime), cwd=runtime)
    assert rc != 0
    text = config.summarize_check(out)
    assert text.startswith(f"ERROR: The Python at {bare} cannot import"), text
    with pytest.raises(ValueError):
        config.summarize_check("")


def test_an_image_path_that_is_a_folder_says_so(tmp_path):
    with pytest.raises(config.ConfigError) as err:
        config.validate_image(tmp_path)
    assert str(err.value) == f"Input image {tmp_path} is a folder; choose an image file."
    with pytest.raises(config.ConfigError, match="Input image not found"):
        config.validate_image(tmp_path / "nope.png")


def test_output_folder_is_resolved_to_an_absolute_path_or_refused(tmp_path, monkeypatch):
    """Relative folders are refused (Blender's and the runner's working folders differ);
    ``//`` needs a saved .blend; nothing may point into the add-on's own folder."""
    monkeypatch.chdir(tmp_path)
    addon = tmp_path / "extensions" / "image_to_mesh"
    (addon / "runtime").mkdir(parents=True)
    blend = tmp_path / "scenes" / "shot.blend"
    ok = config.resolve_output_dir("//renders/out", str(blend), addon)
    assert ok == tmp_path / "scenes" / "renders" / "out" and ok.is_absolute()
    assert config.resolve_output_dir(str(tmp_path / "a" / ".." / "b"), "", addon) == tmp_path / "b"
    home = config.resolve_output_dir("~/itm-out", "", addon)
    assert home == Path(os.path.expanduser("~/itm-out")).resolve()
    for text, words in [("relative_out", ["'relative_out' is a relative path", "absolute"]),
                        ("./out", ["relative path"]),
                        ("//out", ["not saved yet", "Save the .blend first"]),
                        (str(addon / "runtime"), ["inside the add-on's own folder"]),
                        (str(addon), ["inside the add-on's own folder"]),
                        (str(addon / "runtime" / ".." / "x"), ["inside the add-on's own folder"])]:
        with pytest.raises(config.ConfigError) as err:
            config.resolve_output_dir(text, "", addon)
        for w in words:
            assert w in str(err.value), (text, str(err.value))
    # A symlink into the add-on's folder is caught too.
    (tmp_path / "sneaky").symlink_to(addon / "runtime")
    with pytest.raises(config.ConfigError, match="inside the add-on's own folder"):
        config.resolve_output_dir(str(tmp_path / "sneaky" / "out"), "", addon)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extensions", "sneaky"]  # nothing made


def test_a_relative_pixal3d_folder_reaches_the_runner_as_an_absolute_path(tmp_path, monkeypatch):
    """The runner's working folder is the extension's runtime folder, so a relative
    --pixal3d-dir must be made absolute against the caller's working folder first."""
    monkeypatch.chdir(tmp_path)
    spec = job.JobSpec(image=tmp_path / "a.png", output=tmp_path / "a.glb",
                       trace=tmp_path / "a.trace.jsonl",
                       settings=job.JobSettings(backend="pixal3d",
                                                pixal3d_dir=" ports/Pixal3D-mac "))
    argv = spec.argv("/py")
    assert argv[argv.index("--pixal3d-dir") + 1] == str(tmp_path / "ports" / "Pixal3D-mac")


def test_export_settings_reach_the_runner_parser_and_defaults_are_not_passed(tmp_path):
    """The Export sub-panel's levers on the runner's own command line
    (runner.commands.cli.build_parser); at the runner's defaults none is passed; a value the
    runner would refuse is refused here."""
    from runner.commands.cli import build_parser

    def spec(**export):
        return job.JobSpec(image=tmp_path / "a.png", output=tmp_path / "a.glb",
                           trace=tmp_path / "a.trace.jsonl",
                           settings=job.JobSettings(backend="pixal3d", **export))

    flags = ("--export-process", "--export-profile", "--decimation-target", "--remesh",
             "--remesh-resolution", "--allow-dense-grid-sample")
    plain = spec().argv("/py")
    assert not [a for a in plain if a in flags]
    ns = build_parser().parse_args(plain[3:])
    default = (ns.export_process, ns.export_profile, ns.decimation_target, ns.remesh,
               ns.remesh_resolution, ns.allow_dense_grid_sample)
    levers = dict(export_process="in-process", export_profile="fit", decimation_target=250_000,
                  remesh=False, remesh_resolution="512", allow_dense_grid_sample=True)
    argv = spec(export_engine="port", **levers).argv("/py")
    ns = build_parser().parse_args(argv[3:])
    got = (ns.export_process, ns.export_profile, ns.decimation_target, ns.remesh,
           ns.remesh_resolution, ns.allow_dense_grid_sample)
    assert got == ("in-process", "fit", "250000", "off", "512", True), got
    assert default != got
    # with the bounded engine (the default) only its levers go: the port's would be refused
    bounded = spec(**levers).argv("/py")
    assert [a for a in bounded if a in flags] == ["--decimation-target"], bounded
    builtin = job.JobSpec(image=tmp_path / "a.png", output=tmp_path / "a.glb",
                          trace=tmp_path / "a.trace.jsonl",
                          settings=job.JobSettings(export_profile="fit")).argv("/py")
    assert "--export-profile" not in builtin  # the builtin backend has no export levers
    for bad in ({"export_profile": "tiny"}, {"remesh_resolution": "256"},
                {"decimation_target": -1}, {"decimation_target": 10**9},
                {"decimation_target": 1.5}, {"allow_dense_grid_sample": "yes"}):
        with pytest.raises(config.ConfigError):
            job.JobSettings(**bad)


def test_check_summary_without_torch_reads_as_a_sentence():
    """A check answered by a Python without torch (the built-in backend's case): "no torch",
    then the runner's reason — never "torch The Python at … cannot import torch". The event
    is the runner's documented `check` line."""
    line = json.dumps({"v": 1, "event": "check", "t": 1.0,
                       "python": {"version": "3.11.7", "executable": "/x/python"},
                       "torch": {"version": None, "ok": False,
                                 "reason": "The Python at /x/python cannot import torch.",
                                 "hint": "Install PyTorch"},
                       "devices": {"cpu": {"available": True}},
                       "backends": {"builtin": {"ok": True}}, "requested": ["builtin"], "ok": True})
    lines = config.summarize_check(line).splitlines()
    assert lines[0] == ("Python 3.11.7 · no torch (only the built-in backend can run): "
                        "The Python at /x/python cannot import torch."), lines
