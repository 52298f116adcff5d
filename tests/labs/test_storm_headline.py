"""The storm panel's tiles and recovery clock (``storm_headline``) in each of its
states, from per-second rows as the panel's consumer holds them: no traffic, healthy,
triggered, not recovered, recovered, and a new run after a pause that starts with a fresh
baseline and forgets the previous run's trigger (also one from before a restart). Complete
seconds only: the second under way never counts. And one session's window
(``session_window``), the computation behind the panel's table and the card."""

from __future__ import annotations

from labs.presenters.storm import (
    BASELINE_SECONDS,
    RUN_GAP_S,
    offered_load_text,
    session_window,
    storm_headline,
)


def second(sec: int, calls: int = 0, retries: int = 0, calls_ok: int | None = None) -> dict:
    """A class's second: ``calls`` first attempts and ``retries`` retries arriving, and
    ``calls_ok`` calls answered ok (all of them by default)."""
    ok = calls if calls_ok is None else calls_ok
    return {
        "second": sec, "offered": calls + retries, "calls": calls, "retries": retries,
        "calls_ok": ok, "ok": ok,
    }  # fmt: skip


def healthy(first: int, last: int, calls: int = 100) -> list[dict]:
    return [second(s, calls) for s in range(first, last + 1)]


def trigger(from_s: float, until_s: float, kind: str = "down") -> dict:
    return {"kind": kind, "from_s": from_s, "until_s": until_s}


def test_no_traffic_says_so_and_runs_no_clock():
    h = storm_headline([second(s) for s in range(100, 200)], None, 200)
    assert h["state"] == "no_traffic"
    assert h["recovery_s"] is None and h["baseline"] is None and h["amplification"] is None
    # A trigger with no traffic around it is no reason for a clock either.
    assert storm_headline([], trigger(150, 158), 200)["state"] == "no_traffic"


def test_traffic_that_stopped_is_no_traffic_after_the_gap_even_after_an_unrecovered_trigger():
    rows = healthy(100, 120) + [second(s, 100, 300, 0) for s in range(121, 140)]
    storm = trigger(121, 126)
    assert storm_headline(rows, storm, 141)["state"] == "not_recovered"
    quiet = rows + [second(s) for s in range(140, 140 + RUN_GAP_S)]
    h = storm_headline(quiet, storm, 140 + RUN_GAP_S)
    assert h["state"] == "no_traffic" and h["recovery_s"] is None and h["trigger"] is None


def test_healthy_traffic_without_a_trigger_measures_against_the_calls_asked_for():
    h = storm_headline(healthy(100, 130), None, 131)
    assert h["state"] == "healthy" and h["recovery_s"] is None
    assert h["amplification"] == 1 and h["retry_ratio"] == 0 and h["goodput_share"] == 1
    assert h["run_start"] == 100 and h["baseline"] == 100


def test_the_second_under_way_is_never_counted():
    rows = [*healthy(100, 130), second(131, 3)]  # 131 has only just begun
    assert storm_headline(rows, None, 131)["goodput_share"] == 1
    assert storm_headline(healthy(100, 130), None, 131) == storm_headline(rows, None, 131)


def test_a_running_trigger_is_triggered_with_no_clock_yet():
    rows = healthy(100, 130) + [second(s, 100, 300, 0) for s in range(131, 135)]
    h = storm_headline(rows, trigger(131, 139), 135)
    assert h["state"] == "triggered" and h["recovery_s"] is None
    assert h["trigger"] == trigger(131, 139)
    assert h["amplification"] == 4 and h["retry_ratio"] == 0.75 and h["goodput_share"] == 0
    # The healthy baseline: the goodput of the seconds before the trigger.
    assert h["baseline"] == 100


def test_after_the_trigger_not_recovered_counts_up_from_its_end():
    rows = healthy(100, 130) + [second(s, 100, 300, 0) for s in range(131, 160)]
    h = storm_headline(rows, trigger(131, 139), 160)
    assert h["state"] == "not_recovered" and h["recovery_s"] == 21


def test_recovered_is_the_first_second_back_within_budget_and_at_the_baseline():
    rows = (
        healthy(100, 130)
        + [second(s, 100, 300, 0) for s in range(131, 145)]
        + [second(145, 100, 30, 60)]  # retries within budget, goodput not back yet
        + [second(146, 100, 5, 95)]  # back: 5 % retries, 95 % of the baseline
        + healthy(147, 160)
    )
    h = storm_headline(rows, trigger(131, 139), 161)
    assert h["state"] == "recovered" and h["recovery_s"] == 7
    assert h["goodput_share"] == 1


def test_a_new_run_starts_with_a_fresh_baseline_and_without_the_old_trigger():
    # Run 1 (200 calls/s) ends unrecovered; after a pause, run 2 at 50 calls/s.
    run1 = healthy(100, 120, 200) + [second(s, 200, 600, 0) for s in range(121, 140)]
    pause = [second(s) for s in range(140, 150)]
    run2 = healthy(150, 170, 50)
    h = storm_headline(run1 + pause + run2, trigger(121, 126), 171)
    assert h["state"] == "healthy" and h["run_start"] == 150
    assert h["trigger"] is None and h["recovery_s"] is None
    assert h["baseline"] == 50 and h["goodput_share"] == 1
    # A trigger fired in the new run is measured against the new run's seconds only.
    storm = run1 + pause + run2 + [second(s, 50, 150, 0) for s in range(171, 180)]
    h = storm_headline(storm, trigger(171, 175), 180)
    assert h["state"] == "not_recovered" and h["baseline"] == 50
    assert h["recovery_s"] == 5


def test_a_trigger_from_before_a_restart_is_history_for_traffic_started_since():
    # The model's latest trigger survives in Redis; the consumer's seconds after a restart
    # show only the new traffic, which began long after that trigger ended.
    h = storm_headline(healthy(1000, 1020), trigger(100, 108), 1021)
    assert h["state"] == "healthy" and h["trigger"] is None and h["recovery_s"] is None


def test_a_trigger_fired_before_traffic_started_belongs_to_the_run_it_overlaps():
    rows = [second(s, 100, 300, 0) for s in range(100, 106)]
    h = storm_headline(rows, trigger(98, 110), 106)
    assert h["state"] == "triggered"
    # no healthy second before it: the calls asked for are the baseline
    assert h["baseline"] == 100


def test_a_run_winding_down_shows_no_goodput_rather_than_an_outage():
    rows = healthy(100, 120) + [second(s) for s in range(121, 124)]
    h = storm_headline(rows, None, 124)
    assert h["state"] == "healthy" and h["goodput_share"] is None


def test_a_short_pause_does_not_end_the_run():
    rows = healthy(100, 120) + [second(s) for s in range(121, 121 + RUN_GAP_S - 1)]
    rows += healthy(121 + RUN_GAP_S - 1, 140)
    assert storm_headline(rows, None, 141)["run_start"] == 100
    assert BASELINE_SECONDS > 0


def test_a_session_s_window_is_its_attempts_retries_state_and_share_of_the_class():
    own = [
        {"second": 10, "offered": 4, "retries": 3, "fast": 0, "ok": 0, "error": 4, "shed": 0,
         "skipped": 0, "timeout": 0, "calls": 1, "state": "closed"},
        {"second": 11, "offered": 0, "retries": 0, "fast": 2, "ok": 0, "error": 0, "shed": 0,
         "skipped": 0, "timeout": 0, "calls": 0, "state": "open"},
        {"second": 12, "offered": 0, "retries": 0, "fast": 0, "ok": 0, "error": 0, "shed": 0,
         "skipped": 0, "timeout": 0, "calls": 0, "state": None},
    ]  # fmt: skip
    w = session_window(own, class_offered=40, window_s=5)
    assert w["attempts"] == 4 and w["retries"] == 3 and w["retry_ratio"] == 0.75
    assert w["share"] == 0.1 and w["attempts_per_s"] == 0.8 and w["fast"] == 2
    assert w["state"] == "open" and w["failed"] == 4
    idle = session_window(own[2:], class_offered=0)
    assert idle["retry_ratio"] is None and idle["share"] is None and idle["state"] is None


def test_the_offered_load_sentence_names_sessions_rate_and_capacity():
    assert offered_load_text(31, 5, 200.0) == (
        "31 sessions x 5 calls/s = 155 calls/s, capacity 200 attempts/s"
    )
    assert offered_load_text(31, 10, 200.0).endswith(
        "310 calls/s, capacity 200 attempts/s: over capacity before any trigger"
    )
    assert offered_load_text(1, 5, 80.0).startswith("1 session x 5")
