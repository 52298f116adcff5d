"""Memory and Redis stores implement the same state machine: same inputs, same decisions."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from labs.engine import BreakerConfig, MemoryStore
from labs.engine.redis import RedisStore
from labs.engine.stores.base import BreakerSpec

#: Decision codes met by the sequences (checked by the last test of this module); the explicit
#: examples reach every one, so the check does not depend on the random draws.
COVERED: set[str] = set()
LEASE_MS = 10**8  # no lease expires during a test: memory leases run on virtual time, Redis on real

configs = st.one_of(
    st.builds(
        BreakerConfig,
        kind=st.just("consecutive"),
        failure_threshold=st.integers(1, 4),
        half_open_max_probes=st.integers(1, 3),
        success_threshold=st.sampled_from([1, 1, 2, 3]),
    ),
    st.builds(
        BreakerConfig,
        kind=st.just("rolling_ratio"),
        failure_ratio=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
        min_calls=st.integers(1, 5),
        window_calls=st.one_of(st.none(), st.integers(1, 6)),
        window_ms=st.sampled_from([100, 1000, 3000]),
        buckets=st.integers(1, 6),
        half_open_max_probes=st.integers(1, 3),
        success_threshold=st.sampled_from([1, 1, 2, 3]),
    ),
)

# The peer libraries' options, drawn on top of either kind.
peer_options = st.fixed_dictionaries(
    {
        "cooldown_edge": st.sampled_from(["inclusive", "strict"]),
        "ratio_checked_on": st.sampled_from(["every_result", "failure"]),
        "cooldown_multiplier": st.sampled_from([1, 1.5, 2, 3.7]),
        "cooldown_max_ms": st.sampled_from([1000, 2500, 60000]),
        "half_open_calls": st.one_of(st.none(), st.integers(1, 4)),
        "half_open_decision": st.sampled_from(["first_failure", "ratio"]),
        "success_threshold": st.integers(1, 2),
    }
).filter(lambda o: o["half_open_calls"] is not None or o["half_open_decision"] == "first_failure")
# resilience4j's slow calls, on a rolling breaker checked after every result.
slow_options = st.fixed_dictionaries(
    {
        "slow_call_ms": st.sampled_from([1, 100, 4000]),
        "slow_call_ratio": st.sampled_from([0.0, 0.3, 0.5, 1.0]),
        "ratio_checked_on": st.just("every_result"),
    }
)
gobreaker_options = st.fixed_dictionaries(
    {
        "counts": st.sampled_from(["engine", "gobreaker"]),
        "count_interval_ms": st.sampled_from([None, 100, 1000]),
        "admission": st.sampled_from(["two_step", "strict"]),
    }
)
configs = st.one_of(
    configs,
    st.tuples(configs, peer_options).map(
        lambda pair: BreakerConfig(**{**pair[0].to_dict(), **pair[1]})
    ),
    st.tuples(configs, peer_options, slow_options)
    .filter(lambda triple: triple[0].kind == "rolling_ratio")
    .map(lambda t: BreakerConfig(**{**t[0].to_dict(), **t[1], **t[2]})),
    # gobreaker's counting: its Counts on either kind, the interval on a consecutive breaker
    st.tuples(configs, peer_options, gobreaker_options)
    .filter(
        lambda t: (
            t[0].kind == "consecutive"
            or (t[2]["count_interval_ms"] is None and t[2]["admission"] == "two_step")
        )
    )
    .map(lambda t: BreakerConfig(**{**t[0].to_dict(), **t[1], **t[2]})),
)

# enough failures to open, successes to close; S / F are slow (plain s / f without slow calls)
outcome = st.sampled_from("fffsssiSF")
operations = st.lists(
    st.one_of(
        st.tuples(st.just("call"), outcome),  # allow, then record at once
        st.tuples(st.just("call"), outcome),
        st.tuples(st.just("call"), outcome),
        st.tuples(st.just("call"), outcome),
        st.tuples(st.just("advance"), st.sampled_from([100_000, 1_000_000, 2_000_000])),
        st.tuples(st.just("allow")),  # hold the permit: a call in flight
        st.tuples(st.just("allow")),
        st.tuples(st.just("record"), st.integers(0, 50), outcome),
        st.tuples(st.just("advance"), st.sampled_from([0, 1, 50_000, 99_999, 100_000, 400_000])),
        st.tuples(st.just("advance"), st.integers(0, 3_000_000)),
        st.tuples(st.just("read")),
        st.tuples(st.just("force"), st.sampled_from(["open", "closed", "reset", "reset"])),
        # an admission carrying its first attempt's dependency step along, held or recorded
        st.tuples(st.just("allow_step"), st.integers(0, 3)),
        st.tuples(st.just("call_step"), outcome, st.integers(0, 3)),
        # a retry's look at the breaker, stepping the dependency only while closed
        st.tuples(st.just("check_step"), st.integers(0, 3)),
    ),
    min_size=25,
    max_size=80,
)


@pytest.fixture(scope="module")
def module_redis():
    import redis

    from .helpers import REDIS_URL

    client = redis.Redis.from_url(REDIS_URL)
    client.ping()
    yield client
    client.close()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=configs, ops=operations, cooldown_us=st.sampled_from([100_000, 1_000_000, 2_000_000]))
@example(  # the plain admissions and results (the last two examples reach the rest)
    config=BreakerConfig(failure_threshold=1),
    ops=[
        ("call", "f"),  # opens
        ("allow",),  # rejected: open
        ("advance", 1_000_000),  # inclusive cooldown edge
        ("allow",),  # the probe, held
        ("allow",),  # rejected: half-open
        ("record", 0, "s"),  # closes
        ("call", "f"),  # opens again
        ("advance", 1_000_000),
        ("call", "f"),  # probe fails: re-opens
        ("record", 0, "s"),  # nothing held: no-op
        ("read",),
    ],
    cooldown_us=1_000_000,
)
@example(
    config=BreakerConfig(kind="rolling_ratio", min_calls=2, window_ms=1000, buckets=4),
    ops=[
        ("allow",),
        ("call", "f"),
        ("record", 0, "s"),
        ("call", "f"),
        ("advance", 300_000),
        ("call", "f"),
        ("read",),
    ],
    cooldown_us=100_000,
)
@example(  # the slow-call rate opens, and re-opens from a half-open ratio decision
    config=BreakerConfig(
        kind="rolling_ratio",
        min_calls=2,
        window_ms=1000,
        buckets=2,
        failure_ratio=1.0,
        slow_call_ms=100,
        slow_call_ratio=0.5,
        half_open_max_probes=2,
        half_open_calls=2,
        half_open_decision="ratio",
    ),
    ops=[
        ("call", "S"),
        ("call", "s"),  # 1 slow of 2: 50 %, opens
        ("advance", 1_000_000),
        ("call", "F"),
        ("read",),
        ("call", "s"),  # failures 1 of 2 < 100 %, slow 1 of 2: re-opens
        ("read",),
    ],
    cooldown_us=1_000_000,
)
@example(  # strict admission holds a call back while the calls in flight could reach the
    # threshold (HOLD): the random draws reach it only sometimes
    config=BreakerConfig(failure_threshold=1, admission="strict"),
    ops=[
        ("allow",),  # admitted, held: one call in flight
        ("allow",),  # held back: 0 failures + 1 in flight is not below 1
        ("record", 0, "s"),
        ("allow",),  # admitted again once the result is in
        ("read",),
    ],
    cooldown_us=1_000_000,
)
@example(  # every admission-with-step and retry-look decision and a stale result, whatever
    # the random draws
    config=BreakerConfig(failure_threshold=1),
    ops=[
        ("allow_step", 0),  # admitted with its step
        ("record", 0, "f"),  # opens
        ("check_step", 0),  # a retry's look: open, not stepped
        ("allow_step", 1),  # rejected: open
        ("advance", 1_000_000),
        ("allow_step", 2),  # the probe, with its step, held
        ("check_step", 1),  # half-open
        ("allow_step", 0),  # rejected: half-open
        ("record", 0, "s"),  # closes
        ("check_step", 0),  # closed: stepped
        ("allow_step", 0),  # admitted, held
        ("force", "open"),  # a new generation
        ("record", 0, "f"),  # stale: counts nothing
        ("read",),
    ],
    cooldown_us=1_000_000,
)
def test_memory_and_redis_stores_make_identical_decisions(module_redis, config, ops, cooldown_us):
    spec = BreakerSpec.of(config)
    memory = MemoryStore(probe_lease_ms=LEASE_MS)
    redis_store = RedisStore(
        module_redis, f"fldiff:{uuid.uuid4().hex[:10]}", probe_lease_ms=LEASE_MS
    )
    now = 1_000_000
    permits: list[tuple[int, int, str, str]] = []  # generation, slot, memory token, redis token
    seen = COVERED
    if not spec.slow_us:
        ops = [tuple(o.lower() if o in ("S", "F") else o for o in op) for op in ops]
    try:
        for op in ops:
            if op[0] in ("allow_step", "call_step"):
                fail_left = op[-1]
                m, m_step = memory.breaker_allow_step(spec, now, fail_left)
                r, r_step = redis_store.breaker_allow_step(spec, now, fail_left)
                assert m._replace(token="") == r._replace(token=""), op
                assert m_step == r_step, op
                assert (m_step is None) == (m.code not in (0, 1)), op  # refused: not reached
                seen.add(f"allow_step{m.code}")
                if m.code in (0, 1):
                    permits.append((m.generation, m.slot, m.token, r.token))
                    if op[0] == "call_step":
                        op = ("record", len(permits) - 1, op[1])
            elif op[0] == "check_step":
                m_state, m_step = memory.breaker_check_step(spec, now, op[1])
                r_state, r_step = redis_store.breaker_check_step(spec, now, op[1])
                assert (m_state, m_step) == (r_state, r_step), op
                assert (m_step is None) == (m_state != "closed"), op
                seen.add(f"check_step:{m_state}")
            if op[0] in ("allow", "call"):
                m = memory.breaker_allow(spec, now)
                r = redis_store.breaker_allow(spec, now)
                assert m._replace(token="") == r._replace(token=""), op
                seen.add(f"allow{m.code}")
                if m.code in (0, 1):
                    permits.append((m.generation, m.slot, m.token, r.token))
                    if op[0] == "call":
                        op = ("record", len(permits) - 1, op[1])
            if op[0] == "record" and permits:
                gen, slot, m_token, r_token = permits.pop(op[1] % len(permits))
                m = memory.breaker_record(spec, gen, slot, m_token, op[2], now, cooldown_us)
                r = redis_store.breaker_record(spec, gen, slot, r_token, op[2], now, cooldown_us)
                assert m == r, op
                seen.add(f"record{m.code}")
                if m.code in (2, 4) and m.a < 0:
                    seen.add("slow_open")  # the slow-call rate opened it
            elif op[0] == "advance":
                now += op[1]
            elif op[0] == "read":
                assert memory.breaker_read(spec, now) == redis_store.breaker_read(spec, now)
            elif op[0] == "force":
                assert memory.breaker_force(op[1], now) == redis_store.breaker_force(op[1], now)
        assert memory.breaker_read(spec, now) == redis_store.breaker_read(spec, now)
        m_doc, r_doc = memory.export_state(), redis_store.export_state()
        assert (m_doc.get("slow"), m_doc.get("counts")) == (r_doc.get("slow"), r_doc.get("counts"))
        assert m_doc.get("dependency") == r_doc.get("dependency")
    finally:
        redis_store.clear()


def test_the_generated_sequences_reach_every_decision():
    wanted = {f"allow{c}" for c in range(5)} | {f"record{c}" for c in range(5)} | {"slow_open"}
    wanted |= {f"allow_step{c}" for c in range(4)}
    wanted |= {f"check_step:{state}" for state in ("closed", "open", "half_open")}
    assert wanted - COVERED == set()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fail_count=st.integers(0, 5),
    steps=st.lists(st.one_of(st.just("step"), st.just("arm"), st.integers(0, 10**6)), max_size=30),
    budget_ops=st.lists(st.sampled_from(["deposit", "withdraw"]), max_size=30),
    ratio=st.integers(0, 1_000_000),
    ceiling=st.integers(1_000_000, 5_000_000),
)
def test_dependency_and_budget_state_agree_too(
    module_redis, fail_count, steps, budget_ops, ratio, ceiling
):
    memory = MemoryStore()
    redis_store = RedisStore(module_redis, f"fldiff:{uuid.uuid4().hex[:10]}")
    now = 5_000_000
    try:
        for step in steps:
            if step == "arm":
                memory.dependency_arm(fail_count, now)
                redis_store.dependency_arm(fail_count, now)
            elif step == "step":
                assert memory.dependency_step(fail_count, now) == redis_store.dependency_step(
                    fail_count, now
                )
            else:
                now += step
        for op in budget_ops:
            if op == "deposit":
                assert memory.budget_deposit(ratio, ceiling) == redis_store.budget_deposit(
                    ratio, ceiling
                )
            else:
                assert memory.budget_withdraw(ceiling) == redis_store.budget_withdraw(ceiling)
        assert memory.export_state() == redis_store.export_state()
    finally:
        redis_store.clear()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("throttle"), st.sampled_from(["success", "failure", "read"])),
            st.tuples(st.just("window"), st.sampled_from(["deposit", "withdraw"])),
            st.tuples(st.just("advance"), st.integers(0, 3_000_000)),
        ),
        max_size=40,
    ),
    ratio=st.integers(0, 1000),
    ceiling=st.integers(1000, 20_000),
    reserve=st.integers(0, 5000),
    amount=st.integers(1, 3000),
)
def test_the_peer_budgets_agree_too(module_redis, ops, ratio, ceiling, reserve, amount):
    memory = MemoryStore()
    redis_store = RedisStore(module_redis, f"fldiff:{uuid.uuid4().hex[:10]}")
    now = 5_000_000
    try:
        for op in ops:
            if op[0] == "throttle":
                assert memory.budget_throttle(op[1], ratio, ceiling) == (
                    redis_store.budget_throttle(op[1], ratio, ceiling)
                )
            elif op[0] == "window":
                assert memory.budget_window(op[1], now, 1_000_000, reserve, amount) == (
                    redis_store.budget_window(op[1], now, 1_000_000, reserve, amount)
                )
            else:
                now += op[1]
        assert memory.export_state() == redis_store.export_state()
    finally:
        redis_store.clear()
