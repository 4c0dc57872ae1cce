"""The admission wait's pure parts (``stageload.guard.waiting``) on figures made here, no
process, lock or sleep: the decision over readings and the others' reservations, the quiet
time of --busy, the pause before the next poll, and when a ``waiting`` decision is logged.
The loop around them runs for real in test_library.py, test_peers.py and
test_reservations.py."""
from stageload.guard import Amount, GuardConfig
from stageload.guard.waiting import WAITING_REPEAT, WaitClock, WaitingLog, decide

GB = 1024**3
READ = {"available": 12 * GB, "total": 32 * GB, "swap": 0, "pressure": None}


def test_others_reservations_come_off_available_and_are_named_in_a_refusal():
    config = GuardConfig(need=8 * GB, kill_free=Amount(bytes=2 * GB))
    assert decide(config, READ).verdict.ok
    assert decide(config, READ, held=(1 * GB, 1)).verdict.ok  # 11 GiB ≥ 8 + 2
    refused = decide(config, READ, held=(4 * GB, 2))
    assert not refused.verdict.ok and refused.verdict.blocking == ("need",)
    assert refused.verdict.reason.endswith("(after 4.0 GiB reserved by 2 admitted job(s))")
    assert refused.readings["available"] == 8 * GB
    assert refused.readings["available_unreserved"] == 12 * GB
    assert (refused.readings["reserved"], refused.readings["reserved_by"]) == (4 * GB, 2)
    assert refused.held == (4 * GB, 2) and READ["available"] == 12 * GB  # input untouched


def test_without_a_need_reservations_do_not_count():
    config = GuardConfig(wait_free=Amount(bytes=10 * GB))
    decision = decide(config, READ, held=(11 * GB, 3))
    assert decision.verdict.ok and decision.readings == READ


def test_busy_processes_and_quiet_time_pass_through_to_the_decision():
    config = GuardConfig(busy=["ffmpeg"], quiet_for=60)
    busy = decide(config, READ, busy_seen=["pid 5: ffmpeg -i a.mov"], quiet_seconds=0)
    assert not busy.verdict.ok and "busy" in busy.verdict.blocking
    assert busy.busy == ["pid 5: ffmpeg -i a.mov"]
    assert decide(config, READ, quiet_seconds=59).verdict.blocking == ("quiet",)
    assert decide(config, READ, quiet_seconds=60).verdict.ok


def test_quiet_time_counts_from_the_first_poll_without_a_busy_process():
    clock = WaitClock(GuardConfig(busy=["ffmpeg"], quiet_for=30), began=100.0)
    assert clock.observe(101.0, []) == 1.0  # none seen yet: from the start of the wait
    assert clock.observe(105.0, ["pid 5: ffmpeg"]) == 5.0
    assert clock.observe(110.0, ["pid 5: ffmpeg"]) == 10.0
    assert clock.observe(112.0, []) == 0.0  # it ended: the quiet time starts again here
    assert clock.observe(120.0, []) == 8.0 and clock.quiet == 8.0
    assert WaitClock(GuardConfig(), began=0.0).observe(5.0, []) is None  # no --busy


def test_the_pause_ends_at_the_deadline_or_just_past_the_quiet_time():
    clock = WaitClock(GuardConfig(poll=2.0, start_timeout=10.0), began=0.0)
    clock.observe(1.0, [])
    assert clock.pause(1.0, []) == 2.0
    assert clock.pause(9.5, []) == 0.5
    assert not clock.expired(9.99) and clock.expired(10.0)
    quiet = WaitClock(GuardConfig(poll=2.0, busy=["ffmpeg"], quiet_for=5.0), began=0.0)
    quiet.observe(4.0, [])
    assert abs(quiet.pause(4.0, []) - 1.01) < 1e-9
    assert quiet.pause(4.0, ["pid 5: ffmpeg"]) == 2.0  # busy: the quiet time has not begun
    assert not WaitClock(GuardConfig(start_timeout=None), began=0.0).expired(1e9)


def test_waiting_is_logged_at_the_first_refusal_on_a_change_and_every_repeat():
    log = WaitingLog()
    assert log.due(("need",), 0.0)
    assert not log.due(("need",), 1.0)
    assert log.due(("need", "quiet"), 2.0)  # the blocking conditions changed
    assert not log.due(("need", "quiet"), 2.0 + WAITING_REPEAT - 0.1)
    assert log.due(("need", "quiet"), 2.0 + WAITING_REPEAT)
