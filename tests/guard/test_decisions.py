"""The guard's pure decisions on recorded readings: the budget replayed over a real swap
run-away recorded on this machine (data/swap_run.jsonl, made by record_swap_run.py), the
kill-free run counter, unknown readings, and admission; plus percent/size amounts and
--need-from (sizes themselves: tests/stageload/test_units.py)."""
import argparse
import json
import re
from pathlib import Path

import pytest

from meshfacts.units import format_size
from stageload.guard import (
    Amount,
    Budget,
    ConfigError,
    GuardConfig,
    add_guard_arguments,
    decide_admission,
    parse_amount,
)
from stageload.trace import TraceError, peak_from_trace

DATA = Path(__file__).resolve().parent / "data"
GB = 1024**3
MB = 1024**2


def recorded_swap_run() -> list[dict]:
    lines = [json.loads(line) for line in (DATA / "swap_run.jsonl").read_text().splitlines()]
    return [e for e in lines if e["event"] == "sample"]


def replay(budget: Budget, samples: list[dict]) -> tuple[int | None, str | None]:
    for index, sample in enumerate(samples):
        reason = budget.observe(sample)
        if reason:
            return index, reason
    return None, None


# -- budget on the recorded run ----------------------------------------------------------------
def test_recorded_swap_run_is_stopped_at_the_first_sample_past_the_budget():
    samples = recorded_swap_run()
    growth = [s["swap"] - samples[0]["swap"] for s in samples]
    assert max(growth) > 1 * GB, "the recording should show a real run-away"
    config = GuardConfig(swap_budget=400 * MB, kill_free=None)
    index, reason = replay(Budget(config, swap_at_start=samples[0]["swap"]), samples)
    assert index is not None
    assert growth[index] > 400 * MB and all(g <= 400 * MB for g in growth[:index])
    assert reason == f"swap +{format_size(growth[index])} over start (budget 400.0 MiB)"


def test_recorded_run_within_a_larger_budget_is_left_alone():
    samples = recorded_swap_run()
    peak_growth = max(s["swap"] for s in samples) - samples[0]["swap"]
    config = GuardConfig(swap_budget=peak_growth, kill_free=None)  # growth must *exceed* it
    assert replay(Budget(config, swap_at_start=samples[0]["swap"]), samples) == (None, None)


def test_swap_growth_is_over_the_value_at_start_not_zero():
    config = GuardConfig(swap_budget=1 * GB, kill_free=None)
    budget = Budget(config, swap_at_start=5 * GB)  # a Mac that already swaps 5 GB
    assert budget.observe({"swap": int(5.9 * GB)}) is None
    assert budget.observe({"swap": int(6.2 * GB)}).startswith("swap +1.2 GiB over start")


def test_unknown_swap_at_start_takes_the_first_readable_value():
    budget = Budget(GuardConfig(swap_budget=1 * GB, kill_free=None), swap_at_start=None)
    assert budget.observe({"swap": None}) is None
    assert budget.observe({"swap": 3 * GB}) is None
    assert budget.swap_at_start == 3 * GB
    assert budget.observe({"swap": int(4.5 * GB)}) is not None


# -- kill-free -----------------------------------------------------------------------------------
def low(available, total=48 * GB):
    return {"available": available, "total": total, "swap": 0}


def test_kill_free_needs_consecutive_samples_and_a_good_sample_resets():
    config = GuardConfig(kill_free=Amount(percent=10), kill_samples=3, swap_budget=None)
    budget = Budget(config, swap_at_start=0)
    assert budget.observe(low(3 * GB)) is None       # 6 %
    assert budget.observe(low(4 * GB)) is None       # 8 %
    assert budget.observe(low(20 * GB)) is None      # recovered: the count starts again
    assert budget.observe(low(3 * GB)) is None
    assert budget.observe(low(3 * GB)) is None
    assert budget.observe(low(3 * GB)) == "available 6 % < 10 % for 3 consecutive samples"


def test_unknown_available_neither_counts_nor_resets():
    config = GuardConfig(kill_free=Amount(percent=10), kill_samples=2, swap_budget=None)
    budget = Budget(config, swap_at_start=0)
    assert budget.observe(low(3 * GB)) is None
    assert budget.observe(low(None)) is None           # unknown: skipped
    # percent needs total
    assert budget.observe({"available": 3 * GB, "total": None, "swap": 0}) is None
    assert budget.observe(low(3 * GB)) is not None     # second low sample stops


def test_absolute_kill_free():
    config = GuardConfig(kill_free=Amount(bytes=2 * GB), kill_samples=1, swap_budget=None)
    assert Budget(config, 0).observe(low(1 * GB)) == \
        "available 1.0 GiB < 2.0 GiB for 1 consecutive samples"
    assert Budget(config, 0).observe(low(2 * GB)) is None


def test_both_reasons_are_given_when_both_trip():
    config = GuardConfig(kill_free=Amount(percent=10), kill_samples=1, swap_budget=8 * GB)
    reason = Budget(config, swap_at_start=0).observe({"available": int(3.4 * GB), "total": 48 * GB,
                                                       "swap": int(8.3 * GB)})
    assert reason == ("swap +8.3 GiB over start (budget 8.0 GiB); "
                      "available 7 % < 10 % for 1 consecutive samples")


# -- admission -----------------------------------------------------------------------------------
def test_admission_percent_and_unknown():
    config = GuardConfig(wait_free=Amount(percent=40))
    verdict = decide_admission(config, {"available": 7700000000, "total": 25000000000, "swap": 0})
    assert not verdict.ok and verdict.reason == "available 31 % < 40 %"
    assert verdict.blocking == ("wait_free",)
    assert decide_admission(config, {"available": 11 * GB, "total": 25 * GB, "swap": 0}).ok
    unknown = decide_admission(config, {"available": None, "total": 25 * GB, "swap": 0})
    assert not unknown.ok and unknown.blocking == ("unknown",)
    assert "available cannot be read" in unknown.reason
    # The budget's readings count too: swap unknown with a swap budget means "do not start".
    assert not decide_admission(GuardConfig(),
                                {"available": 20 * GB, "total": 25 * GB, "swap": None}).ok
    assert decide_admission(GuardConfig(swap_budget=None, kill_free=None), {}).ok


def test_admission_need_includes_the_kill_free_floor():
    config = GuardConfig(need=10 * GB, kill_free=Amount(bytes=2 * GB))
    short = decide_admission(config, {"available": 11 * GB, "total": 48 * GB, "swap": 0})
    assert not short.ok
    assert short.reason == "available 11.0 GiB < need 10.0 GiB + kill-free floor 2.0 GiB"
    assert decide_admission(config, {"available": 12 * GB, "total": 48 * GB, "swap": 0}).ok


def test_admission_busy_quiet_and_swap_limit():
    config = GuardConfig(busy=["ffmpeg"], quiet_for=180, swap_limit=1 * GB)
    readings = {"available": 20 * GB, "total": 48 * GB, "swap": 2 * GB}
    verdict = decide_admission(config, readings, busy_seen=["pid 5: ffmpeg -i a.mov"],
                               quiet_seconds=0)
    assert verdict.blocking == ("busy", "swap_limit")
    assert verdict.reason == "busy: pid 5: ffmpeg -i a.mov; swap 2.0 GiB > limit 1.0 GiB"
    readings["swap"] = 0
    assert decide_admission(config, readings, quiet_seconds=179.5).reason == \
        "quiet for 179 s of 180 s"
    assert decide_admission(config, readings, quiet_seconds=180).ok


# -- parsing -------------------------------------------------------------------------------------
def test_parse_amount_with_required_unit():
    assert parse_amount("0", require_unit=True) == Amount(bytes=0)
    assert parse_amount("40%", require_unit=True) == Amount(percent=40.0)
    with pytest.raises(ValueError, match="write 40% or 40G"):
        parse_amount("40", require_unit=True)
    with pytest.raises(ValueError, match="write 2.5% or 2.5G"):
        parse_amount("2.5", require_unit=True)


def test_satisfiable_is_judged_against_total_memory():
    total = 16 * GB
    GuardConfig(wait_free=Amount(bytes=15 * GB)).check_satisfiable(total)
    GuardConfig(wait_free=Amount(percent=99.0)).check_satisfiable(total)
    GuardConfig(need=14 * GB).check_satisfiable(total)  # + 1.6 GiB floor < 16 GiB
    for config, message in [
        (GuardConfig(wait_free=Amount(bytes=30 * GB)),
         "--wait-free 30.0 GiB is not less than this machine's 16.0 GiB"),
        (GuardConfig(wait_free=Amount(percent=100.0)), "never reaches 100 %"),
        (GuardConfig(need=100 * GB), "--need 100.0 GiB is not less than"),
        (GuardConfig(need=15 * GB), "plus the --kill-free floor 1.6 GiB"),
        (GuardConfig(kill_free=Amount(bytes=16 * GB)), "every command would be stopped"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            config.check_satisfiable(total)
    GuardConfig(need=100 * GB).check_satisfiable(None)  # unknown total: nothing is refused


def test_parse_amount():
    assert parse_amount("40%") == Amount(percent=40.0)
    assert parse_amount("18G") == Amount(bytes=18 * GB)
    assert parse_amount("40%").resolve(50 * GB) == 20 * GB
    assert parse_amount("40%").resolve(None) is None
    with pytest.raises(ValueError, match="between 0% and 100%"):
        parse_amount("101%")


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_guard_arguments(parser)
    return GuardConfig.from_args(parser.parse_args(list(argv)))


def test_options_round_trip_and_defaults():
    config = parse()
    assert config.kill_free == Amount(percent=10) and config.swap_budget == 8 * GB
    assert config.start_timeout is None and config.busy == []
    config = parse("--wait-free", "18G", "--busy", "ffmpeg", "--busy", "python .*train",
                   "--quiet-for", "180", "--swap-limit", "1G", "--start-timeout", "600",
                   "--swap-budget", "off", "--kill-free", "5%", "--kill-samples", "4",
                   "--poll", "0.25", "--grace", "3", "--log", "g.jsonl", "--need", "3G")
    assert (config.wait_free, config.busy, config.quiet_for, config.swap_limit,
            config.start_timeout) == \
        (Amount(bytes=18 * GB), ["ffmpeg", "python .*train"], 180.0, 1 * GB, 600.0)
    assert (config.swap_budget, config.kill_free, config.kill_samples, config.poll, config.grace,
            config.log, config.need) == (None, Amount(percent=5.0), 4, 0.25, 3.0, "g.jsonl", 3 * GB)


def test_need_from_trace_takes_the_peak_of_footprint_and_hwm(tmp_path):
    trace = tmp_path / "run.trace.jsonl"
    trace.write_text("\n".join([
        json.dumps({"event": "stage", "t": 1.0, "stage": "setup", "index": 0, "count": 2}),
        json.dumps({"event": "sample", "t": 1.1, "pid": 1, "footprint": 1 * GB, "hwm": None}),
        json.dumps({"event": "sample", "t": 1.2, "pid": 1, "footprint": 2 * GB, "hwm": 3 * GB}),
        json.dumps({"event": "load", "t": 1.3, "bytes": 99 * GB}),  # not a sample: ignored
        json.dumps({"event": "sample", "t": 1.4, "pid": 1, "footprint": 1 * GB, "hwm": 3 * GB}),
        '{"event": "sample", "t": 1.5, "footpr',  # cut off by a kill
    ]) + "\n")
    assert peak_from_trace(trace) == 3 * GB
    config = parse("--need-from", str(trace))
    assert config.need == 3 * GB and config.need_source == str(trace)


def test_need_from_rejects_what_is_not_a_trace(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(TraceError, match="not a JSON object"):
        peak_from_trace(other)
    with pytest.raises(ConfigError, match="--need-from: .*is this a stageload trace"):
        parse("--need-from", str(other))
    with pytest.raises(ConfigError, match="either --need or --need-from"):
        parse("--need", "1G", "--need-from", str(other))


def test_refusals_carry_structured_thresholds():
    """What available memory must reach, for programs (the panel reads it, never `reason`):
    the --wait-free threshold with its percent, the need plus the kill-free floor in bytes."""
    verdict = decide_admission(GuardConfig(wait_free=Amount(percent=40)),
                               {"available": 7700000000, "total": 25000000000, "swap": 0})
    assert verdict.thresholds == {"wait_free": {"required": 10000000000, "percent": 40.0}}
    verdict = decide_admission(GuardConfig(wait_free=Amount(bytes=20 * GB), need=10 * GB,
                                           kill_free=Amount(bytes=2 * GB)),
                               {"available": 11 * GB, "total": 48 * GB, "swap": 0})
    assert verdict.thresholds == {"wait_free": {"required": 20 * GB, "percent": None},
                                  "need": {"required": 12 * GB, "percent": None}}
    assert decide_admission(GuardConfig(), {"available": 20 * GB, "total": 25 * GB,
                                            "swap": 0}).thresholds == {}
