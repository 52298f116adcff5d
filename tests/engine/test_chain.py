"""Chains of services (labs.engine.chain) and the clock's wait with a timeout they use."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from labs.engine import (
    Breaker,
    BreakerConfig,
    DependencyConfig,
    FakeDependency,
    GuardedClient,
    MemoryStore,
    Policy,
    VirtualClock,
)
from labs.engine.chain import Counted, NextTier, validate_chain


def test_run_within_returns_when_the_callee_ends_before_the_timeout():
    clock = VirtualClock()
    seen = {}

    def callee():
        clock.sleep(0.2)
        return "answer"

    def caller():
        task = clock.run_within(callee, 0.5)
        seen["at"], seen["done"], seen["result"] = clock.now(), task.done, task.result

    clock.spawn(caller)
    clock.run()
    assert seen == {"at": pytest.approx(0.2), "done": True, "result": "answer"}


def test_run_within_gives_up_at_the_timeout_and_the_callee_goes_on():
    clock = VirtualClock()
    seen = {}

    def callee():
        clock.sleep(1.0)
        seen["callee ended"] = clock.now()
        return "late"

    def caller():
        task = clock.run_within(callee, 0.3)
        seen["caller resumed"], seen["done"] = clock.now(), task.done
        clock.sleep(2.0)  # the callee's end must not wake the caller a second time
        seen["caller ended"] = clock.now()

    clock.spawn(caller)
    clock.run()
    assert seen == {
        "caller resumed": pytest.approx(0.3),
        "done": False,
        "callee ended": pytest.approx(1.0),
        "caller ended": pytest.approx(2.3),
    }


def test_run_within_from_the_owning_context_runs_to_the_end():
    clock = VirtualClock()
    task = clock.run_within(lambda: clock.sleep(0.4) or 7, 0.1)
    assert (task.done, task.result, clock.now()) == (True, 7, pytest.approx(0.4))
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        clock.run_within(lambda: None, -1)


class _Service:
    """A service of a tier: its own guarded client on its own store."""

    def __init__(self, name, dependency, clock, policy):
        store = MemoryStore()
        breaker = Breaker(BreakerConfig(), store=store, clock=clock, rng=random.Random(0))
        breaker.force_closed("retries alone")
        self.name = name
        self.client = GuardedClient(
            policy, breaker=breaker, dependency=dependency, clock=clock,
            rng=random.Random(0), store=store,
        )  # fmt: skip
        self.parents = []
        self.calls = 0

    def handle(self, parent):
        self.parents.append(parent)
        self.calls += 1
        return self.client.call(self.calls)


def _chain(clock, *, tiers, width, policy, counts, leaf_latency_ms=5.0):
    """``tiers`` tiers of ``width`` services in front of a down leaf, each tier's dependency
    counted into ``counts`` by (tier, "in"/"out"); returns the services, front tier first."""
    leaf = FakeDependency(
        DependencyConfig(mode="down", latency_ms=leaf_latency_ms),
        store=MemoryStore(), clock=clock, rng=random.Random(0),
    )  # fmt: skip

    def count(tier, direction):
        counts[(tier, direction)] += 1

    layout = []
    downstream = leaf
    for number in range(tiers, 0, -1):
        counted = Counted(downstream, tier=number, count=count, entry=number == 1)
        services = [_Service(f"t{number}s{i}", counted, clock, policy) for i in range(width)]
        layout.insert(0, services)
        downstream = NextTier(services, clock=clock, caller=f"tier {number - 1}")
    return layout


def test_three_tiers_of_three_attempts_make_27_leaf_hits_a_call():
    clock = VirtualClock()
    counts = Counter()
    policy = Policy(max_attempts=3, backoff_base_ms=10, jitter="none")
    layout = _chain(clock, tiers=3, width=2, policy=policy, counts=counts)
    front = layout[0]
    for i in range(4):
        clock.spawn(lambda i=i: front[i % 2].handle({"service": "user"}))
    clock.run()
    assert counts[(1, "in")] == 4
    assert counts[(1, "out")] == counts[(2, "in")] == 12
    assert counts[(2, "out")] == counts[(3, "in")] == 36
    assert counts[(3, "out")] == 4 * 27
    # the users' requests entered at the front; no tier behind counts any
    assert counts[(1, "req")] == 4 and [t for t, d in counts if d == "req"] == [1]
    # round robin: the middle tier's two services shared its twelve calls
    assert [s.calls for s in layout[1]] == [6, 6]
    parent = layout[1][0].parents[0]
    assert parent["service"] == "tier 1" and parent["attempt"] == 1 and parent["call"] == 1


def test_a_tier_stops_waiting_at_its_attempt_timeout_while_the_next_goes_on():
    clock = VirtualClock()
    counts = Counter()
    slow = Policy(max_attempts=1, attempt_timeout_ms=1000)
    layout = _chain(clock, tiers=2, width=1, policy=slow, counts=counts, leaf_latency_ms=2000)
    front_policy = Policy(max_attempts=1, attempt_timeout_ms=100)
    outer = _Service("front", NextTier(layout[1], clock=clock, caller="front"), clock,
                     front_policy)  # fmt: skip
    results = {}
    clock.spawn(lambda: results.setdefault("front", outer.handle({})))
    clock.run()
    front = results["front"]
    assert front.outcome == "failure" and front.error == "timeout"
    assert front.end_ms - front.start_ms == pytest.approx(100)
    # the back tier's call went on to its own timeout (1 s) after the front gave up
    back = layout[1][0]
    assert back.calls == 1 and clock.now() == pytest.approx(1.0)


def test_validate_chain_names_the_tier_and_what_is_allowed():
    assert validate_chain([["a"], ["b"], ["c"]]) == []
    (one,) = validate_chain([["a"]])
    assert str(one) == "Tiers: must be between 2 and 6 tiers (got 1)"
    (gap,) = validate_chain([["a"], [], ["c"]])
    assert str(gap).startswith("Tier 2: tier 2 has no service")
    (loop,) = validate_chain([["a", "b"], ["c", "a"]])
    assert "a is in tier 1 and tier 2: the chain would loop" in str(loop)
    assert len(validate_chain([[str(i)] for i in range(7)])) == 1
