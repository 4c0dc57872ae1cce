"""Swap budget with a really swapping child, where this machine allows it (root, swapon and a
memory cgroup); elsewhere skipped with the reason. The decision logic itself is tested on
recorded readings in test_decisions.py whatever the machine."""
import contextlib
import json
import shlex

import pytest
from guard_helpers import kill_tagged, procs, run_guard
from swap_env import Unavailable, swap_environment

MB = 1024**2
BUDGET = 400 * MB


@pytest.fixture
def swap_cgroup(tag):
    with contextlib.ExitStack() as stack:
        try:
            procs_file, notes = stack.enter_context(swap_environment())
        except Unavailable as exc:
            pytest.skip(f"cannot make a child swap here: {exc}")
        # the cgroup can be removed only once its processes are gone
        stack.callback(kill_tagged, tag)
        yield procs_file, notes


def test_swapping_child_is_stopped_past_the_swap_budget(env, tmp_path, swap_cgroup):
    procs_file, notes = swap_cgroup
    log = tmp_path / "guard.jsonl"
    hog = shlex.join(procs("hog", 128 * MB, 1536 * MB, 0.05))  # a checkout path may have spaces
    with open(tmp_path / "hog.out", "w") as hog_out:
        code, err, seconds = run_guard(
            ["--poll", "0.2", "--grace", "2", "--swap-budget", "400M", "--kill-free", "off",
             "--log", str(log)],
            ["sh", "-c", f"echo $$ > {shlex.quote(str(procs_file))} && exec {hog}"], env,
            timeout=60, stdout=hog_out)
    assert code == 3, f"{notes}\n{err}"
    stop = [d for d in map(json.loads, log.read_text().splitlines()) if d["state"] == "stopped"][-1]
    assert stop["state"] == "stopped"
    assert stop["reason"].startswith("swap +") and "over start (budget 400.0 MiB)" in stop["reason"]
    assert stop["readings"]["swap_growth"] > BUDGET
    readings = stop["readings"]
    assert readings["swap"] - readings["swap_at_start"] == readings["swap_growth"]
    assert "guard: stop: swap +" in err
    print(f"{notes}: stopped after {seconds:.1f} s at swap growth "
          f"{readings['swap_growth'] / MB:.0f} MB")
