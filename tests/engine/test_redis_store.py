"""The Redis store against a real Redis: round trips, processes, leases, generations."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from labs.engine import (
    Breaker,
    BreakerConfig,
    FakeDependency,
    MemoryStore,
    SystemClock,
    VirtualClock,
    parse_dependency,
    run_scenario,
)
from labs.engine.config import RetryBudgetConfig
from labs.engine.redis import RedisStore
from labs.engine.retry import RetryBudget
from labs.engine.scenario import EngineExecutor

from .helpers import REDIS_URL, ROOT, load_scenario

WORKER = ROOT / "tests" / "engine" / "probe_worker.py"


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def counting_client():
    import redis

    class CountingRedis(redis.Redis):
        commands: list[str]

        def execute_command(self, *args, **options):
            self.commands.append(str(args[0]))
            return super().execute_command(*args, **options)

    client = CountingRedis.from_url(REDIS_URL)
    client.commands = []
    yield client
    client.close()


def test_every_decision_record_attempt_and_budget_move_is_one_round_trip(
    counting_client, namespace
):
    clock = VirtualClock()
    store = RedisStore(counting_client, namespace)
    breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_ms=100), store=store, clock=clock)
    dep = FakeDependency(
        parse_dependency({"mode": "down"}), store=store, clock=clock, rng=random.Random()
    )
    budget = RetryBudget(RetryBudgetConfig(), store=store)
    operations = [
        breaker.allow,
        lambda: breaker.record(breaker.allow(), "failure"),  # two: allow, then record
        breaker.allow,  # rejected while open
        dep.attempt,
        budget.deposit,
        budget.try_withdraw,
    ]
    for op in operations:  # warm up: the first EVALSHA of each script may need a SCRIPT LOAD
        op()
    breaker.reset("again")
    counting_client.commands.clear()
    expected = [1, 2, 1, 1, 1, 1]
    for op, n in zip(operations, expected, strict=True):
        before = len(counting_client.commands)
        op()
        assert len(counting_client.commands) - before == n, counting_client.commands[before:]
    clock.advance(0.1)
    before = len(counting_client.commands)
    probe = breaker.allow()  # open -> half-open and a lease, still one round trip
    assert probe.probe and len(counting_client.commands) - before == 1
    assert set(counting_client.commands) == {"EVALSHA"}


def _plain_client(store, clock, policy):
    from labs.engine import GuardedClient, parse_policy

    policy = parse_policy(policy)
    breaker = Breaker(policy.breaker, store=store, clock=clock)
    return GuardedClient(
        policy,
        breaker=breaker,
        dependency=FakeDependency(
            parse_dependency({"mode": "flaky", "fail_count": 1, "latency_ms": 5}),
            store=store,
            clock=clock,
            rng=random.Random(1),
        ),
        clock=clock,
        rng=random.Random(1),
        store=store,
    )


def test_an_attempt_reaches_the_dependency_in_the_round_trip_of_the_breakers_look(
    counting_client, namespace
):
    """breaker_outside: a call is its admission with the first attempt (one script), each
    retry its look at the breaker with the attempt (one), and the result (one)."""
    clock = VirtualClock()
    store = RedisStore(counting_client, namespace)
    client = _plain_client(store, clock, {"max_attempts": 3, "backoff_base_ms": 10})
    client.call(1)  # warm up the scripts (the first EVALSHA may need a SCRIPT LOAD)
    store.clear()
    client.dependency.arm()
    counting_client.commands.clear()
    first = client.call(2)  # flaky: fails once, then succeeds on the retry
    assert (first.outcome, first.attempts) == ("success", 2)
    assert counting_client.commands == ["EVALSHA"] * 3  # allow+step, check+step, record
    assert store.export_state()["dependency"]["attempts"] == 2
    counting_client.commands.clear()
    second = client.call(3)
    assert (second.outcome, second.attempts) == ("success", 1)
    assert counting_client.commands == ["EVALSHA"] * 2  # allow+step, record


def test_retry_outside_attempts_are_an_admission_with_the_attempt_and_a_result(
    counting_client, namespace
):
    clock = VirtualClock()
    store = RedisStore(counting_client, namespace)
    client = _plain_client(
        store, clock, {"max_attempts": 3, "backoff_base_ms": 10, "nesting": "retry_outside"}
    )
    client.call(1)
    store.clear()
    client.dependency.arm()
    counting_client.commands.clear()
    result = client.call(2)
    assert (result.outcome, result.attempts) == ("success", 2)
    assert counting_client.commands == ["EVALSHA"] * 4  # (allow+step, record) x 2


def test_a_refused_call_and_a_retry_after_the_breaker_opened_never_reach_the_dependency(store):
    clock = VirtualClock()
    client = _plain_client(
        store,
        clock,
        {"max_attempts": 3, "backoff_base_ms": 10, "breaker": {"failure_threshold": 1}},
    )
    client.dependency.arm()
    client.breaker.force_open("by the test")
    assert client.call(1).outcome == "rejected_open"
    assert (store.export_state().get("dependency") or {}).get("attempts", 0) == 0
    client.breaker.reset("again")
    client.dependency.arm()
    # Another caller opens the breaker while this call backs off after its first attempt.
    clock.call_later(0.007, lambda: client.breaker.force_open("another caller"))
    result = client.call(2)
    assert (result.outcome, result.attempts) == ("failure", 1)
    assert store.export_state()["dependency"]["attempts"] == 1


def test_fifty_callers_in_two_processes_just_after_cooldown_make_exactly_one_probe(
    redis_client, namespace
):
    clock = SystemClock("wall")
    store = RedisStore(redis_client, namespace)
    breaker = Breaker(
        BreakerConfig(failure_threshold=1, cooldown_ms=1000), store=store, clock=clock
    )
    FakeDependency(
        parse_dependency({"mode": "healthy"}), store=store, clock=clock, rng=random.Random()
    ).arm()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "crowd", REDIS_URL, namespace, "25", str(1 + 25 * i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=_env(),
        )
        for i in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        breaker.record(breaker.allow(), "failure")  # open now, for 1000 ms
        open_until = breaker.snapshot()["open_until_ms"] / 1000
        start = open_until + 0.005  # everybody arrives just after the cooldown
        for proc in procs:
            proc.stdin.write(f"{start}\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            results += json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert len(results) == 50
    reached = [r for r in results if r[2] > 0]
    assert len(reached) == 1, reached
    assert reached[0][1] == "success"
    assert sorted(r[1] for r in results if r[2] == 0) == ["rejected_half_open"] * 49
    assert store.export_state()["dependency"]["attempts"] == 1
    assert breaker.state() == "closed"


def test_a_killed_probe_holder_blocks_probes_until_its_lease_expires_and_not_after(
    redis_client, namespace
):
    lease_ms = 800
    clock = SystemClock("wall")
    store = RedisStore(redis_client, namespace, probe_lease_ms=lease_ms)
    breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_ms=100), store=store, clock=clock)
    breaker.record(breaker.allow(), "failure")
    time.sleep(0.11)
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), "holder", REDIS_URL, namespace, str(lease_ms)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    try:
        line = holder.stdout.readline().strip()
        assert line.startswith("probe "), line
        holder.kill()  # dies mid-call: its result is never recorded
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
    lease_key = f"{namespace}:probe:{line.split()[1]}"
    assert breaker.state() == "half_open"
    blocked = 0
    while redis_client.pttl(lease_key) > 30:  # still leased (with margin for the round trip)
        rejection = breaker.allow()
        assert not rejection and rejection.reason == "half_open"
        blocked += 1
        time.sleep(0.02)
    assert blocked > 5
    while redis_client.exists(lease_key):
        time.sleep(0.002)
    probe = breaker.allow(call=100)  # the very first ask after expiry gets the slot
    assert probe and probe.probe
    breaker.record(probe, "success")
    assert breaker.state() == "closed"


@pytest.mark.parametrize("late", ["failure", "success"])
def test_a_probe_whose_lease_expired_and_was_taken_over_records_as_stale_in_redis(
    redis_client, namespace, late
):
    clock = VirtualClock()  # breaker time; the lease expires on Redis's own clock
    config = BreakerConfig(failure_threshold=1, cooldown_ms=100)
    first = Breaker(config, store=RedisStore(redis_client, namespace, 100), clock=clock)
    second = Breaker(config, store=RedisStore(redis_client, namespace, 5000), clock=clock)
    first.record(first.allow(), "failure")
    clock.advance(0.1)
    paused = first.allow(call=1)
    assert paused.probe
    lease_key = f"{namespace}:probe:{paused.slot}"
    while redis_client.exists(lease_key):  # the holder is paused past its lease
        time.sleep(0.005)
    replacement = second.allow(call=2)
    assert replacement.probe and replacement.slot == paused.slot
    assert first.record(paused, late) == (False, None)
    assert second.state() == "half_open"
    assert redis_client.exists(lease_key)  # the replacement's lease is untouched
    assert second.record(replacement, "success") == (True, "closed")


def test_a_probe_recorded_after_its_lease_expired_is_stale_in_redis(redis_client, namespace):
    clock = VirtualClock()
    store = RedisStore(redis_client, namespace, probe_lease_ms=50)
    breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_ms=100), store=store, clock=clock)
    breaker.record(breaker.allow(), "failure")
    clock.advance(0.1)
    late = breaker.allow()
    while redis_client.exists(f"{namespace}:probe:{late.slot}"):
        time.sleep(0.005)
    assert breaker.record(late, "failure").applied is False
    assert breaker.state() == "half_open"
    assert breaker.allow().probe


def test_a_paused_probe_holder_in_another_process_cannot_undo_its_replacement(
    redis_client, namespace
):
    lease_ms = 300
    clock = SystemClock("wall")
    store = RedisStore(redis_client, namespace, probe_lease_ms=5000)
    breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_ms=100), store=store, clock=clock)
    breaker.record(breaker.allow(), "failure")
    time.sleep(0.11)
    paused = subprocess.Popen(
        [sys.executable, str(WORKER), "late", REDIS_URL, namespace, str(lease_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    try:
        line = paused.stdout.readline().strip()
        assert line.startswith("probe "), line
        lease_key = f"{namespace}:probe:{line.split()[1]}"
        while redis_client.exists(lease_key):
            time.sleep(0.005)
        replacement = breaker.allow(call=100)
        assert replacement and replacement.probe
        paused.stdin.write("resume\n")
        paused.stdin.flush()
        assert json.loads(paused.stdout.readline()) == [False, None]
        paused.wait(timeout=10)
    finally:
        if paused.poll() is None:
            paused.kill()
    assert breaker.state() == "half_open"
    assert breaker.record(replacement, "success") == (True, "closed")


def test_a_stale_generation_changes_nothing_in_redis(redis_client, namespace):
    clock = VirtualClock()
    store = RedisStore(redis_client, namespace)
    breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_ms=100), store=store, clock=clock)
    early = breaker.allow()
    breaker.record(breaker.allow(), "failure")
    clock.advance(0.1)
    probe = breaker.allow()
    raw_before = {
        k: redis_client.hgetall(k) for k in store.all_keys() if redis_client.type(k) == b"hash"
    }
    assert breaker.record(early, "success").applied is False
    assert breaker.record(early, "failure").applied is False
    raw_after = {
        k: redis_client.hgetall(k) for k in store.all_keys() if redis_client.type(k) == b"hash"
    }
    assert raw_after == raw_before
    assert breaker.snapshot()["probes_in_flight"] == 1
    breaker.record(probe, "success")
    assert breaker.state() == "closed"


def test_the_tour_on_redis_matches_the_tour_in_memory(redis_client, namespace):
    in_memory = run_scenario(load_scenario("tour"))
    on_redis = run_scenario(
        load_scenario("tour"),
        executor=EngineExecutor(seed=7, store=RedisStore(redis_client, namespace)),
    )
    assert on_redis == in_memory


def test_state_exports_from_redis_and_imports_into_memory_and_back(redis_client, namespace):
    clock = VirtualClock()
    redis_store = RedisStore(redis_client, namespace)
    config = BreakerConfig(kind="rolling_ratio", min_calls=10, window_ms=1000, buckets=4)
    breaker = Breaker(config, store=redis_store, clock=clock)
    for outcome in ["failure", "success", "failure"]:
        breaker.record(breaker.allow(), outcome)
        clock.advance(0.3)
    FakeDependency(
        parse_dependency({"mode": "flaky", "fail_count": 4}),
        store=redis_store,
        clock=clock,
        rng=random.Random(),
    ).arm()
    RetryBudget(RetryBudgetConfig(token_ratio=0.5, max_tokens=3), store=redis_store).try_withdraw()
    exported = redis_store.export_state()
    assert json.loads(json.dumps(exported)) == exported
    memory = MemoryStore()
    memory.import_state(exported)
    assert memory.export_state() == exported
    redis_store.clear()
    assert not redis_store.has_state()
    redis_store.import_state(memory.export_state())
    assert redis_store.export_state() == exported
    assert (
        Breaker(config, store=redis_store, clock=clock).snapshot()["window_failures"] == 2
    )  # time window: both failures are still inside it
    assert redis_store.export_state()["window"]["buckets"]


def test_several_stores_export_in_one_round_trip_as_each_would_alone(
    redis_client, namespace, monkeypatch
):
    import redis

    clock = VirtualClock()
    busy, empty, forced = (RedisStore(redis_client, f"{namespace}:{n}") for n in "abc")
    breaker = Breaker(BreakerConfig(failure_threshold=2), store=busy, clock=clock)
    for _ in range(2):
        breaker.record(breaker.allow(), "failure")
    Breaker(BreakerConfig(), store=forced, clock=clock).force_open("by hand")
    alone = [busy.export_state(), forced.export_state()]
    sends: list[int] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, *args, **kwargs):
        sends.append(1)
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    together = RedisStore.export_states([busy, empty, forced])
    assert len(sends) == 1  # one MULTI/EXEC for all three
    assert together == [alone[0], None, alone[1]]  # None: no state, as has_state says
    assert not empty.has_state()
    assert RedisStore.export_states([]) == []


def test_clear_deletes_every_key_of_the_namespace_and_nothing_else(redis_client, namespace):
    other = RedisStore(redis_client, namespace + "x")
    store = RedisStore(redis_client, namespace)
    clock = VirtualClock()
    for s in (store, other):
        b = Breaker(BreakerConfig(failure_threshold=1, cooldown_ms=100), store=s, clock=clock)
        b.record(b.allow(), "failure")
    clock.advance(0.1)
    Breaker(BreakerConfig(), store=store, clock=clock).allow()  # a probe lease
    assert len(list(redis_client.scan_iter(match=f"{namespace}:*"))) >= 2
    store.clear()
    assert list(redis_client.scan_iter(match=f"{namespace}:*")) == []
    assert other.has_state()
    other.clear()


@pytest.mark.parametrize("bad", ["", "fl s1", "fl:{}", "fl:{s1}{s2}", "fl:{s1", "fl:s1}"])
def test_a_namespace_has_no_spaces_and_at_most_one_non_empty_hash_tag(bad):
    with pytest.raises(ValueError, match="namespace must be non-empty"):
        RedisStore(object(), bad)


def test_a_hash_tagged_namespace_keeps_every_key_in_one_cluster_slot(redis_client):
    from redis.cluster import key_slot

    store = RedisStore(redis_client, "fl:{s1}")
    assert len({key_slot(k.encode()) for k in store.all_keys()}) == 1


def test_a_script_redis_does_not_know_is_loaded_and_the_call_retried(redis_client, namespace):
    store = RedisStore(redis_client, namespace)
    breaker = Breaker(BreakerConfig(), store=store, clock=VirtualClock())
    # As after a Redis restart (SCRIPT FLUSH would disturb other users of a shared server).
    store._allow.sha = store._record.sha = "0" * 40
    assert breaker.allow()
    breaker.record(breaker.allow(), "failure")
    assert breaker.snapshot()["failure_streak"] == 1


def test_load_scripts_puts_every_script_in_redis_so_no_first_call_pays_a_load(redis_client):
    import hashlib

    from labs.engine.redis.store import _LUA, _source, load_scripts

    redis_client.script_flush()
    names = sorted(p.stem for p in _LUA.glob("*.lua"))
    shas = [hashlib.sha1(_source(n).encode()).hexdigest() for n in names]  # noqa: S324
    assert not any(redis_client.script_exists(*shas))
    assert load_scripts(redis_client) == len(names) >= 11
    assert all(redis_client.script_exists(*shas))
