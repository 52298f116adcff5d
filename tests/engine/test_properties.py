"""Property tests: random dependencies, policies and bursts, invariants checked on every run."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from labs.engine import (
    Breaker,
    EventList,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    VirtualClock,
    parse_dependency,
    parse_policy,
)
from labs.engine.retry import jitter_bounds_ms

TOKENS = ["ok", "fail", "503", "500", "timeout", "429", "400"]

dependencies = st.one_of(
    st.fixed_dictionaries(
        {
            "mode": st.just("script"),
            "outcomes": st.lists(st.sampled_from(TOKENS), min_size=1, max_size=25),
            "retry_after_ms": st.integers(0, 800),
        }
    ),
    st.fixed_dictionaries({"mode": st.just("flaky"), "fail_count": st.integers(1, 12)}),
    st.fixed_dictionaries(
        {"mode": st.just("down"), "error": st.sampled_from(["503", "500", "timeout", "429"])}
    ),
    st.fixed_dictionaries({"mode": st.just("error_rate"), "rate": st.floats(0, 1)}),
    st.fixed_dictionaries(
        {"mode": st.just("rate_limited"), "retry_after_ms": st.integers(0, 1500)}
    ),
    st.fixed_dictionaries({"mode": st.just("outage"), "down_for_ms": st.integers(0, 3000)}),
    st.fixed_dictionaries({"mode": st.just("slow"), "latency_ms": st.integers(0, 300)}),
).flatmap(
    lambda d: st.fixed_dictionaries({"latency_ms": st.integers(0, 60)}).map(
        lambda extra: {**extra, **d}
    )
)

breakers = st.one_of(
    st.fixed_dictionaries({"kind": st.just("consecutive"), "failure_threshold": st.integers(1, 5)}),
    st.fixed_dictionaries(
        {
            "kind": st.just("rolling_ratio"),
            "failure_ratio": st.floats(0, 1),
            "min_calls": st.integers(1, 6),
            "window_calls": st.one_of(st.none(), st.integers(1, 10)),
            "window_ms": st.integers(100, 3000),
            "buckets": st.integers(1, 10),
        }
    ).filter(lambda b: b["window_calls"] is None or b["window_calls"] >= b["min_calls"]),
).flatmap(
    lambda b: st.fixed_dictionaries(
        {
            "cooldown_ms": st.integers(100, 1000),
            "cooldown_jitter_pct": st.integers(0, 50),
            "half_open_max_probes": st.integers(1, 3),
            "success_threshold": st.integers(1, 3),
        }
    ).map(lambda extra: {**b, **extra})
)

policies = st.integers(0, 100).flatmap(
    lambda base: st.fixed_dictionaries(
        {
            "max_attempts": st.integers(1, 5),
            "backoff_base_ms": st.just(base),
            "backoff_cap_ms": st.integers(base, 500),
            "jitter": st.sampled_from(["none", "full", "equal", "decorrelated", "proportional"]),
            "nesting": st.sampled_from(["breaker_outside", "retry_outside"]),
            "breaker": breakers,
            "retry_budget": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {"token_ratio": st.floats(0, 1), "max_tokens": st.integers(1, 5)}
                ),
            ),
            "deadline_ms": st.one_of(st.none(), st.integers(0, 600)),
            "attempt_timeout_ms": st.one_of(st.none(), st.integers(1, 100)),
        }
    )
)

bursts = st.lists(
    st.tuples(st.integers(1, 10), st.integers(1, 5), st.integers(0, 1500)), min_size=1, max_size=4
)


class CheckedStore(MemoryStore):
    """A memory store that checks the budget balance on every move."""

    def budget_deposit(self, ratio_micro, max_micro, **kw):
        balance = super().budget_deposit(ratio_micro, max_micro, **kw)
        assert 0 <= balance <= max_micro
        return balance

    def budget_withdraw(self, max_micro):
        taken, balance = super().budget_withdraw(max_micro)
        assert balance >= 0
        return taken, balance


class WatchedBreaker(Breaker):
    """Counts probe permits in flight and checks nothing is admitted while open."""

    in_flight: set[int]

    def allow(self, **kw):
        before = self.state()
        permit = super().allow(**kw)
        if permit:
            assert before != "open" or permit.probe  # open with cooldown left never admits
            assert not (before == "open" and self.snapshot()["open_for_ms"])
            if permit.probe:
                self.in_flight.add(id(permit))
                assert len(self.in_flight) <= self.config.half_open_max_probes
        return permit

    def record(self, permit, outcome, **kw):
        self.in_flight.discard(id(permit))
        return super().record(permit, outcome, **kw)


class WatchedDependency(FakeDependency):
    """Checks the breaker is never open (cooldown running) when an attempt starts."""

    breaker: Breaker

    def attempt(self, timeout_ms=None):
        snap = self.breaker.snapshot()
        assert snap["state"] != "open", snap
        return super().attempt(timeout_ms)


def run(dependency, policy, steps, seed):
    clock, store, rng, events = VirtualClock(), CheckedStore(), random.Random(seed), EventList()
    pol = parse_policy(policy)
    breaker = WatchedBreaker(pol.breaker, store=store, clock=clock, rng=rng, sink=events)
    breaker.in_flight = set()
    dep = WatchedDependency(parse_dependency(dependency), store=store, clock=clock, rng=rng)
    dep.breaker = breaker
    dep.arm()
    client = GuardedClient(
        pol, breaker=breaker, dependency=dep, clock=clock, rng=rng, sink=events, store=store
    )
    first = 1
    for number, (size, concurrency, wait_ms) in enumerate(steps, start=1):
        clock.sleep(wait_ms / 1000)
        client.run_burst(size, concurrency=concurrency, first_call=first, burst=number)
        first += size
    return pol, events


@settings(max_examples=150, deadline=None)
@given(dependency=dependencies, policy=policies, steps=bursts, seed=st.integers(0, 2**32 - 1))
def test_invariants_hold_for_random_scripts_and_policies(dependency, policy, steps, seed):
    pol, events = run(dependency, policy, steps, seed)
    results = {e.call: e for e in events.of_kind("call_result")}
    assert len(results) == sum(size for size, _, _ in steps)

    attempts_per_call: dict[int, int] = {}
    for e in events.of_kind("attempt"):
        attempts_per_call[e.call] = attempts_per_call.get(e.call, 0) + 1
    for call, result in results.items():
        made = attempts_per_call.get(call, 0)
        assert made == result.data["attempts"] <= pol.max_attempts
        if result.outcome.startswith("rejected"):
            assert made == 0  # a rejected call never touches the dependency
        if result.data["probe"] and pol.nesting == "breaker_outside":
            assert made == 1

    previous: dict[int, float] = {}
    for e in events.of_kind("sleep"):
        cap = pol.backoff_cap_ms
        assert 0 <= e.backoff_ms <= cap + 1e-6
        retry_after = e.data.get("retry_after_ms")
        honoured = retry_after and abs(e.backoff_ms - min(cap, retry_after)) < 1e-3
        if not honoured:
            lo, hi = jitter_bounds_ms(
                pol.jitter, e.attempt, pol.backoff_base_ms, cap, previous.get(e.call)
            )
            assert lo - 1e-3 <= e.backoff_ms <= hi + 1e-3, (
                pol.jitter,
                e.attempt,
                e.backoff_ms,
                lo,
                hi,
            )
        previous[e.call] = e.backoff_ms
        if pol.deadline_ms is not None:
            start = results[e.call].data["start_ms"]
            assert e.at_ms + e.backoff_ms < start + pol.deadline_ms + 1e-6  # no sleep crosses it


@settings(max_examples=40, deadline=None)
@given(dependency=dependencies, policy=policies, steps=bursts, seed=st.integers(0, 2**32 - 1))
def test_the_same_seed_gives_the_same_events(dependency, policy, steps, seed):
    _, first = run(dependency, policy, steps, seed)
    _, second = run(dependency, policy, steps, seed)
    assert [e.to_dict() for e in first] == [e.to_dict() for e in second]
