"""The options table (meshfacts/options.py) against each view made from it, both ways:
every entry is on the command lines that should take it and nowhere else, every option those
command lines take is an entry (or one of the few plumbing options named here), the backend
registry's options are the table's, the options shared with ``python -m stageload.pixal3d run``
are the same there, and a made-up entry shows up with no other edit."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from meshfacts import options
from runner import backends

REPO = Path(__file__).resolve().parents[2]
#: Options of the runner's command lines that are not job settings (paths, plumbing).
PLUMBING = {"run": {"-h", "-o", "--trace", "--overwrite", "--cancel-on-stdin-eof",
                    "--json", "--version"},
            "batch": {"-h", "-o", "--overwrite", "--cancel-on-stdin-eof", "--json"},
            "check": {"-h", "--backend", "--json", "--deep", "--report"}}


def _parser(command: str) -> argparse.ArgumentParser:
    from runner.commands import batch, check, cli

    if command == "check":
        captured = {}
        original = check.ArgumentParser.parse_args

        def grab(self, argv=None, namespace=None):
            captured["parser"] = self
            raise SystemExit(0)

        check.ArgumentParser.parse_args = grab
        try:
            with pytest.raises(SystemExit):
                check.main([])
        finally:
            check.ArgumentParser.parse_args = original
        return captured["parser"]
    return {"run": cli.build_parser, "batch": batch.build_parser}[command]()


def _guard_flags() -> set[str]:
    from stageload.guard import add_guard_arguments

    ap = argparse.ArgumentParser(add_help=False)
    add_guard_arguments(ap)
    return {s for a in ap._actions for s in a.option_strings}


@pytest.mark.parametrize("command", ["run", "batch", "check"])
def test_each_command_takes_exactly_its_table_options(command):
    parser = _parser(command)
    flags = {s for a in parser._actions for s in a.option_strings if s.startswith("-")}
    flags = {f for f in flags if f.startswith("--") or f in ("-h", "-o")}
    want = {o.flag for o in options.table() if command in o.commands and o.group != "guard"}
    assert want <= flags, want - flags
    guard = _guard_flags() if command != "check" else set()
    aliases = {"--help", "--output", "--output-dir"}
    extra = flags - want - guard - PLUMBING[command] - aliases
    assert extra == set(), extra
    for opt in options.table():
        if opt.group == "guard":
            assert opt.flag in _guard_flags(), opt.name  # the guard's own option
        elif command not in opt.commands and opt.flag not in PLUMBING[command]:
            assert opt.flag not in flags, (command, opt.flag)


def test_the_registry_options_are_the_tables():
    for name in backends.names():
        entry = backends.get(name)
        assert entry.options == options.backend_options(name), name
    owned = {o.dest for n in backends.names() for o in backends.get(n).options}
    assert owned == {o.dest for o in options.table() if o.group == "backend"}
    assert list(options.get("backend").choices) == backends.names()
    assert options.get("backend").default == backends.DEFAULT
    assert options.get("height").backends == ("builtin",)  # the built-in backend's metres


def test_values_round_trip_through_the_runner_parser():
    """Each option's documented values parse to themselves; values outside its choices or range
    are refused with the flag named."""
    parser = _parser("run")
    for opt in options.table():
        if opt.group == "guard" or "run" not in opt.commands:
            continue
        if opt.switch:
            assert getattr(parser.parse_args(["x", "-o", "y", opt.flag]), opt.dest) is True
            continue
        samples = [str(c) for c in opt.choices] or [str(v) for v in (opt.low, opt.high)
                                                  if v is not None] or ["some text"]
        for text in samples:
            ns = parser.parse_args(["x", "-o", "y", opt.flag, text])
            got = getattr(ns, opt.dest)
            assert str(got) == text or got == opt.convert(text), (opt.flag, text, got)
        if opt.choices:
            with pytest.raises(ValueError, match=re.escape(opt.flag)):
                opt.convert("no-such-choice")
        if opt.high is not None:
            with pytest.raises(ValueError, match=re.escape(opt.flag)):
                opt.convert(str(opt.high * 10))
        if opt.low is not None and opt.kind in ("int", "float"):
            with pytest.raises(ValueError, match=re.escape(opt.flag)):
                opt.convert(str(opt.low - 1))


def test_guard_entries_reach_the_guard_as_set():
    """The add-on's guard settings (table entries of group guard) become guard options whose
    parsed values are the settings (percent, GiB, seconds, pattern)."""
    from blender_addon.runner_client import option_views
    from stageload.guard.config import GuardConfig, add_guard_arguments

    values = {"wait_free_percent": 40.0, "kill_free_percent": 0.0, "swap_budget_gb": 6.0,
              "start_timeout": 300.0, "busy": "ffmpeg", "quiet_for": 180.0}
    argv = option_views.job_argv(values, "builtin")
    ap = argparse.ArgumentParser()
    add_guard_arguments(ap)
    cfg = GuardConfig.from_args(ap.parse_known_args(argv)[0])
    assert cfg.wait_free.percent == 40 and cfg.kill_free is None
    assert cfg.swap_budget == 6 * 1024**3 and cfg.start_timeout == 300
    assert cfg.busy == ["ffmpeg"] and cfg.quiet_for == 180
    defaults = GuardConfig()
    assert defaults.kill_free.percent == options.get("kill_free_percent").default
    assert defaults.swap_budget == options.get("swap_budget_gb").default * 1024**3


def test_stageload_run_shares_the_pixal3d_entries():
    """`python -m stageload.pixal3d run` takes every shared entry with the table's choices and
    default (it reads choices.SHARED_OPTIONS; the runner's entries are built from them)."""
    from meshfacts.choices import SHARED_OPTIONS
    from stageload.pixal3d import __main__ as cli

    run = next(a for a in cli._parser()._actions
               if isinstance(a, argparse._SubParsersAction)).choices["run"]
    by_flag = {s: a for a in run._actions for s in a.option_strings}
    for entry in SHARED_OPTIONS:
        opt = options.get(entry["name"])
        action = by_flag[opt.flag]
        assert opt.backends == ("pixal3d",)
        if opt.choices:
            assert tuple(action.choices) == tuple(map(str, opt.choices)), opt.name
        if not opt.switch:
            assert action.default == opt.default, opt.name


def test_figures_are_written_once():
    """The decimation limit and the 1536_cascade advice each appear once in source
    (meshfacts/choices.py); every view reads them from there. (A line giving 100,000,000
    for another figure, e.g. a header limit in bytes, is not the decimation limit.)"""
    limit, advice = re.compile(r"(?<![\d_,])100[_,]?000[_,]?000(?![\d_,])"), "catastrophic shatter"
    found = {"limit": [], "advice": []}
    for part in ("meshfacts", "runner", "stageload", "bounded_export", "blender_addon"):
        for path in (REPO / part).rglob("*.py"):
            text = path.read_text("utf-8")
            rel = str(path.relative_to(REPO))
            found["limit"] += [rel for line in text.splitlines()
                               if "decimation" in line.lower() and limit.search(line)]
            found["advice"] += [rel] * text.count(advice)
    assert found == {"limit": ["meshfacts/choices.py"],
                     "advice": ["meshfacts/choices.py"]}


MADE_UP = """
import sys
from meshfacts import options
made_up = options.Option("wobble_factor", "how much the made-up lever wobbles", kind="int",
                         low=1, high=9, unit="wobbles", metavar="N", backends=("pixal3d",),
                         commands=options.JOB_AND_CHECK,
                         panel=options.Panel("Wobble", section="export", default=3))
options.TABLE = options.TABLE + (made_up,)
options._BY_NAME[made_up.name] = made_up
from runner.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def _made_up(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", MADE_UP, *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_a_made_up_option_shows_up_in_the_runners_help_with_no_other_edit(shared_images,
                                                                           tmp_path):
    for command in ((), ("batch",), ("check",)):
        done = _made_up(*command, "--help")
        assert done.returncode == 0, done.stderr
        assert "--wobble-factor N" in done.stdout and "how much the made-up lever" in \
            " ".join(done.stdout.split()), command
    # ... and is refused with a backend it does not belong to, or out of its range
    done = _made_up(str(shared_images[0]), "-o", str(tmp_path / "a.glb"), "--wobble-factor", "4")
    last = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 2 and "--wobble-factor applies to --backend pixal3d" in \
        last["message"], last
    done = _made_up(str(shared_images[0]), "-o", str(tmp_path / "a.glb"), "--backend", "pixal3d",
                    "--wobble-factor", "12")
    last = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 2 and "--wobble-factor" in last["message"], last
    assert "from 1 to 9 wobbles" in last["message"], last
    assert not (tmp_path / "a.glb").exists()


def _sample_values(opt) -> list:
    """Values of ``opt`` as the runner takes them (a switch given, each choice, a size …)."""
    if opt.kind == "switch":
        return [True]
    if opt.kind == "choice":
        return list(opt.choices)
    if opt.kind == "size":
        return ["2G"]
    if opt.kind == "int":
        return [opt.low or 1, 5000]
    return []


def test_export_levers_name_the_engines_that_take_them():
    """Each export lever's ``engines`` (what the add-on's Export sub-panel shows and passes for
    the chosen engine) agrees with the runner's own check: a lever the runner refuses with an
    engine at any value is marked as not applying to it, so the add-on never sends it."""
    from meshfacts.errors import RunnerError
    from meshfacts.job_options import JobOptions
    from runner.backends import pixal3d

    engines = tuple(step.name for step in pixal3d.EXPORT_STEPS)
    assert options.ENGINES == engines == tuple(options.get("export_engine").choices)
    levers = [o for o in options.table() if o.panel is not None and
              o.panel.section == "export" and o.name != "export_engine"]
    assert levers
    refused_somewhere = set()
    for opt in levers:
        for engine in engines:
            for value in _sample_values(opt):
                try:
                    pixal3d.check_export(JobOptions.parse(
                        "pixal3d", {"export_engine": engine, opt.name: value}))
                except RunnerError:
                    refused_somewhere.add(opt.name)
                    assert not opt.applies_to("pixal3d", engine), (opt.name, engine, value)
    # the port's remesh, profile, process choice and budget are refused by the other engine
    assert {"remesh", "remesh_resolution", "export_profile", "export_process",
            "export_budget"} <= refused_somewhere
    # the port's grid-sample and fallback switches act in the port's export only
    # (stageload/pixal3d/export/run.py); the bounded engine has neither
    for name in ("allow_dense_grid_sample", "strict_export"):
        assert options.get(name).engines == ("port",)
    with pytest.raises(ValueError, match="unknown export engines"):
        options.Option("made_up", "x", engines=("magic",))



def test_working_memory_is_a_pixal3d_choice_from_the_table_to_every_view():
    """``--working-memory lean|port`` (default lean) is the pixal3d backend's, in the runner's
    run/batch/check command lines, in ``python -m stageload.pixal3d run``, the panel's main
    section (the Pixal3D settings) and headless; the add-on passes ``port`` and leaves the
    runner's default (lean) unsaid, and never sends it with the built-in backend."""
    from blender_addon.runner_client import option_views
    from meshfacts.errors import RunnerError
    from meshfacts.job_options import JobOptions
    from runner.commands.option_args import given
    from stageload.pixal3d import __main__ as cli

    opt = options.get("working_memory")
    assert opt in backends.get("pixal3d").options and opt not in backends.get("builtin").options
    assert (opt.default, opt.choices, opt.backends) == ("lean", ("lean", "port"), ("pixal3d",))
    assert set(opt.commands) == {"run", "batch", "check"} and opt.panel.section == "main"
    assert [v for v, *_ in opt.panel.items] == ["lean", "port"]
    for command in ("run", "batch"):
        parser = _parser(command)
        args = ["x", "-o", "y", "--backend", "pixal3d"]

        def parsed(*more, parser=parser, args=args):
            return JobOptions.parse("pixal3d", given(parser.parse_args(args + list(more))))

        assert parser.parse_args(args).working_memory is None  # not given: parsed once, later
        assert parsed().working_memory == "lean"  # ... with the table's default
        assert parsed("--working-memory", "port").working_memory == "port"
        with pytest.raises(RunnerError, match="--working-memory 'tiny' is not one of lean, port"):
            parsed("--working-memory", "tiny")
    stageload_run = cli._parser().parse_args(["run", "a.png", "-o", "b.glb"])
    assert stageload_run.working_memory == "lean"
    argv = option_views.job_argv({"working_memory": "port"}, "pixal3d")
    assert argv[argv.index("--working-memory") + 1] == "port"
    assert "--working-memory" not in option_views.job_argv({"working_memory": "lean"}, "pixal3d")
    assert "--working-memory" not in option_views.job_argv({"working_memory": "port"}, "builtin")
    headless = argparse.ArgumentParser()
    option_views.add_addon_arguments(headless)
    assert headless.parse_args([]).working_memory == "lean"
    assert headless.parse_args(["--working-memory", "port"]).working_memory == "port"


def test_each_option_has_one_default_for_the_runner_the_panel_and_headless():
    """A Panel default only spells "not given" for an option the runner has no default for
    (``""``, 0, False): it never overrides the table's default, so the command line, the panel
    and ``headless.py`` start a job with the same values — seed 42 and a 1024 px texture among
    them — and the worker, the backends and the Pixal3D adapter default nothing again."""
    from blender_addon.runner_client import option_views
    from meshfacts.job_options import JobOptions, job_fields
    from runner.commands.option_args import given
    from stageload.pixal3d.options import RunOptions

    for opt in options.addon_options():
        if opt.panel.default is not None:
            assert opt.default is None, (opt.name, opt.default, opt.panel.default)
    headless = argparse.ArgumentParser()
    option_views.add_addon_arguments(headless)
    defaults = headless.parse_args([])
    for backend in backends.names():
        parsed = JobOptions.parse(backend, given(_parser("run").parse_args(["x", "-o", "y"])))
        for opt in job_fields():
            if opt.panel is None or not opt.applies_to(backend):
                continue
            addon = options.addon_default(opt)
            assert getattr(defaults, opt.name) == addon, opt.name
            words = option_views.runner_words(opt, addon, backend)
            if words:  # what the add-on passes parses to the runner's own default
                passed = JobOptions.parse(backend, {opt.dest: words[-1]})
                assert getattr(passed, opt.dest) == getattr(parsed, opt.dest), opt.name
    assert (parsed.seed, parsed.texture_size) == (42, 1024)
    assert (RunOptions().seed, RunOptions().texture_size) == (parsed.seed, parsed.texture_size)
