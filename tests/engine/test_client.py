"""The guarded client: both nestings, classification, budget, deadline, Retry-After."""

from __future__ import annotations

import pytest

from labs.engine import SystemClock
from labs.engine.events import EVENT_KINDS

from .helpers import Rig


def test_breaker_outside_counts_calls_and_retries_inside():
    rig = Rig({"mode": "down"}, {"breaker": {"failure_threshold": 2}})
    burst = rig.burst(4)
    assert burst.attempts == [4, 4, 0, 0]
    assert [c.outcome for c in burst.calls] == [
        "failure",
        "failure",
        "rejected_open",
        "rejected_open",
    ]
    assert (burst.succeeded, burst.failed, burst.fast_failed) == (0, 2, 2)


def test_half_open_probe_gets_exactly_one_attempt_in_breaker_outside():
    rig = Rig({"mode": "down"}, {"breaker": {"failure_threshold": 1, "cooldown_ms": 100}})
    rig.burst(1)
    rig.clock.advance(0.1)
    probe = rig.call()
    assert (probe.attempts, probe.outcome, probe.probe) == (1, "failure", True)
    assert rig.breaker.state() == "open"
    assert "a half-open probe gets one attempt" in rig.events.of_kind("call_result")[-1].explain


def test_retry_outside_every_attempt_passes_the_breaker_and_open_stops_the_loop():
    rig = Rig({"mode": "down"}, {"nesting": "retry_outside", "breaker": {"failure_threshold": 3}})
    burst = rig.burst(3)
    assert burst.attempts == [3, 0, 0]
    assert [c.outcome for c in burst.calls] == ["failure", "rejected_open", "rejected_open"]
    # the attempt that opened the breaker was not followed by a useless sleep
    assert len(rig.events.of_kind("sleep")) == 2
    assert "an open breaker is never retried" in rig.events.of_kind("call_result")[0].explain


def test_retry_outside_rejection_after_attempts_ends_the_call_as_a_failure():
    # Two callers fail at t=10; the second failure opens the breaker (that caller stops at once),
    # the first caller wakes from its backoff at t=35 and meets the open breaker.
    rig = Rig(
        {"mode": "down", "latency_ms": 10},
        {"nesting": "retry_outside", "breaker": {"failure_threshold": 2}},
    )
    burst = rig.burst(2, concurrency=2)
    assert sorted(burst.attempts) == [1, 1]
    assert all(c.outcome == "failure" for c in burst.calls)
    [rejected] = rig.events.of_kind("rejected")
    assert (rejected.call, rejected.attempt, rejected.at_ms) == (1, 2, 35)
    assert burst.fast_failed == 0


def test_a_400_is_not_retried_and_not_counted_by_the_breaker():
    rig = Rig({"mode": "down", "error": "400"}, {"breaker": {"failure_threshold": 1}})
    burst = rig.burst(3)
    assert burst.attempts == [1, 1, 1]
    assert all(c.outcome == "failure" and c.error == "400" for c in burst.calls)
    assert rig.breaker.state() == "closed"
    assert rig.events.of_kind("sleep") == []


def test_a_400_is_ignored_by_the_breaker_in_retry_outside_too():
    rig = Rig(
        {"mode": "down", "error": "400"},
        {"nesting": "retry_outside", "breaker": {"failure_threshold": 1}},
    )
    assert rig.burst(2).attempts == [1, 1]
    assert rig.breaker.state() == "closed"


def test_retry_after_replaces_a_shorter_backoff():
    rig = Rig({"mode": "rate_limited", "retry_after_ms": 300})
    result = rig.call()
    assert (result.outcome, result.attempts, result.backoff_ms) == ("success", 2, 295)
    [sleep] = rig.events.of_kind("sleep")
    assert (
        sleep.explain
        == "attempt 1 failed (429); sleeping 295 ms = Retry-After 295 ms (backoff alone: 25 ms)"
    )


def test_retry_budget_stops_retries_when_empty():
    rig = Rig(
        {"mode": "down"},
        {
            "retry_budget": {"token_ratio": 0.5, "max_tokens": 2},
            "breaker": {"failure_threshold": 20},
        },
    )
    burst = rig.burst(4)
    # call 1: 2 tokens -> 2 retries; call 2: +0.5 -> none; call 3: 1.0 -> one retry; call 4: +0.5
    assert burst.attempts == [3, 1, 2, 1]
    assert [c.outcome for c in burst.calls] == ["budget_exhausted"] * 4
    assert (
        "retry budget has 0.00 tokens (a retry needs 1)"
        in rig.events.of_kind("budget_exhausted")[0].explain
    )


def test_deadline_never_starts_a_sleep_that_would_pass_it():
    rig = Rig(
        {"mode": "down", "latency_ms": 20},
        {"deadline_ms": 200, "max_attempts": 5, "backoff_base_ms": 50, "backoff_cap_ms": 400},
    )
    result = rig.call()
    assert (result.outcome, result.attempts, result.backoff_ms) == ("deadline_exceeded", 3, 150)
    assert result.end_ms == 210
    [stop] = rig.events.of_kind("deadline_exceeded")
    assert stop.backoff_ms == 200


def test_attempt_timeout_cuts_slow_attempts():
    rig = Rig({"mode": "slow", "latency_ms": 1000}, {"attempt_timeout_ms": 100, "max_attempts": 2})
    result = rig.call()
    assert (result.outcome, result.error, result.end_ms) == ("failure", "timeout", 225)


def test_concurrent_burst_shares_the_call_counter_and_is_deterministic():
    runs = []
    for _ in range(2):
        rig = Rig({"mode": "flaky", "fail_count": 5, "latency_ms": 7}, {"jitter": "full"})
        burst = rig.burst(10, concurrency=4)
        runs.append(([c.to_dict() for c in burst.calls], [e.to_dict() for e in rig.events]))
    assert runs[0] == runs[1]
    calls = runs[0][0]
    assert [c["call"] for c in calls] == list(range(1, 11))
    assert sum(c["attempts"] for c in calls) == 15


def test_concurrent_burst_on_the_system_clock_runs_in_threads():
    rig = Rig({"mode": "healthy", "latency_ms": 1}, clock=SystemClock())
    burst = rig.burst(6, concurrency=3)
    assert burst.succeeded == 6 and burst.attempts == [1] * 6


def test_every_event_has_a_known_kind_and_an_explanation():
    rig = Rig(
        {"mode": "flaky", "fail_count": 2}, {"retry_budget": {"token_ratio": 0.1, "max_tokens": 1}}
    )
    rig.burst(3)
    assert {e.kind for e in rig.events} <= set(EVENT_KINDS)
    assert all(e.explain for e in rig.events)
    assert all(isinstance(e.to_dict(), dict) for e in rig.events)


def test_burst_summary_is_json_ready():
    rig = Rig({"mode": "flaky", "fail_count": 3})
    summary = rig.burst(6).summary()
    assert summary["attempts"] == [4, 1, 1, 1, 1, 1]
    assert summary["calls"] == 6 and summary["call_numbers"] == [1, 2, 3, 4, 5, 6]
    assert summary["backoff_ms_total"] == 175 and summary["wall_ms"] == 220


def test_bad_burst_sizes_are_refused():
    with pytest.raises(ValueError):
        Rig().client.run_burst(0)


def test_fast_fails_are_the_breakers_and_the_bulkheads_refusals_and_nothing_else():
    """A call refused at once, before any attempt, failed fast: the breaker's refusals and
    the bulkhead's (a pool timeout waited first: it failed, not fast)."""
    from labs.engine.events import FAST_FAIL_OUTCOMES, is_fast_fail
    from labs.engine.outcomes import CALL_OUTCOMES

    assert set(FAST_FAIL_OUTCOMES) < set(CALL_OUTCOMES)
    assert [o for o in CALL_OUTCOMES if is_fast_fail(o)] == [
        "rejected_open", "rejected_half_open", "rejected_bulkhead",
    ]  # fmt: skip
    assert not is_fast_fail(None) and not is_fast_fail("rejected_")
