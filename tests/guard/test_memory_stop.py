"""A real memory hog under the guard: stopped once available memory stays under --kill-free.

The threshold is set relative to what is available when the test starts (available − 2.5 GB),
so other programs on the machine do not change the outcome: a hog growing in 256 MB steps to
a 4 GB cap trips it, the guard exits 3 and its log line carries the readings behind the stop.
"""
import json

import pytest
from guard_helpers import procs, run_guard, tagged

from stageload.meter import system_memory

GB = 1024**3
STEP = 256 * 1024**2
CAP = 4 * GB
MARGIN = int(2.5 * GB)


def test_memory_hog_is_stopped_under_kill_free(env, tmp_path, tag):
    available = system_memory().available
    if available is None or available < CAP + 2 * GB:
        pytest.skip(f"needs about {(CAP + 2 * GB) / GB:.0f} GB available to run a 4 GB hog safely; "
                    f"{'unknown' if available is None else f'{available / GB:.1f} GB'} available")
    kill_free = available - MARGIN
    log = tmp_path / "guard.jsonl"
    out = tmp_path / "hog.out"
    with out.open("w") as hog_out:
        code, err, seconds = run_guard(
            ["--poll", "0.2", "--grace", "2", "--kill-free", f"{kill_free}B", "--kill-samples", "3",
             "--log", str(log)],
            procs("hog", STEP, CAP, 0.1), env, timeout=60, stdout=hog_out)
    assert code == 3, err
    reached = [int(x) for x in out.read_text().split()]
    assert reached, "the hog never allocated"
    # It was stopped before reaching its cap and after it had grown past the margin's size.
    assert reached[-1] < CAP + STEP
    assert reached[-1] >= MARGIN - 2 * STEP
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    assert decisions[-1]["state"] == "exited" and decisions[-1]["by"] == "guard"
    stop = decisions[-2]
    assert stop["state"] == "stopped"
    assert stop["readings"]["available"] < kill_free
    assert stop["readings"]["low_samples"] == 3
    assert stop["readings"]["total"] == system_memory().total
    assert "consecutive samples" in stop["reason"]
    # The human line on stderr says the same, with the readings.
    line = next(x for x in err.splitlines() if x.startswith("guard: stop: available "))
    assert "for 3 consecutive samples; available " in line and "swap " in line
    # The hog is gone (the guard waits for that before it exits).
    assert not [p for p in tagged(tag) if "hog" in p.cmdline()]
    print(f"hog reached {reached[-1] / GB:.2f} GB; guard ran {seconds:.1f} s; "
          f"kill-free {kill_free / GB:.2f} GB; stop readings {stop['readings']}")
