"""The fake dependency's modes; its state lives in the store."""

from __future__ import annotations

import random

import pytest

from labs.engine import FakeDependency, MemoryStore, VirtualClock, parse_dependency


def dep(store=None, clock=None, seed=1, **config):
    clock = clock or VirtualClock()
    store = store if store is not None else MemoryStore()
    return FakeDependency(
        parse_dependency(config), store=store, clock=clock, rng=random.Random(seed)
    ), clock


def answers(d, n, **kw):
    return [(r.ok, r.error) for r in (d.attempt(**kw) for _ in range(n))]


def test_every_attempt_sleeps_the_latency_first():
    d, clock = dep(mode="healthy", latency_ms=40)
    result = d.attempt()
    assert result.ok and result.latency_ms == 40
    assert clock.now() == pytest.approx(0.04)


def test_flaky_fails_the_next_n_attempts_then_heals(store):
    d, _ = dep(store=store, mode="flaky", fail_count=3, error="500")
    d.arm()
    assert answers(d, 5) == [(False, "500")] * 3 + [(True, None)] * 2


def test_flaky_counter_is_shared_through_the_store(store):
    clock = VirtualClock()
    a, _ = dep(store=store, clock=clock, mode="flaky", fail_count=2)
    b, _ = dep(store=store, clock=clock, mode="flaky", fail_count=2)
    a.arm()
    assert answers(a, 1) + answers(b, 2) == [(False, "503"), (False, "503"), (True, None)]


def test_first_attempt_arms_lazily():
    d, _ = dep(mode="flaky", fail_count=1)
    assert answers(d, 2) == [(False, "503"), (True, None)]


def test_down_and_error_kinds():
    d, _ = dep(mode="down", error="timeout")
    assert answers(d, 2) == [(False, "timeout")] * 2


def test_error_rate_is_seeded():
    a, _ = dep(mode="error_rate", rate=0.5, seed=9)
    b, _ = dep(mode="error_rate", rate=0.5, seed=9)
    first = answers(a, 50)
    assert first == answers(b, 50)
    assert 10 < sum(1 for ok, _ in first if not ok) < 40


def test_outage_is_down_for_a_while_after_it_was_set(store):
    d, _ = dep(store=store, mode="outage", down_for_ms=100, latency_ms=30)
    d.arm()
    assert answers(d, 4) == [(False, "503")] * 3 + [(True, None)]  # answers at 30, 60, 90, 120 ms


def test_rate_limited_says_how_long_to_wait(store):
    d, clock = dep(store=store, mode="rate_limited", retry_after_ms=300, latency_ms=5)
    d.arm()
    first = d.attempt()
    assert (first.ok, first.error, first.retry_after_ms) == (False, "429", 295)
    clock.advance(0.295)
    assert d.attempt().ok


def test_script_plays_outcomes_in_order_then_is_healthy(store):
    d, _ = dep(store=store, mode="script", outcomes=["fail", "400", "ok", "timeout"], error="500")
    d.arm()
    assert answers(d, 6) == [
        (False, "500"),
        (False, "400"),
        (True, None),
        (False, "timeout"),
        (True, None),
        (True, None),
    ]


def test_slow_dependency_times_out_against_the_attempt_timeout():
    d, clock = dep(mode="slow", latency_ms=800)
    result = d.attempt(timeout_ms=200)
    assert (result.ok, result.error, result.latency_ms) == (False, "timeout", 200)
    assert clock.now() == pytest.approx(0.2)
    assert d.attempt().ok


def test_429_outside_rate_limited_carries_the_configured_retry_after():
    d, _ = dep(mode="down", error="429", retry_after_ms=700)
    assert d.attempt().retry_after_ms == 700
