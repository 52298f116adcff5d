"""The breaker's state machine, on the memory store and on Redis."""

from __future__ import annotations

import asyncio
import random

import pytest

from labs.engine import (
    Breaker,
    BreakerConfig,
    CircuitOpenError,
    EventList,
    MemoryStore,
    VirtualClock,
)
from labs.engine.breaker import Permit, Rejection


def make(store, clock=None, **config):
    clock = clock or VirtualClock()
    events = EventList()
    breaker = Breaker(
        BreakerConfig(**config), store=store, clock=clock, rng=random.Random(1), sink=events
    )
    return breaker, clock, events


def fail_calls(breaker, n):
    for _ in range(n):
        permit = breaker.allow()
        assert permit
        breaker.record(permit, "failure")


def test_closed_breaker_admits_and_success_resets_the_streak(store):
    breaker, _, _ = make(store)
    fail_calls(breaker, 2)
    assert breaker.snapshot()["failure_streak"] == 2
    permit = breaker.allow()
    breaker.record(permit, "success")
    assert breaker.snapshot()["failure_streak"] == 0
    fail_calls(breaker, 2)
    assert breaker.state() == "closed"


def test_opens_after_k_consecutive_failures_and_rejects_with_the_time_left(store):
    breaker, clock, events = make(store, failure_threshold=3, cooldown_ms=2000)
    fail_calls(breaker, 3)
    assert breaker.state() == "open"
    clock.advance(0.6)
    rejection = breaker.allow()
    assert isinstance(rejection, Rejection) and not rejection
    assert rejection.reason == "open"
    assert rejection.retry_in_ms == pytest.approx(1400)
    assert rejection.explain == "rejected: breaker OPEN for another 1.4 s; dependency not called"
    [t] = events.of_kind("transition")
    assert (t.state_from, t.state_to) == ("closed", "open")
    assert t.reason == "3 consecutive failed calls; cooldown 2000 ms"


def test_cooldown_edge_is_inclusive(store):
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=1000)
    fail_calls(breaker, 1)
    clock.advance(0.999999)
    assert breaker.state() == "open"
    assert not breaker.allow()
    clock.advance(0.000001)
    assert breaker.state() == "half_open"
    permit = breaker.allow()
    assert isinstance(permit, Permit) and permit.probe


def test_half_open_admits_one_probe_and_success_closes(store):
    breaker, clock, events = make(store, failure_threshold=1, cooldown_ms=100)
    fail_calls(breaker, 1)
    clock.advance(0.1)
    probe = breaker.allow(call=13)
    assert probe.probe
    second = breaker.allow()
    assert isinstance(second, Rejection) and second.reason == "half_open"
    assert breaker.snapshot()["probes_in_flight"] == 1
    breaker.record(probe, "success")
    assert breaker.state() == "closed"
    assert [(e.state_from, e.state_to) for e in events.of_kind("transition")] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    assert events[-1].reason == "probe call #13 succeeded"
    assert events[-1].call == 13


def test_probe_failure_reopens_with_a_fresh_cooldown(store):
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=500)
    fail_calls(breaker, 1)
    clock.advance(0.5)
    probe = breaker.allow()
    clock.advance(0.2)
    breaker.record(probe, "failure")
    snap = breaker.snapshot()
    assert snap["state"] == "open"
    assert snap["open_until_ms"] == pytest.approx(1200)
    clock.advance(0.499)
    assert not breaker.allow()
    clock.advance(0.001)
    assert breaker.allow().probe


def test_success_threshold_needs_that_many_probe_successes(store):
    breaker, clock, _ = make(
        store, failure_threshold=1, cooldown_ms=100, success_threshold=3, half_open_max_probes=2
    )
    fail_calls(breaker, 1)
    clock.advance(0.1)
    a, b = breaker.allow(), breaker.allow()
    assert a.probe and b.probe and a.slot != b.slot
    assert breaker.allow().reason == "half_open"
    breaker.record(a, "success")
    breaker.record(b, "success")
    assert breaker.state() == "half_open"
    c = breaker.allow()
    breaker.record(c, "success")
    assert breaker.state() == "closed"


def test_an_ignored_probe_frees_its_slot_and_counts_for_nothing(store):
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=100)
    fail_calls(breaker, 1)
    clock.advance(0.1)
    probe = breaker.allow()
    assert breaker.record(probe, "ignored").applied
    assert breaker.state() == "half_open"
    assert breaker.snapshot()["probes_in_flight"] == 0
    assert breaker.allow().probe


def test_a_result_with_a_stale_generation_changes_nothing(store):
    breaker, clock, _ = make(store, failure_threshold=2, cooldown_ms=1000)
    old = breaker.allow()
    fail_calls(breaker, 2)  # opens: new generation
    before = breaker.snapshot()
    recorded = breaker.record(old, "success")
    assert recorded.applied is False
    assert breaker.snapshot() == before
    clock.advance(1)
    probe = breaker.allow()
    assert breaker.record(old, "failure").applied is False
    assert breaker.state() == "half_open"
    breaker.record(probe, "success")
    assert breaker.state() == "closed"


def test_force_open_force_closed_and_reset(store):
    breaker, clock, events = make(store, failure_threshold=1, cooldown_ms=100)
    breaker.force_open("maintenance")
    clock.advance(100)
    assert breaker.state() == "open"
    rejection = breaker.allow()
    assert rejection.retry_in_ms is None and "forced OPEN" in rejection.explain
    breaker.force_closed("drill")
    fail_calls(breaker, 5)
    assert breaker.state() == "closed"
    breaker.reset("new class")
    fail_calls(breaker, 1)
    assert breaker.state() == "open"
    reasons = [e.reason for e in events.of_kind("transition")]
    assert reasons[:3] == ["forced open: maintenance", "forced closed: drill", "reset: new class"]


def test_generation_keeps_growing_across_reset(store):
    breaker, _, _ = make(store)
    old = breaker.allow()
    breaker.reset("fresh")
    assert breaker.snapshot()["generation"] > old.generation
    assert breaker.record(old, "failure").applied is False


def test_rolling_ratio_over_a_count_window(store):
    breaker, _, events = make(
        store, kind="rolling_ratio", failure_ratio=0.5, min_calls=4, window_calls=4
    )
    for outcome in ["success", "failure", "success"]:
        breaker.record(breaker.allow(), outcome)
    assert breaker.state() == "closed"  # 3 calls < min_calls
    breaker.record(breaker.allow(), "success")  # 1/4 failed
    breaker.record(breaker.allow(), "failure")  # window: f s s f -> 2/4
    assert breaker.state() == "open"
    assert events.of_kind("transition")[0].reason.startswith(
        "failure ratio 50% >= 50% over the last 4 calls"
    )


def test_rolling_ratio_over_a_time_window_forgets_old_buckets(store):
    breaker, clock, _ = make(
        store, kind="rolling_ratio", failure_ratio=0.6, min_calls=3, window_ms=1000, buckets=10
    )
    fail_calls(breaker, 2)
    clock.advance(1.0)  # those two fall out of the window
    for outcome in ["failure", "success", "success"]:
        breaker.record(breaker.allow(), outcome)
    assert breaker.state() == "closed"
    assert breaker.snapshot()["state"] == "closed"
    breaker.record(breaker.allow(), "failure")
    breaker.record(breaker.allow(), "failure")  # 3 of 5 in the window
    assert breaker.state() == "open"


def test_cooldown_jitter_only_lengthens_the_cooldown(store):
    breaker, _, _ = make(store, failure_threshold=1, cooldown_ms=1000, cooldown_jitter_pct=50)
    fail_calls(breaker, 1)
    left = breaker.snapshot()["open_for_ms"]
    assert 1000 <= left <= 1500


def test_breaker_call_wrapper():
    breaker, _, _ = make(MemoryStore(), failure_threshold=1)
    assert breaker.call(lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        breaker.call(lambda: 1 / 0)
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: 42)


def test_memory_probe_lease_expires_on_the_clock():
    store = MemoryStore(probe_lease_ms=300)
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=100)
    fail_calls(breaker, 1)
    clock.advance(0.1)
    assert breaker.allow().probe  # holder vanishes, never records
    clock.advance(0.299)
    assert breaker.allow().reason == "half_open"
    clock.advance(0.001)
    assert breaker.allow().probe


def test_unknown_outcome_is_refused():
    breaker, _, _ = make(MemoryStore())
    with pytest.raises(ValueError):
        breaker.record(breaker.allow(), "meh")  # type: ignore[arg-type]


def test_memory_store_counts_every_failure_under_real_threads():
    import threading

    breaker, _, _ = make(MemoryStore(), failure_threshold=10**6)

    def hammer():
        for _ in range(3000):
            breaker.record(breaker.allow(), "failure")

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert breaker.snapshot()["failure_streak"] == 12000


@pytest.mark.parametrize("late", ["failure", "success"])
def test_a_probe_whose_lease_was_taken_over_records_as_stale_in_memory(late):
    store = MemoryStore(probe_lease_ms=300)
    breaker, clock, events = make(store, failure_threshold=1, cooldown_ms=100)
    fail_calls(breaker, 1)
    clock.advance(0.1)
    paused = breaker.allow(call=1)  # its holder pauses past the lease
    assert paused.probe
    clock.advance(0.3)
    replacement = breaker.allow(call=2)
    assert replacement.probe and replacement.slot == paused.slot
    before = breaker.snapshot()
    assert breaker.record(paused, late) == (False, None)
    assert breaker.snapshot() == before
    assert breaker.state() == "half_open"
    assert breaker.record(replacement, "success") == (True, "closed")
    assert [(e.state_from, e.state_to) for e in events.of_kind("transition")] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


def test_a_probe_recorded_after_its_lease_expired_is_stale_in_memory():
    store = MemoryStore(probe_lease_ms=300)
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=100)
    fail_calls(breaker, 1)
    clock.advance(0.1)
    late = breaker.allow()
    clock.advance(0.3)  # expired, nobody took the slot yet
    assert breaker.record(late, "failure").applied is False
    assert breaker.state() == "half_open"
    assert breaker.allow().probe


def test_every_state_has_a_label_and_transitions_read_with_them():
    from labs.engine import state_label
    from labs.engine.breaker import STATE_LABELS, STATES

    assert list(STATE_LABELS) == list(STATES) == ["closed", "open", "half_open"]
    assert state_label("half_open") == "HALF-OPEN" and state_label(None) == ""
    breaker, clock, events = make(MemoryStore(), failure_threshold=1, cooldown_ms=100)
    fail_calls(breaker, 1)
    clock.advance(0.1)
    breaker.record(breaker.allow(), "success")
    assert [e.explain.split(":")[0] for e in events.of_kind("transition")] == [
        "breaker CLOSED -> OPEN",
        "breaker OPEN -> HALF-OPEN",
        "breaker HALF-OPEN -> CLOSED",
    ]


# -- regressions -----------------------------------------------------------------------------


def test_snapshot_reports_the_time_window_counts_at_the_clock_now(store):
    breaker, clock, _ = make(store, kind="rolling_ratio", min_calls=10, window_ms=1000, buckets=4)
    fail_calls(breaker, 2)
    breaker.record(breaker.allow(), "success")
    snap = breaker.snapshot()
    assert (snap["window_failures"], snap["window_successes"]) == (2, 1)
    clock.advance(1.0)  # the whole window has passed: nothing left in it
    snap = breaker.snapshot()
    assert (snap["window_failures"], snap["window_successes"]) == (0, 0)


@pytest.mark.parametrize(
    "exc", [asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit]
)
def test_a_cancelled_call_is_neutral_and_frees_its_probe_slot(store, exc):
    breaker, clock, _ = make(store, failure_threshold=1, cooldown_ms=100)

    def cancelled():
        raise exc()

    with pytest.raises(exc):
        breaker.call(cancelled)
    assert breaker.state() == "closed"
    fail_calls(breaker, 1)
    clock.advance(0.1)
    with pytest.raises(exc):
        breaker.call(cancelled)  # the probe is cancelled: its slot is free again
    assert breaker.state() == "half_open"
    probe = breaker.allow()
    assert probe and probe.probe


def test_breaker_call_can_count_an_error_as_a_success(store):
    """pybreaker's ``exclude`` and gobreaker's ``IsSuccessful``: an error the caller expects
    (a 404, say) proves the dependency answered."""
    breaker, _, _ = make(store, failure_threshold=2)
    fail_calls(breaker, 1)

    class NotFound(Exception):
        pass

    def missing():
        raise NotFound()

    with pytest.raises(NotFound):
        breaker.call(missing, is_success=lambda exc: isinstance(exc, NotFound))
    assert breaker.snapshot()["failure_streak"] == 0


def test_forcing_the_state_the_breaker_is_already_forced_to_changes_nothing(store):
    breaker, _, events = make(store)
    assert breaker.force_open("maintenance") is True
    gen = breaker.snapshot()["generation"]
    assert breaker.force_open("again") is False
    assert breaker.snapshot()["generation"] == gen
    assert [(t.state_from, t.state_to) for t in events.of_kind("transition")] == [
        ("closed", "open")
    ]
    assert breaker.force_closed("drill") is True
    assert breaker.force_closed("drill again") is False
    assert len(events.of_kind("transition")) == 2
