"""The add-on's views of the options table (meshfacts/options.py): the panel's and the
preferences' properties, the job description (blender_addon/runner_client/job_spec.py) and
headless.py's arguments
are made from the table, checked both ways; a made-up entry shows up in all of them with no
other edit; headless runs pass their export and guard settings to the runner."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from blender_addon.runner_client import job_spec as job
from blender_addon.runner_client import option_views
from blender_addon.runner_client.facts import options
from meshfacts.job_options import JobOptions
from runner.commands.option_args import given

REPO = Path(__file__).resolve().parents[2]
HEADLESS = REPO / "blender_addon" / "headless.py"


def _run(code: str, *argv, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


PANEL_FACTS = """
import json, os, sys, traceback
try:
    import bpy
    from blender_addon.ui import addon, panel, preferences
    from blender_addon.runner_client.facts import options
    addon.register()
    facts = {}
    for cls, where in ((panel.ImageToMeshSettings, "scene"),
                       (preferences.ImageToMeshPreferences, "preferences")):
        props = cls.bl_rna.properties
        for opt in options.addon_options(where):
            p = props[opt.name]
            entry = {"type": p.type, "name": p.name, "description": p.description,
                     "default": p.default}
            if p.type in ("INT", "FLOAT"):
                entry.update(min=p.hard_min, max=p.hard_max)
            if p.type == "ENUM":
                entry["items"] = [[i.identifier, i.name, i.description] for i in p.enum_items]
            facts[opt.name] = entry
        facts["_" + where] = [p.identifier for p in props
                              if p.identifier not in ("rna_type", "name", "bl_idname")]
    print(json.dumps(facts), flush=True)
except BaseException:
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)
os._exit(0)  # bpy may keep the interpreter from exiting once the add-on is registered
"""


def test_panel_and_preference_properties_are_the_tables():
    """Every add-on option of the table is a property where its panel entry says, with the
    table's label, default, range or items (and advice in the item's description); nothing
    else of the panel or the preferences is a job option."""
    done = _run(PANEL_FACTS)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.splitlines()[-1])
    for opt in options.addon_options():
        kind, kw = option_views.property_spec(opt)
        got = facts[opt.name]
        assert got["name"] == opt.panel.label
        assert got["type"] == {"EnumProperty": "ENUM", "IntProperty": "INT",
                               "FloatProperty": "FLOAT", "BoolProperty": "BOOLEAN",
                               "StringProperty": "STRING"}[kind], opt.name
        if kind == "EnumProperty":
            assert [i[0] for i in got["items"]] == [str(v) for v, *_ in opt.panel.items]
            assert got["default"] == str(options.addon_default(opt))
            for value, _label, desc in got["items"]:
                # every item is a value the runner takes; its advice is in the description
                assert str(opt.convert(value)) == value
                if value in opt.advice:
                    assert desc == opt.advice[value]
        elif kind in ("IntProperty", "FloatProperty"):
            assert got["default"] == pytest.approx(options.addon_default(opt))
            assert got["min"] == pytest.approx(kw["min"])
            if opt.high is not None:
                assert got["max"] == pytest.approx(opt.high)
        else:
            assert got["default"] == options.addon_default(opt)
    own = {"scene": {"image", "batch_folder"},
           "preferences": {"python", "output_dir", "check_report", "check_deep"}}
    for where in ("scene", "preferences"):
        table = {o.name for o in options.addon_options(where)}
        assert set(facts["_" + where]) == table | own[where], where


def test_job_settings_check_values_like_the_runner():
    """JobSettings refuses what the runner refuses (choices, ranges, kinds) and normalises an
    enum's text; its command line parses with the runner's own parser to the same values."""
    from runner.commands.cli import build_parser

    settings = job.JobSettings(backend="pixal3d", texture_size="2048", decimation_target=5000,
                               remesh=False, export_profile="fit", swap_budget_gb=0,
                               export_engine="port")
    assert settings.texture_size == 2048
    spec = job.JobSpec(Path("/a.png"), Path("/a.glb"), Path("/a.trace.jsonl"), settings)
    ns = build_parser().parse_args(spec.argv("/py")[3:])
    parsed = JobOptions.parse(ns.backend, given(ns))  # as the runner parses them, once
    assert (parsed.backend, parsed.texture_size, parsed.decimation_target, parsed.remesh,
            parsed.export_profile) == ("pixal3d", 2048, 5000, "off", "fit")
    assert ns.guard_swap_budget is None  # 0 GiB: off
    for bad in ({"backend": "magic"}, {"texture_size": 0}, {"texture_size": "huge"},
                {"seed": -1}, {"wait_free_percent": 96}, {"pipeline_type": "2048_cascade"},
                {"remesh": "on"}):
        with pytest.raises(job.ConfigError):
            job.JobSettings(**bad)


MADE_UP = """
import json, sys
from blender_addon.runner_client.facts import options
made_up = options.Option("wobble_factor", "how much the made-up lever wobbles", kind="int",
                         low=1, high=9, unit="wobbles", metavar="N", backends=("pixal3d",),
                         panel=options.Panel("Wobble", section="export", default=3))
options.TABLE = options.TABLE + (made_up,)
options._BY_NAME[made_up.name] = made_up
what = sys.argv[1]
if what == "headless":
    from blender_addon import headless
    sys.exit(headless.main(["--help"]))
if what == "panel":
    import os, traceback
    try:
        import bpy
        from blender_addon.runner_client import job_spec as job
        from blender_addon.ui import addon, panel
        addon.register()
        p = panel.ImageToMeshSettings.bl_rna.properties["wobble_factor"]
        s = bpy.context.scene.image_to_mesh
        s.backend = "pixal3d"
        argv = job.JobSpec("a", "b", "c", job.settings_from(s)).argv("/py")
        print(json.dumps({"name": p.name, "default": p.default, "min": p.hard_min,
                          "max": p.hard_max, "argv": argv}), flush=True)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # bpy may keep the interpreter from exiting once the add-on is registered
"""


def test_a_made_up_option_shows_up_in_the_panel_and_headless_with_no_other_edit():
    done = _run(MADE_UP, "headless")
    assert done.returncode == 0, done.stderr[-3000:]
    flat = " ".join(done.stdout.split())
    assert "--wobble-factor N how much the made-up lever wobbles (default: 3)" in flat, flat
    done = _run(MADE_UP, "panel")
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.splitlines()[-1])
    assert (facts["name"], facts["default"], facts["min"], facts["max"]) == ("Wobble", 3, 1, 9)
    argv = facts["argv"]
    assert argv[argv.index("--wobble-factor") + 1] == "3"


def test_headless_help_lists_the_export_levers_and_the_guard_settings():
    done = subprocess.run([sys.executable, str(HEADLESS), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for opt in options.addon_options():
        assert "--" + opt.name.replace("_", "-") in done.stdout, opt.name
    for flag in ("--export-process", "--export-profile", "--decimation-target", "--remesh",
                 "--remesh-resolution", "--allow-dense-grid-sample", "--wait-free-percent"):
        assert flag in done.stdout


def _recording_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter that records its command line, then runs the real one (a real runner)."""
    record = tmp_path / "argv.txt"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}"\nexec "{sys.executable}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake, record


def test_headless_passes_its_export_and_guard_settings_to_the_runner(tmp_path, shared_images):
    """A headless run with a non-default decimation target, export profile, working memory and
    guard settings:
    the runner gets them (recorded by the interpreter), parses them (it fails for the missing
    Pixal3D-mac folder, not for a usage error) and headless exits with the runner's status."""
    from meshfacts.errors import KINDS
    from runner.commands.cli import build_parser

    fake, record = _recording_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PIXAL3D_DIR"}
    done = subprocess.run(
        [sys.executable, str(HEADLESS), str(shared_images[0]), "--glb", str(tmp_path / "a.glb"),
         "--python", str(fake), "--backend", "pixal3d", "--pixal3d-dir", str(tmp_path / "none"),
         "--decimation-target", "250000", "--export-engine", "port", "--export-profile", "fit",
         "--remesh", "off", "--working-memory", "port",
         "--wait-free-percent", "5", "--kill-free-percent", "0"],
        capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    argv = record.read_text().splitlines()
    assert argv[:2] == ["-m", "runner"]
    assert argv[argv.index("--decimation-target") + 1] == "250000"
    assert argv[argv.index("--export-profile") + 1] == "fit"
    assert argv[argv.index("--export-engine") + 1] == "port"
    assert argv[argv.index("--remesh") + 1] == "off"
    assert argv[argv.index("--working-memory") + 1] == "port"
    assert argv[argv.index("--wait-free") + 1] == "5%"
    assert argv[argv.index("--kill-free") + 1] == "off"
    ns = build_parser().parse_args(argv[2:])
    assert ns.decimation_target == "250000" and ns.guard_kill_free is None
    assert ns.working_memory == "port"
    assert done.returncode == KINDS["pixal3d_missing"].exit_code, done.stderr[-2000:]
    assert "image-to-mesh: error:" in done.stderr and not (tmp_path / "a.glb").exists()
    # a value the runner would refuse is refused before anything starts
    record.unlink()
    done = subprocess.run([sys.executable, str(HEADLESS), str(shared_images[0]), "--glb",
                           str(tmp_path / "a.glb"), "--python", str(fake),
                           "--decimation-target", "1000000000"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "--decimation-target" in done.stderr, done.stderr
    assert not record.exists()


def test_an_export_job_passes_only_what_runner_export_takes():
    """The add-on's export job (``job.JobSpec`` kind ``export``, the Re-export) with every
    setting away from its default parses with ``python -m runner export``'s own parser: the
    bounded engine's levers and the guard's options, nothing of a run's."""
    from runner.commands.export import build_parser

    settings = job.JobSettings(backend="pixal3d", texture_size="512", decimation_target=4000,
                               export_budget="1G", export_profile="fit", remesh=False,
                               remesh_resolution="512", keep_asset=True, seed=3,
                               strict_export=True, export_engine="port",
                               wait_free_percent=20.0, swap_budget_gb=2.0, busy="ffmpeg",
                               quiet_for=5.0)
    spec = job.JobSpec(Path("/a.asset.npz"), Path("/a_reexport.glb"), Path("/t.jsonl"),
                       settings, kind="export")
    argv = spec.argv("/py")
    assert argv[:6] == ["/py", "-m", "runner", "export", "/a.asset.npz", "-o"]
    ns = build_parser().parse_args(argv[4:])  # refuses any option it does not take
    assert (ns.asset, ns.output, ns.trace) == ("/a.asset.npz", "/a_reexport.glb", "/t.jsonl")
    parsed = JobOptions.parse(None, given(ns))  # no backend: runner export's levers
    assert (parsed.texture_size, parsed.decimation_target, parsed.export_budget) == \
        (512, 4000, 1 << 30)
    assert ns.cancel_on_stdin_eof and ns.guard_busy == ["ffmpeg"] and ns.guard_quiet_for == 5.0
    with pytest.raises(ValueError, match="unknown job kind"):
        job.JobSpec(Path("a"), Path("b"), Path("c"), kind="render")


def test_the_panel_offers_every_texture_size_the_runner_takes():
    """Generate and Re-export share the scene's texture property: its items are every side the
    Pixal3D backend and ``runner export`` take (4096 among them, as the README's re-export
    example uses), each accepted by the add-on's check and passed to ``runner export``."""
    from bounded_export import TEXTURE_SIZES
    from runner.commands.export import build_parser

    opt = options.get("texture_size")
    name, kw = option_views.property_spec(opt)
    offered = [int(identifier) for identifier, _label, _desc in kw["items"]]
    assert name == "EnumProperty" and 4096 in offered
    assert set(offered) == set(opt.choices_by["pixal3d"]) == set(TEXTURE_SIZES)
    assert all(opt.low <= size <= opt.high for size in offered)  # the built-in backend's range
    for size in offered:
        settings = job.JobSettings(backend="pixal3d", texture_size=str(size))
        spec = job.JobSpec(Path("/a.asset.npz"), Path("/b.glb"), Path("/t.jsonl"), settings,
                           kind="export")
        ns = build_parser().parse_args(spec.argv("/py")[4:])
        assert JobOptions.parse(None, given(ns)).texture_size == size


WRAP = """
import json, os, sys
import bpy
from blender_addon.ui.preferences import wrap_label

class Layout:
    lines = []

    def label(self, text, icon):
        self.lines.append(text)

layout = Layout()
wrap_label(layout, sys.argv[1], width=int(sys.argv[2]))
print(json.dumps(layout.lines), flush=True)
os._exit(0)
"""


def test_wrapped_labels_keep_hyphenated_words_whole():
    """A hint such as ``pip install 'image-to-mesh[cluster]'`` is wrapped for the panel between
    words only: split at its hyphens ("image-to-" / "mesh[cluster]'"), which happened where a
    long checkout path put the line end there, a user could not copy it as shown."""
    text = "Ray is not installed in " + "/x" * 20 + " — pip install 'image-to-mesh[cluster]' " \
           "or leave --cluster out"
    for width in (30, 47, 52, 61, 70):  # line ends at many places in the text
        proc = _run(WRAP, text, width)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = json.loads(proc.stdout.strip().splitlines()[-1])
        assert all(len(line) <= width for line in lines), (width, lines)
        for word in text.split():  # every word that fits a line is on one line, whole
            if len(word) <= width:
                assert any(word in line.split() for line in lines), (width, word, lines)
