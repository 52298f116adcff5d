"""The peer libraries' published examples, translated into engine tests on a virtual clock.

Each test names the library and the file whose arithmetic it pins (docs/engine.md has the
table). Every test runs on both stores (the ``store`` fixture: memory and Redis).
"""

from __future__ import annotations

import random

from labs.engine import Breaker, BreakerConfig, EventList, VirtualClock
from labs.engine.config import RetryBudgetConfig
from labs.engine.retry import RetryBudget


def make(store, **config):
    clock = VirtualClock()
    events = EventList()
    breaker = Breaker(
        BreakerConfig(**config), store=store, clock=clock, rng=random.Random(1), sink=events
    )
    return breaker, clock, events


def record(breaker, outcome):
    permit = breaker.allow()
    assert permit, permit
    return breaker.record(permit, outcome)


def open_for_ms(breaker):
    return breaker.snapshot()["open_for_ms"]


# -- open duration that backs off: resilience4j IntervalFunction.ofExponentialBackoff ----------


def test_cooldown_grows_by_the_multiplier_up_to_the_cap_and_resets_on_close(store):
    """resilience4j ``IntervalFunction.ofExponentialBackoff(1000 ms, 2.0, 5000 ms)`` as
    ``waitIntervalFunctionInOpenState``: attempt n waits min(5000, 1000 x 2^(n-1)):
    1000, 2000, 4000, 5000, 5000; a close starts the schedule again."""
    breaker, clock, _ = make(
        store, failure_threshold=1, cooldown_ms=1000, cooldown_multiplier=2, cooldown_max_ms=5000
    )
    record(breaker, "failure")
    waits = []
    for _ in range(5):
        waits.append(open_for_ms(breaker))
        clock.advance(waits[-1] / 1000)
        record(breaker, "failure")  # the probe fails: re-opened, longer
    assert waits == [1000, 2000, 4000, 5000, 5000]
    assert breaker.snapshot()["openings"] == 6
    clock.advance(5)
    record(breaker, "success")  # the probe succeeds: closed, schedule reset
    record(breaker, "failure")
    assert open_for_ms(breaker) == 1000


# -- the cooldown edge: gobreaker (strict) against pybreaker (inclusive) -----------------------


def test_a_strict_cooldown_edge_opens_the_half_open_state_only_after_open_until(store):
    """gobreaker ``currentState``: ``if cb.expiry.Before(now)`` moves OPEN to HALF-OPEN, so at
    exactly the expiry it is still open (the engine's default is inclusive, like pybreaker)."""
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=1000, cooldown_edge="strict")
    record(breaker, "failure")
    clock.advance(1.0)
    assert breaker.state() == "open"
    assert not breaker.allow()
    clock.advance(0.000001)
    assert breaker.state() == "half_open"
    assert breaker.allow().probe


# -- when the ratio is evaluated: resilience4j (every result) against Polly (failures) -------


def _ratio_breaker(store, checked_on):
    return make(
        store,
        kind="rolling_ratio",
        failure_ratio=0.5,
        min_calls=4,
        window_calls=4,
        ratio_checked_on=checked_on,
    )


def test_resilience4j_checks_the_ratio_after_every_result_so_a_success_can_open(store):
    """resilience4j ``CircuitBreakerStateMachine.ClosedState.onSuccess`` calls
    ``checkIfThresholdsExceeded``: f, f, s, s reaches 2 failures in 4 calls (50 %) on the
    fourth result, a success, and opens."""
    breaker, _, _ = _ratio_breaker(store, "every_result")
    results = [record(breaker, o).transition for o in ("failure", "failure", "success", "success")]
    assert results == [None, None, None, "open"]


def test_polly_checks_the_ratio_after_a_failure_only(store):
    """Polly v8 ``AdvancedCircuitBehavior``: ``OnActionSuccess`` only counts,
    ``OnActionFailure`` compares the failure rate; f, f, s, s stays closed, and the next
    failure (window f, s, s, f: 50 %) opens."""
    breaker, _, _ = _ratio_breaker(store, "failure")
    results = [
        record(breaker, o).transition
        for o in ("failure", "failure", "success", "success", "failure")
    ]
    assert results == [None, None, None, None, "open"]


# -- the probe budget per half-open period: gobreaker MaxRequests -----------------------------


def test_half_open_calls_caps_the_probes_of_a_period_not_only_those_in_flight(store):
    """gobreaker ``beforeRequest``: in half-open, ``counts.Requests >= maxRequests`` returns
    ``ErrTooManyRequests``; ``onSuccess`` closes at ``ConsecutiveSuccesses >= maxRequests``.
    With 3 probes in flight and 3 successes to close, the engine's in-flight cap alone admits a
    fourth probe after two successes; ``half_open_calls`` 3 does not."""
    plain, clock, _ = make(
        store, failure_threshold=1, cooldown_ms=100, half_open_max_probes=3, success_threshold=3
    )
    record(plain, "failure")
    clock.advance(0.1)
    probes = [plain.allow() for _ in range(3)]
    assert all(p.probe for p in probes)
    plain.record(probes[0], "success")
    plain.record(probes[1], "success")
    assert plain.allow()  # the in-flight cap alone: a fourth probe
    plain.reset("next")

    breaker, clock, _ = make(
        store,
        failure_threshold=1,
        cooldown_ms=100,
        half_open_max_probes=3,
        success_threshold=3,
        half_open_calls=3,
    )
    record(breaker, "failure")
    clock.advance(0.1)
    probes = [breaker.allow() for _ in range(3)]
    breaker.record(probes[0], "success")
    breaker.record(probes[1], "success")
    refused = breaker.allow()
    assert not refused and refused.reason == "half_open"
    assert breaker.record(probes[2], "success").transition == "closed"


def test_an_ignored_probe_gives_its_admission_back(store):
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=100, half_open_calls=1)
    record(breaker, "failure")
    clock.advance(0.1)
    breaker.record(breaker.allow(), "ignored")
    assert breaker.allow().probe


# -- half-open decided by a ratio: resilience4j permittedNumberOfCallsInHalfOpenState ---------


def _half_open_ratio(store):
    breaker, clock, events = make(
        store,
        failure_threshold=1,
        cooldown_ms=100,
        failure_ratio=0.5,
        half_open_max_probes=4,
        half_open_calls=4,
        half_open_decision="ratio",
    )
    record(breaker, "failure")
    clock.advance(0.1)
    return breaker, events


def test_resilience4j_half_open_closes_below_the_failure_rate(store):
    """resilience4j ``HalfOpenState``: after ``permittedNumberOfCallsInHalfOpenState`` (4)
    results the failure rate decides against ``failureRateThreshold`` (50 %): s, f, s, s is
    25 %, so it closes; a failure alone does not re-open before the four are in."""
    breaker, events = _half_open_ratio(store)
    probes = [breaker.allow() for _ in range(4)]
    codes = {"s": "success", "f": "failure"}
    results = [breaker.record(p, codes[o]).transition for p, o in zip(probes, "sfss", strict=True)]
    assert results == [None, None, None, "closed"]
    assert events.of_kind("transition")[-1].reason == "3 of 4 probes succeeded"


def test_resilience4j_half_open_reopens_at_the_failure_rate(store):
    breaker, events = _half_open_ratio(store)
    probes = [breaker.allow() for _ in range(4)]
    codes = {"s": "success", "f": "failure"}
    results = [breaker.record(p, codes[o]).transition for p, o in zip(probes, "ffss", strict=True)]
    assert results == [None, None, None, "open"]
    assert events.of_kind("transition")[-1].reason.startswith("2 of 4 probes failed")


# -- gRPC retry throttling (A6), as grpc-go's retryThrottler ----------------------------------


def test_grpc_throttling_allows_retries_only_above_half_the_tokens_without_drift(store):
    """gRFC A6 with its documented setting ``maxTokens`` 10, ``tokenRatio`` 0.1 (grpc-go
    ``retryThrottler.throttle``: tokens -= 1, then throttled when tokens <= max / 2):
    failures leave 9, 8, 7, 6 (retries allowed) and 5 (throttled). Ten successes then bring
    exactly 6.0 (floats give 5.999...), and one failure leaves 5: throttled; an eleventh
    success makes it 5.1 after the failure: allowed."""
    budget = RetryBudget(
        RetryBudgetConfig(kind="grpc", max_tokens=10, token_ratio=0.1), store=store
    )
    assert [budget.observe(False) for _ in range(5)] == [
        (True, 9.0),
        (True, 8.0),
        (True, 7.0),
        (True, 6.0),
        (False, 5.0),
    ]
    for _ in range(10):
        budget.observe(True)
    assert budget.observe(False) == (False, 5.0)
    for _ in range(11):
        budget.observe(True)
    assert budget.observe(False) == (True, 5.1)


def test_grpc_throttling_never_goes_below_zero_nor_above_max(store):
    budget = RetryBudget(RetryBudgetConfig(kind="grpc", max_tokens=2, token_ratio=1), store=store)
    for _ in range(5):
        allowed, tokens = budget.observe(False)
    assert (allowed, tokens) == (False, 0.0)
    for _ in range(5):
        allowed, tokens = budget.observe(True)
    assert (allowed, tokens) == (True, 2.0)


def test_a_grpc_throttled_client_stops_retrying_after_the_fifth_failure(store, rig):
    r = rig(
        {"mode": "down"},
        {
            "max_attempts": 5,
            "retry_budget": {"kind": "grpc", "max_tokens": 10, "token_ratio": 0.1},
            "breaker": {"failure_threshold": 20},
        },
        store=store,
    )
    burst = r.burst(3)
    # call 1: failures leave 9, 8, 7, 6 (retried) and 5 (its last attempt anyway);
    # calls 2 and 3: a failure leaves 4, then 3: throttled, no retry
    assert burst.attempts == [5, 1, 1]
    assert [c.outcome for c in burst.calls] == ["failure", "budget_exhausted", "budget_exhausted"]


# -- Finagle's RetryBudget --------------------------------------------------------------------


def _finagle(store, clock, **config):
    return RetryBudget(RetryBudgetConfig(kind="finagle", **config), store=store, clock=clock)


def test_finagle_budget_retries_a_percent_of_requests_and_starts_empty(store):
    """Finagle ``RetryBudgetTest`` "apply minRetriesPerSec=0": with ``percentCanRetry`` 0.1
    and no reserve, a fresh budget allows no retry, and over many requests (each a deposit
    then a try) one in ten is retried (deposit 1000, withdrawal 10000)."""
    clock = VirtualClock()
    budget = _finagle(store, clock, ttl_ms=60000, min_retries_per_sec=0, percent_can_retry=0.1)
    assert budget.try_withdraw() == (False, 0.0)
    retried = 0
    for _ in range(1000):
        budget.deposit()
        taken, _ = budget.try_withdraw()
        retried += taken
    assert retried == 100


def test_finagle_budget_has_a_reserve_of_min_retries_per_second_over_the_ttl(store):
    """Finagle ``RetryBudgetTest`` "apply with minRetries and maxPercentOver=0": ttl 1 s and
    10 retries per second give a reserve of 10 retries, and requests add nothing."""
    clock = VirtualClock()
    budget = _finagle(store, clock, ttl_ms=1000, min_retries_per_sec=10, percent_can_retry=0)
    assert budget.deposit() == 10
    taken = [budget.try_withdraw()[0] for _ in range(11)]
    assert taken == [True] * 10 + [False]


def test_finagle_deposits_and_withdrawals_expire_after_the_ttl(store):
    """Finagle's ``TokenBucket.newLeakyBucket(ttl, reserve)``: what was put or taken counts for
    the ttl only (a windowed sum of 10 slices)."""
    clock = VirtualClock()
    budget = _finagle(store, clock, ttl_ms=10000, min_retries_per_sec=0, percent_can_retry=0.5)
    for _ in range(4):
        budget.deposit()  # 4000: two retries (a withdrawal is 2000)
    assert budget.try_withdraw() == (True, 1.0)
    clock.advance(10.0)  # every slice has expired
    assert budget.try_withdraw() == (False, 0.0)


def test_grpc_server_pushback_fixes_the_next_delay_beyond_the_backoff_cap(store, rig):
    """gRFC A6 "Pushback": a server's ``grpc-retry-pushback-ms`` sets the next delay exactly
    (no jitter, no cap); here a 429's Retry-After plays the pushback. With ``capped`` (the
    engine's default) the same hint is honoured only up to ``backoff_cap_ms``."""
    dependency = {"mode": "rate_limited", "retry_after_ms": 300, "latency_ms": 5}
    policy = {"max_attempts": 3, "backoff_base_ms": 25, "backoff_cap_ms": 100}
    pushed = rig(dependency, {**policy, "retry_after": "pushback"}, store=store)
    [call] = pushed.burst(1).calls
    assert (call.attempts, call.outcome, call.backoff_ms) == (2, "success", 295)
    [sleep] = pushed.events.of_kind("sleep")
    assert "server pushback 295 ms, exactly" in sleep.explain


# -- slow calls: resilience4j slowCallDurationThreshold and slowCallRateThreshold -------------


def _slow_breaker(store, **extra):
    """resilience4j ``CircuitBreakerStateMachineTest``'s breaker: a count window of 5 calls
    (minimumNumberOfCalls 5), failure and slow-call rates of 50 %, calls slower than 4 s."""
    config = dict(
        kind="rolling_ratio",
        window_calls=5,
        min_calls=5,
        failure_ratio=0.5,
        slow_call_ms=4000,
        slow_call_ratio=0.5,
        cooldown_ms=1000,
    )
    config.update(extra)
    return make(store, **config)


def timed(breaker, outcome, duration_ms):
    permit = breaker.allow()
    assert permit, permit
    return breaker.record(permit, outcome, duration_ms=duration_ms)


def test_resilience4j_opens_on_the_slow_call_rate_below_the_failure_rate(store):
    """resilience4j ``shouldOpenAfterSlowCallRateThresholdExceeded``: slow failure, slow
    success, fast failure, fast success, then a slow success fills the window of 5: failure
    rate 40 % (below 50 %), slow-call rate 3 / 5 = 60 % (at or above 50 %): OPEN."""
    breaker, _, events = _slow_breaker(store)
    moves = [
        timed(breaker, "failure", 5000).transition,
        timed(breaker, "success", 5000).transition,
        timed(breaker, "failure", 100).transition,
        timed(breaker, "success", 100).transition,
    ]
    assert moves == [None] * 4
    snap = breaker.snapshot()
    assert (snap["window_successes"], snap["window_failures"], snap["window_slow"]) == (2, 2, 2)
    assert timed(breaker, "success", 5000).transition == "open"
    reason = events.of_kind("transition")[-1].reason
    assert reason.startswith("slow-call ratio 60% >= 50% over the last 5 calls (slower than 4")


def test_resilience4j_slow_call_rate_below_the_threshold_keeps_it_closed(store):
    """resilience4j ``FixedSizeSlidingWindowMetricsTest``: a slow success, a slow error and
    three fast successes are 5 calls, 2 slow: a slow-call rate of 40 %, below 50 %."""
    breaker, _, _ = _slow_breaker(store)
    for outcome, ms in (("success", 10000), ("failure", 10000)) + (("success", 100),) * 3:
        assert timed(breaker, outcome, ms).transition is None
    snap = breaker.snapshot()
    assert (snap["window_successes"], snap["window_failures"], snap["window_slow"]) == (4, 1, 2)
    assert snap["state"] == "closed"


def test_a_call_is_slow_only_above_the_threshold(store):
    """resilience4j ``CircuitBreakerMetrics.onSuccess``: ``duration > threshold`` is slow; a
    call of exactly the threshold, or one without a duration, is not."""
    breaker, _, _ = _slow_breaker(store, slow_call_ratio=0.2)
    for _ in range(4):
        timed(breaker, "success", 4000)
    record(breaker, "success")
    assert breaker.snapshot()["window_slow"] == 0
    assert breaker.state() == "closed"
    assert timed(breaker, "success", 4000.001).transition == "open"


def test_slow_calls_leave_a_time_window_with_their_bucket(store):
    """On a time window the slow calls expire with the bucket they were counted in."""
    breaker, clock, _ = _slow_breaker(
        store, window_calls=None, window_ms=1000, buckets=2, min_calls=4
    )
    timed(breaker, "success", 5000)
    timed(breaker, "success", 5000)
    assert breaker.snapshot()["window_slow"] == 2
    clock.advance(1.0)
    assert breaker.snapshot()["window_slow"] == 0
    for _ in range(3):
        assert timed(breaker, "success", 10).transition is None
    assert timed(breaker, "success", 5000).transition is None  # 1 slow of 4: 25 %
    assert timed(breaker, "success", 5000).transition is None  # 2 of 5: 40 %
    assert timed(breaker, "success", 5000).transition == "open"  # 3 of 6: 50 %


def test_resilience4j_half_open_reopens_on_the_slow_call_rate(store):
    """resilience4j ``shouldTransitionBackToOpenStateWhenSlowCallRateIsAboveThreshold``: 4
    permitted half-open calls, three slow successes and a fast one: failure rate 0 %,
    slow-call rate 75 %: back to OPEN."""
    breaker, clock, events = _slow_breaker(
        store, half_open_max_probes=4, half_open_calls=4, half_open_decision="ratio"
    )
    for _ in range(5):
        timed(breaker, "failure", 10)
    assert breaker.state() == "open"
    clock.advance(1.0)
    probes = [breaker.allow() for _ in range(4)]
    took = (5000, 5000, 5000, 1000)
    moves = [
        breaker.record(p, "success", duration_ms=ms).transition
        for p, ms in zip(probes, took, strict=True)
    ]
    assert moves == [None, None, None, "open"]
    assert events.of_kind("transition")[-1].reason.startswith("3 of 4 probes were slow")


def test_breaker_call_times_the_call_on_the_breakers_clock(store):
    breaker, clock, _ = _slow_breaker(store, min_calls=1, window_calls=1)
    assert breaker.call(lambda: clock.advance(4.5) or "slow answer") == "slow answer"
    assert breaker.state() == "open"


def test_slow_counts_survive_an_export_to_the_other_store(store):
    """The exported document carries the slow counts (only when there are some), so a
    session moved between stores keeps them."""
    from labs.engine import MemoryStore

    breaker, _, _ = _slow_breaker(store)
    timed(breaker, "success", 5000)
    timed(breaker, "failure", 5000)
    doc = store.export_state()
    assert doc["slow"] == {"window_slow": 2}
    other = MemoryStore()
    other.import_state(doc)
    exported = other.export_state()
    assert (exported["slow"], exported["window"]) == (doc["slow"], doc["window"])
    moved = Breaker(breaker.config, store=other, clock=breaker.clock)
    assert moved.snapshot()["window_slow"] == 2
    assert timed(moved, "success", 5000).transition is None  # 3 slow of 3: under min_calls


def test_a_guarded_client_opens_on_a_slow_but_healthy_dependency(store, rig):
    """Every call succeeds, each in 300 ms of virtual time: with calls above 200 ms slow and
    a slow-call rate of 50 % over 4 calls, the fourth call opens the breaker and the fifth
    fails fast; at 5 ms a call is not slow and the breaker stays closed."""
    policy = {
        "max_attempts": 1,
        "breaker": {
            "kind": "rolling_ratio",
            "window_calls": 4,
            "min_calls": 4,
            "slow_call_ms": 200,
            "slow_call_ratio": 0.5,
        },
    }
    slow = rig({"mode": "slow", "latency_ms": 300}, policy, store=store).burst(5)
    assert [c.outcome for c in slow.calls][:4] == ["success"] * 4
    assert slow.calls[4].outcome == "rejected_open" and slow.attempts[4] == 0
    store.clear()
    fast = rig({"mode": "healthy", "latency_ms": 5}, policy, store=store).burst(5)
    assert [c.outcome for c in fast.calls] == ["success"] * 5


# -- gobreaker's counting: Counts, cleared on every state change and every Interval -----------


def counts(breaker):
    """gobreaker's ``Counts{Requests, TotalSuccesses, TotalFailures, ConsecutiveSuccesses,
    ConsecutiveFailures}`` as a tuple."""
    c = breaker.snapshot()["counts"]
    return (
        c["requests"],
        c["total_successes"],
        c["total_failures"],
        c["consecutive_successes"],
        c["consecutive_failures"],
    )


def test_gobreaker_default_breaker_counts(store):
    """gobreaker v2 ``TestDefaultCircuitBreaker``: ``ReadyToTrip`` is ConsecutiveFailures > 5
    (``failure_threshold`` 6), ``Timeout`` 60 s; Counts clear on every state change, and a
    rejected call is not a request."""
    breaker, clock, _ = make(store, counts="gobreaker", failure_threshold=6, cooldown_ms=60000)
    for _ in range(5):
        record(breaker, "failure")
    assert breaker.state() == "closed" and counts(breaker) == (5, 0, 5, 0, 5)
    record(breaker, "success")
    assert counts(breaker) == (6, 1, 5, 1, 0)
    record(breaker, "failure")
    assert counts(breaker) == (7, 1, 6, 0, 1)
    for _ in range(5):
        record(breaker, "failure")  # 6 consecutive failures
    assert breaker.state() == "open" and counts(breaker) == (0, 0, 0, 0, 0)
    assert not breaker.allow() and not breaker.allow()
    assert counts(breaker) == (0, 0, 0, 0, 0)
    clock.advance(59)
    assert breaker.state() == "open"
    clock.advance(1)
    assert breaker.state() == "half_open"
    record(breaker, "failure")
    assert breaker.state() == "open" and counts(breaker) == (0, 0, 0, 0, 0)
    clock.advance(60)
    record(breaker, "success")
    assert breaker.state() == "closed" and counts(breaker) == (0, 0, 0, 0, 0)


def test_gobreaker_interval_clears_the_closed_states_counts(store):
    """gobreaker v2 ``TestCustomCircuitBreaker`` (``Interval`` 30 s): five rounds of success,
    failure are Counts{10, 5, 5, 0, 1}; a success 29 s on adds to them; once the interval is
    over the next request starts from zero: a failure is Counts{1, 0, 1, 0, 1}."""
    breaker, clock, _ = make(
        store, counts="gobreaker", failure_threshold=20, count_interval_ms=30000
    )
    for _ in range(5):
        record(breaker, "success")
        record(breaker, "failure")
    assert counts(breaker) == (10, 5, 5, 0, 1)
    clock.advance(29)
    record(breaker, "success")
    assert counts(breaker) == (11, 6, 5, 1, 0)
    clock.advance(1)  # over Interval
    assert counts(breaker) == (0, 0, 0, 0, 0)  # read as cleared, nothing written
    record(breaker, "failure")
    assert breaker.state() == "closed" and counts(breaker) == (1, 0, 1, 0, 1)


def test_gobreaker_half_open_counts_requests_up_to_max_requests(store):
    """gobreaker v2 ``TestCustomCircuitBreaker``, half-open with ``MaxRequests`` 3: two
    successes are Counts{2, 2, 0, 2, 0}; a third probe in flight makes Requests 3 and a
    fourth is refused (over MaxRequests); the third success closes it, Counts cleared."""
    breaker, clock, _ = make(
        store,
        counts="gobreaker",
        failure_threshold=1,
        cooldown_ms=90000,
        half_open_max_probes=3,
        half_open_calls=3,
        success_threshold=3,
    )
    record(breaker, "failure")
    clock.advance(90)
    record(breaker, "success")
    record(breaker, "success")
    assert breaker.state() == "half_open" and counts(breaker) == (2, 2, 0, 2, 0)
    third = breaker.allow()
    assert third and counts(breaker) == (3, 2, 0, 2, 0)
    assert not breaker.allow()  # over MaxRequests
    assert breaker.record(third, "success").transition == "closed"
    assert counts(breaker) == (0, 0, 0, 0, 0)


def test_the_interval_clears_the_failure_streak_and_outdates_calls_in_flight(store):
    """The engine's consecutive breaker with ``count_interval_ms``: failures in different
    intervals do not add up, and a result of a call admitted in an earlier interval is stale
    (gobreaker: a new generation)."""
    breaker, clock, _ = make(store, failure_threshold=3, count_interval_ms=1000)
    record(breaker, "failure")
    record(breaker, "failure")
    held = breaker.allow()
    clock.advance(1.0)
    assert breaker.snapshot()["failure_streak"] == 0
    assert breaker.record(held, "failure").applied is False
    record(breaker, "failure")
    record(breaker, "failure")
    assert breaker.state() == "closed"
    record(breaker, "failure")
    assert breaker.state() == "open"


def test_counts_are_not_reported_unless_asked_for(store):
    breaker, _, _ = make(store)
    record(breaker, "failure")
    assert breaker.snapshot()["counts"] is None
    assert "counts" not in store.export_state()


# -- two-step admissions under 50 threads: the documented overshoot bound ---------------------


def test_fifty_threads_overshoot_by_the_calls_in_flight_and_count_only_the_threshold(store):
    """50 threads each take a permit from a closed consecutive breaker (threshold 3) before any
    of them records; then all record a failure. Every call reached the dependency (the
    overshoot: 50 - 3 calls beyond those that opened it), but exactly 3 failures are counted,
    the breaker opens once, and the other 47 results arrive stale."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from labs.engine import SystemClock

    threads, threshold = 50, 3
    events = EventList()
    breaker = Breaker(
        BreakerConfig(failure_threshold=threshold, cooldown_ms=60000),
        store=store,
        clock=SystemClock(),
        sink=events,
    )
    all_admitted = threading.Barrier(threads)

    def caller(_):
        permit = breaker.allow()
        all_admitted.wait(timeout=60)
        return bool(permit), (breaker.record(permit, "failure") if permit else None)

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(caller, range(threads)))
    assert sum(admitted for admitted, _ in results) == threads
    assert sum(r.applied for _, r in results) == threshold
    assert [e.state_to for e in events.of_kind("transition")] == ["open"]
    assert breaker.snapshot()["failure_streak"] == 0  # cleared by the opening


def _fifty_failing_callers(store, threshold, **config):
    """50 threads, each: allow, then (if admitted) a failure on a dependency that counts its
    calls. Returns (dependency calls, counted failures, transitions, outcomes)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from labs.engine import SystemClock

    events = EventList()
    breaker = Breaker(
        BreakerConfig(failure_threshold=threshold, cooldown_ms=60000, **config),
        store=store,
        clock=SystemClock(),
        sink=events,
    )
    lock = threading.Lock()
    calls = [0]
    start = threading.Barrier(50)

    def caller(_):
        start.wait(timeout=60)
        permit = breaker.allow()
        if not permit:
            return "rejected", False
        with lock:
            calls[0] += 1
        return "failed", breaker.record(permit, "failure").applied

    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(caller, range(50)))
    transitions = [e.state_to for e in events.of_kind("transition")]
    return calls[0], sum(applied for _, applied in results), transitions, results


def test_strict_admission_never_overshoots_the_consecutive_threshold_under_50_threads(store):
    """With ``admission: strict`` a closed breaker admits a call only while the failure streak
    plus the calls in flight is below the threshold; the others are held back until results
    come in. 50 threads against a dependency that always fails: exactly 3 calls reach it, all
    3 are counted, the breaker opens once, and the 47 held-back calls are rejected open."""
    calls, counted, transitions, results = _fifty_failing_callers(store, 3, admission="strict")
    assert (calls, counted, transitions) == (3, 3, ["open"])
    assert [outcome for outcome, _ in results].count("rejected") == 47


def test_strict_admission_gives_a_vanished_callers_place_back_after_the_lease(store):
    """A strict admission whose holder never reports keeps its place only for the store's
    ``probe_lease_ms``: then another call is admitted."""
    breaker, clock, _ = make(store, failure_threshold=2, admission="strict")
    record(breaker, "failure")
    lost = breaker.allow()  # streak 1 + 1 in flight: the threshold is reached
    assert lost
    started = clock.now()
    assert breaker.allow()  # held back (virtual time passes) until the lost place expires
    assert clock.now() - started >= store.probe_lease_ms / 1000
    assert breaker.record(lost, "failure").transition == "open"
