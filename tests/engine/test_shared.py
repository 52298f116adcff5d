"""The shared dependency: the model's rules, both implementations reply for reply, the guarded
client on it, validation, one round trip per attempt, and exactness across processes."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import uuid

import pytest

from labs.engine import (
    Breaker,
    EventList,
    GuardedClient,
    MemorySharedModel,
    MemoryStore,
    SharedConfig,
    SharedDependency,
    Trigger,
    ValidationError,
    VirtualClock,
    parse_policy,
)
from labs.engine.config import LIMITS
from labs.engine.redis import RedisSharedModel
from labs.engine.shared import SESSION_FIELDS, WAIT_BOUNDS_MS, wait_bucket, wait_quantile_ms
from labs.engine.validate import parse_shared, parse_trigger, validate_shared, validate_trigger

from .helpers import REDIS_URL, ROOT

MS = 1000  # microseconds


def both(config, redis_client=None, keep_s=3):
    """The memory model, and the Redis one on caller time when a client is given (a session's
    counters kept ``keep_s`` seconds, short enough for the seeded runs to drop some)."""
    models = [MemorySharedModel(config, keep_s=keep_s)]
    if redis_client is not None:
        model = RedisSharedModel(
            redis_client, uuid.uuid4().hex[:10], server_time=False, keep_s=keep_s
        )
        model.configure(config)
        models.append(model)
    return models


@pytest.fixture(params=["memory", "redis"])
def model(request):
    config = SharedConfig(servers=2, service_ms=100, max_queue_ms=150)
    if request.param == "memory":
        yield MemorySharedModel(config)
        return
    client = request.getfixturevalue("redis_client")
    m = RedisSharedModel(client, uuid.uuid4().hex[:10], server_time=False)
    m.configure(config)
    yield m
    m.clear()


# -- the rules, on both implementations --------------------------------------------------------


def test_fifo_queue_on_the_earliest_free_server_then_shed_beyond_max_queue(model):
    a, b, c, d, e = (model.decide(t * MS) for t in (0, 0, 10, 20, 30))
    assert (a.outcome, a.server, a.start_us, a.answer_us) == ("ok", 0, 0, 100 * MS)
    assert (b.outcome, b.server, b.start_us) == ("ok", 1, 0)
    assert (c.server, c.start_us, c.wait_us, c.answer_us) == (0, 100 * MS, 90 * MS, 200 * MS)
    assert (d.server, d.start_us, d.wait_us) == (1, 100 * MS, 80 * MS)
    # next free at 200 ms: a 170 ms wait is over the 150 ms limit -> 503 at once, no server
    assert (e.outcome, e.server, e.answer_us, e.wait_us) == ("shed", -1, 30 * MS, 170 * MS)
    assert model.state()["free_us"] == [200 * MS, 200 * MS]


def test_a_wait_of_exactly_max_queue_is_served(model):
    model.decide(0)
    model.decide(0)
    assert model.decide(0).outcome == "ok"  # waits 100 ms <= 150
    model.decide(0)
    edge = model.decide(50 * MS)  # next free at 200 ms: waits exactly 150 ms
    assert (edge.outcome, edge.wait_us) == ("ok", 150 * MS)


def test_a_client_timeout_does_not_free_the_server_and_the_work_is_wasted(model):
    model.decide(0)
    model.decide(0)
    late = model.decide(10 * MS, timeout_us=50 * MS)
    assert (late.outcome, late.answer_us, late.finish_us) == ("timeout", 60 * MS, 200 * MS)
    nxt = model.decide(20 * MS)
    assert nxt.start_us == 100 * MS and nxt.server == 1  # server 0 still does the dead work
    assert model.decide(60 * MS).start_us == 200 * MS
    (second,) = model.counters()
    assert (second.timeout, second.wasted_us, second.ok) == (1, 100 * MS, 4)
    # answered at exactly the timeout: received (a timeout is strictly longer)
    assert model.decide(1000 * MS, timeout_us=100 * MS).outcome == "ok"


def test_a_deadline_sent_along_skips_an_attempt_that_could_not_start_before_it(model):
    model.decide(0)
    model.decide(0)
    skipped = model.decide(0, deadline_us=100 * MS)  # would start at 100 ms: at the deadline
    assert (skipped.outcome, skipped.answer_us, skipped.server) == ("skipped", 0, -1)
    kept = model.decide(0, deadline_us=100 * MS + 1)
    assert (kept.outcome, kept.start_us) == ("ok", 100 * MS)
    (second,) = model.counters()
    assert (second.skipped, second.wasted_us, second.offered) == (1, 0, 4)


def test_down_answers_503_after_the_service_time_then_heals(model):
    model.trigger(Trigger("down", 500), now_us=0)
    failed = model.decide(10 * MS)
    assert (failed.outcome, failed.answer_us) == ("error", 110 * MS)
    assert model.decide(500 * MS).outcome == "ok"  # the trigger ended at 500 ms


def test_slow_multiplies_the_service_time_for_arrivals_during_it(model):
    model.trigger(Trigger("slow", 1000, factor=2.5), now_us=0)
    assert model.decide(0).service_us == 250 * MS
    assert model.decide(1000 * MS).service_us == 100 * MS


def test_capacity_drop_holds_servers_until_the_end_and_queued_work_moves_onto_them(model):
    model.trigger(Trigger("capacity", 300, servers=1), now_us=0)
    first = model.decide(0)
    second = model.decide(0)  # server 1 is held until 300 ms
    assert (first.server, second.server, second.start_us) == (0, 0, 100 * MS)
    third = model.decide(0)  # waits 150 ms
    assert third.outcome == "shed" or third.start_us >= 200 * MS
    model.trigger(Trigger("capacity", 300, servers=1), now_us=400 * MS)
    after = [model.decide(400 * MS) for _ in range(2)]
    assert [d.start_us for d in after] == [400 * MS, 500 * MS]


def test_a_trigger_replaces_the_running_one_and_an_early_end_frees_held_servers(model):
    assert model.trigger(Trigger("capacity", 10_000, servers=0), now_us=0) is None
    held = model.decide(0)
    assert held.outcome == "shed"  # every server held for 10 s
    replaced = model.trigger(Trigger("slow", 1000, factor=2), now_us=1000 * MS)
    assert replaced == {"kind": "capacity", "from_us": 0, "until_us": 10_000 * MS}
    back = model.decide(1000 * MS)
    assert (back.outcome, back.start_us, back.service_us) == ("ok", 1000 * MS, 200 * MS)
    assert model.clear_trigger(1100 * MS) == {
        "kind": "slow",
        "from_us": 1000 * MS,
        "until_us": 2000 * MS,
    }
    assert model.clear_trigger(1200 * MS) is None


def test_time_never_runs_backwards(model):
    model.decide(500 * MS)
    early = model.decide(100 * MS)
    assert early.arrival_us == 500 * MS


def test_counters_per_second_count_each_event_at_its_second(model):
    model.decide(900 * MS)  # ok at 1.0 s
    model.decide(950 * MS, attempt=2)  # retry, ok at 1.05 s
    model.decide(960 * MS, attempt=1, timeout_us=10 * MS)  # waits: times out at 0.97 s
    rows = {s.second: s for s in model.counters()}
    assert (rows[0].offered, rows[0].calls, rows[0].retries, rows[0].timeout) == (3, 2, 1, 1)
    assert (rows[1].ok, rows[1].calls_ok, rows[1].wasted_us) == (2, 2, 100 * MS)
    assert rows[0].waits[wait_bucket(0)] == 2 and sum(rows[0].waits) == 3


def test_every_reply_carries_its_arrival_second_s_offered_count_so_far(model):
    # ok, a client timeout and a shed all count; the count starts again in each second
    replies = [model.decide(0), model.decide(0, timeout_us=5 * MS)]
    replies += [model.decide(t * MS) for t in (10, 20, 30)]
    replies += [model.decide(1_000 * MS), model.decide(1_200 * MS, attempt=2)]
    assert [r.outcome for r in replies[:5]] == ["ok", "timeout", "ok", "ok", "shed"]
    assert [r.second_offered for r in replies] == [1, 2, 3, 4, 5, 1, 2]
    assert all(r.to_dict()["second_offered"] == r.second_offered for r in replies)
    # the last reply of a second carries the counter's value
    assert {s.second: s.offered for s in model.counters()} == {0: 5, 1: 2}


def test_wait_quantiles_read_the_histogram():
    hist = [0] * len(WAIT_BOUNDS_MS)
    hist[wait_bucket(0)] = 50
    hist[wait_bucket(400 * MS)] = 49
    hist[wait_bucket(1900 * MS)] = 1
    assert wait_quantile_ms(hist, 0.5) == 0
    assert wait_quantile_ms(hist, 0.99) == 500
    assert wait_quantile_ms(hist, 1.0) == 2000
    assert wait_quantile_ms([0] * len(WAIT_BOUNDS_MS), 0.5) is None


# -- the server's defences, on both implementations ---------------------------------------------


def defended(model, **defences):
    """``model`` reconfigured: 2 servers x 100 ms, queue up to 150 ms, plus ``defences``."""
    model.configure(SharedConfig(servers=2, service_ms=100, max_queue_ms=150, **defences))
    return model


def test_the_rate_limit_answers_429_at_once_with_the_time_until_the_next_token(model):
    defended(model, rate_per_s=10, rate_burst=2)  # a token every 100 ms, two at most
    a, b, c = (model.decide(t * MS, attempt=1, session="1") for t in (0, 0, 30))
    assert (a.outcome, b.outcome) == ("ok", "ok")
    # the bucket is empty; 30 ms of 100 ms refilled: the next token in 70 ms
    assert (c.outcome, c.answer_us, c.server, c.retry_after_us) == ("limited", 30 * MS, -1, 70 * MS)
    d = model.decide(100 * MS)  # one token again, the server queue is still 150 ms max
    assert d.outcome == "ok"
    (second,) = model.counters()
    assert (second.offered, second.limited, second.shed, second.ok) == (4, 1, 0, 3)
    mine = model.session_seconds(["1"], 0, 0)["1"][0]
    assert (mine["offered"], mine["limited"]) == (3, 1)


def test_the_queue_limit_sheds_an_attempt_that_would_wait_behind_that_many(model):
    defended(model, queue_limit=1)
    a, b, c, d = (model.decide(t * MS) for t in (0, 0, 10, 20))
    assert [x.outcome for x in (a, b, c)] == ["ok", "ok", "ok"]  # c waits: one waiting
    assert (d.outcome, d.reason, d.answer_us) == ("shed", "queue_full", 20 * MS)
    assert model.decide(50 * MS).reason == "queue_full"  # c still waits
    e, f = model.decide(100 * MS), model.decide(100 * MS)  # c started at 100 ms
    assert (e.outcome, e.wait_us) == ("ok", 0)
    assert (f.outcome, f.wait_us) == ("ok", 100 * MS)  # nobody waits: f may


def test_the_concurrency_limit_counts_attempts_waiting_and_in_service(model):
    defended(model, concurrency_limit=3)
    outcomes = [model.decide(t * MS) for t in (0, 0, 5, 6)]
    assert [(d.outcome, d.reason) for d in outcomes] == [
        ("ok", ""), ("ok", ""), ("ok", ""), ("shed", "concurrency"),
    ]  # fmt: skip
    assert model.decide(100 * MS).outcome == "ok"  # two finished at 100 ms


def test_codel_sheds_long_waits_only_once_they_have_lasted_an_interval(model):
    defended(model, codel_target_ms=20, codel_interval_ms=50)
    model.decide(0)
    model.decide(0)  # both servers busy until 100 ms
    first = model.decide(10 * MS)  # waits 90 ms: over the target, congestion starts
    again = model.decide(40 * MS)  # 30 ms into it: still accepted (waits 60 ms)
    late = model.decide(60 * MS)  # 50 ms into it: shed
    assert [(d.outcome, d.reason) for d in (first, again, late)] == [
        ("ok", ""), ("ok", ""), ("shed", "codel"),
    ]  # fmt: skip
    # a wait at or under the target ends the congestion (server 1 is free again at 300 ms)
    calm = model.decide(400 * MS)
    assert (calm.outcome, calm.wait_us) == ("ok", 0)
    model.decide(400 * MS)
    assert model.decide(410 * MS).outcome == "ok"  # over the target again: a fresh start


def test_a_rate_limited_attempt_is_a_429_whose_retry_after_the_guarded_client_honours():
    clock = VirtualClock()
    model = MemorySharedModel(
        SharedConfig(servers=4, service_ms=10, rate_per_s=2, rate_burst=1), clock=clock
    )
    client, events = _client(
        model, clock,
        {"max_attempts": 3, "backoff_base_ms": 10, "jitter": "none", "retry_after": "pushback"},
    )  # fmt: skip
    client.call(1)
    result = client.call(2)  # no token left: 429, Retry-After 490 ms, waited out
    attempts = [e for e in events if e.kind == "attempt"]
    assert [(a.error, a.data["outcome"]) for a in attempts] == [
        (None, "ok"), ("429", "limited"), (None, "ok"),
    ]  # fmt: skip
    assert attempts[1].data["retry_after_us"] == 490 * MS
    assert result.outcome == "success" and attempts[2].at_ms - attempts[1].at_ms >= 490


# -- the two implementations agree, reply for reply --------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_memory_and_redis_give_the_same_reply_to_every_seeded_attempt(redis_client, seed):
    rng = random.Random(seed)
    config = SharedConfig(
        servers=rng.randint(1, 6),
        service_ms=rng.choice([3, 20, 45]),
        max_queue_ms=rng.choice([0, 60, 400]),
    )
    memory, redis_model = both(config, redis_client)
    t = 0
    for step in range(600):
        t += rng.choice([0, 0, 1, 500, 4_000, 15_000, 120_000])
        if rng.random() < 0.03:
            kind = rng.choice(["down", "slow", "capacity"])
            trig = Trigger(
                kind,
                rng.choice([100, 400, 2000]),
                factor=rng.choice([1, 1.5, 3.33]),
                servers=rng.randint(0, config.servers),
            )
            assert memory.trigger(trig, t) == redis_model.trigger(trig, t), step
            continue
        if rng.random() < 0.01:
            assert memory.clear_trigger(t) == redis_model.clear_trigger(t), step
            continue
        session = rng.choice([None, "1", "2", "3"])
        if session is not None and rng.random() < 0.05:
            state = rng.choice(["open", "half_open"])
            memory.refuse(t, session=session, state=state)
            redis_model.refuse(t, session=session, state=state)
            continue
        kwargs = {
            "timeout_us": rng.choice([None, None, 5_000, 50_000, 300_000]),
            "deadline_us": rng.choice([None, None, 0, 10_000, 200_000]),
            "attempt": rng.choice([1, 1, 2, 3]),
            "session": session,
            "state": rng.choice(["closed", "closed", "half_open"]),
        }
        assert memory.decide(t, **kwargs) == redis_model.decide(t, **kwargs), step
    assert memory.state() == redis_model.state()
    assert memory.counters() == redis_model.counters()
    # the sessions' counters too, the seconds dropped behind each one's newest included
    last = t // 1_000_000 + 2
    mine = memory.session_seconds(["1", "2", "3", "4"], 0, last)
    assert mine == redis_model.session_seconds(["1", "2", "3", "4"], 0, last)
    assert any(row["fast"] for rows in mine.values() for row in rows)
    assert mine["4"] == [
        {"second": s, **dict.fromkeys(SESSION_FIELDS, 0), "state": None} for s in range(last + 1)
    ]
    redis_model.clear()


@pytest.mark.parametrize("seed", range(8))
def test_with_the_server_s_defences_memory_and_redis_still_agree_reply_for_reply(
    redis_client, seed
):
    """The defences' rules and their state (the token bucket, the attempts waiting and in
    service, CoDel's congestion) agree between the two implementations, with the settings
    changed midway as an instructor changes them."""
    rng = random.Random(100 + seed)

    def settings():
        return SharedConfig(
            servers=rng.randint(1, 4),
            service_ms=rng.choice([3, 20, 45]),
            max_queue_ms=rng.choice([60, 400, 2000]),
            rate_per_s=rng.choice([None, 0.7, 30, 333.3]),
            rate_burst=rng.choice([1, 3, 10]),
            queue_limit=rng.choice([None, 1, 4]),
            concurrency_limit=rng.choice([None, 2, 7]),
            concurrency=rng.choice(["fixed", "aimd", "gradient"]),
            concurrency_max=rng.choice([7, 30]),
            limit_latency_ms=rng.choice([10, 100]),
            codel_target_ms=rng.choice([None, 5, 30]),
            codel_interval_ms=rng.choice([10, 100]),
        )

    memory, redis_model = both(settings(), redis_client)
    t = 0
    seen = set()
    for step in range(700):
        t += rng.choice([0, 0, 1, 500, 4_000, 15_000, 120_000])
        if rng.random() < 0.02:
            config = settings()
            memory.configure(config)
            redis_model.configure(config)
            assert redis_model.config == config
            continue
        if rng.random() < 0.02:
            trig = Trigger(rng.choice(["down", "slow"]), rng.choice([100, 400]), factor=3)
            assert memory.trigger(trig, t) == redis_model.trigger(trig, t), step
            continue
        kwargs = {
            "timeout_us": rng.choice([None, 5_000, 300_000]),
            "deadline_us": rng.choice([None, None, 10_000]),
            "attempt": rng.choice([1, 2]),
            "session": rng.choice([None, "1", "2"]),
        }
        decision = memory.decide(t, **kwargs)
        assert decision == redis_model.decide(t, **kwargs), step
        seen.add((decision.outcome, decision.reason))
    assert memory.counters() == redis_model.counters()
    assert memory.state() == redis_model.state()
    last = t // 1_000_000 + 2
    assert memory.session_seconds(["1", "2"], 0, last) == redis_model.session_seconds(
        ["1", "2"], 0, last
    )
    assert ("limited", "") in seen or seed % 2, seen  # most seeds meet the rate limit
    redis_model.clear()


def test_an_aimd_limit_climbs_while_half_of_it_is_used_and_falls_with_slow_answers(model):
    defended(model, concurrency_limit=4, concurrency="aimd", concurrency_max=6,
             limit_latency_ms=150)  # fmt: skip
    assert model.state()["limit_now"] == 4
    for _ in range(4):  # 2 servers x 100 ms: the 3rd and 4th wait 100 ms, answered at 200 ms
        model.decide(0)
    # two answered at 100 ms, fast, with 3 and then 2 still in the server: 4 -> 5 -> 6
    model.decide(150 * MS)
    assert model.state()["limit_now"] == 6
    # the next two answered after 200 ms: each slower than 150 ms cuts the limit to 0.9x
    model.decide(200 * MS)
    assert model.state()["limit_now"] == 4  # floor(6 x 0.9) = 5, floor(5 x 0.9) = 4
    # the instructor saving the settings starts it again
    defended(model, concurrency_limit=4, concurrency="aimd", concurrency_max=6)
    assert model.state()["limit_now"] == 4


def test_a_gradient_limit_grows_at_the_fastest_latency_and_shrinks_as_it_grows(model):
    model.configure(
        SharedConfig(servers=2, service_ms=100, max_queue_ms=2000, concurrency_limit=20,
                     concurrency="gradient", concurrency_max=40)
    )  # fmt: skip
    for t in (0, 0, 150):
        model.decide(t * MS)
    model.decide(400 * MS)  # three answers at the fastest latency (100 ms): + sqrt each time
    grown = model.state()["limit_now"]
    assert grown == 22  # 20 -> 20.9 -> 21.8 -> 22.7
    for _ in range(5):
        model.decide(400 * MS)  # with the one above: a queue, answers after 100 to 300 ms
    model.decide(2_000 * MS)  # each answer slower than the fastest pulls the limit in
    assert model.state()["limit_now"] < grown


def test_an_adaptive_limit_needs_a_start_no_higher_than_its_highest():
    assert [str(p) for p in validate_shared({"concurrency": "aimd"})] == [
        "shared.concurrency_limit: is needed for an adaptive limit to start from: between 1 "
        "and 200 attempts"
    ]
    assert [
        str(p)
        for p in validate_shared(
            {"concurrency": "gradient", "concurrency_limit": 50, "concurrency_max": 40}
        )
    ] == [
        "shared.concurrency_limit: must be between 1 and 40 attempts (at most the highest; "
        "got 50)"
    ]
    assert [str(p) for p in validate_shared({"concurrency": "lifo"})] == [
        "shared.concurrency: must be one of fixed, aimd, gradient (got 'lifo')"
    ]


def test_each_defence_turns_attempts_away_in_its_own_words():
    """Dense arrivals on one slow server meet every defence, each named by its reason (the
    differential runs above compare every one of them)."""
    seen = {}
    for name, config in {
        "limited": SharedConfig(servers=1, service_ms=45, rate_per_s=30, rate_burst=1),
        "queue_full": SharedConfig(servers=1, service_ms=45, queue_limit=1),
        "concurrency": SharedConfig(servers=1, service_ms=45, concurrency_limit=2),
        "codel": SharedConfig(servers=1, service_ms=45, codel_target_ms=5, codel_interval_ms=10),
    }.items():
        model = MemorySharedModel(config)
        decisions = [model.decide(i * 2_000) for i in range(40)]
        seen[name] = {d.reason or d.outcome for d in decisions} - {"ok"}
    assert seen == {
        "limited": {"limited"},
        "queue_full": {"queue_full"},
        "concurrency": {"concurrency"},
        "codel": {"codel"},
    }


def test_each_session_s_attempts_add_up_to_the_class_s_counters_second_by_second(model):
    """Every attempt named by its session is counted once for the class and once for the
    session, at the same seconds: the sessions' rows add up to the class's."""
    rng = random.Random(5)
    t = 0
    for _ in range(400):
        t += rng.choice([0, 1_000, 20_000, 90_000])
        model.decide(
            t, timeout_us=rng.choice([None, 120_000]), attempt=rng.choice([1, 1, 2, 4]),
            session=rng.choice(["7", "8"]),
        )  # fmt: skip
    model.refuse(t, session="8", state="open")
    last = t // 1_000_000 + 1
    rows = model.session_seconds(["7", "8"], 0, last)
    by_second = {row.second: row for row in model.counters()}
    for sec in range(last + 1):
        cls = by_second.get(sec)
        for name in ("offered", "calls", "retries", "ok", "error", "shed", "timeout"):
            total = sum(rows[s][sec][name] for s in ("7", "8"))
            assert total == (getattr(cls, name) if cls else 0), (sec, name)
    assert rows["8"][t // 1_000_000]["fast"] == 1
    assert rows["8"][t // 1_000_000]["state"] == "open"


def test_a_session_s_seconds_older_than_the_keep_are_dropped_as_it_calls(redis_client):
    memory = MemorySharedModel(SharedConfig(), keep_s=3)
    redis_model = RedisSharedModel(redis_client, uuid.uuid4().hex[:10], server_time=False, keep_s=3)
    redis_model.configure(SharedConfig())
    for m in (memory, redis_model):
        for sec in (1, 2, 3, 4, 5):
            m.decide(sec * 1_000_000, session="s1")
        assert [r["offered"] for r in m.session_seconds(["s1"], 1, 5)["s1"]] == [0, 0, 1, 1, 1]
        m.decide(60 * 1_000_000, session="s1")  # a long pause: everything before it goes
        assert sum(r["offered"] for r in m.session_seconds(["s1"], 1, 60)["s1"]) == 1
    keys = redis_client.keys(f"{{shared:{redis_model.model_id}}}:session:*")
    assert len(keys) == 1
    redis_model.reset()
    assert redis_client.keys(f"{{shared:{redis_model.model_id}}}:session:*") == []
    redis_model.clear()


# -- the guarded client on the shared dependency ------------------------------------------------


def _client(model, clock, policy, *, propagate=False, seed=1, session=None):
    store = MemoryStore()
    rng = random.Random(seed)
    events = EventList()
    policy = parse_policy(policy)
    breaker = Breaker(policy.breaker, store=store, clock=clock, rng=rng)
    dependency = SharedDependency(model, clock=clock, propagate_deadline=propagate, session=session)
    client = GuardedClient(
        policy,
        breaker=breaker,
        dependency=dependency,
        clock=clock,
        rng=rng,
        sink=events,
        store=store,
    )
    return client, events


def test_the_client_counts_its_session_s_attempts_refusals_and_breaker_state():
    """A session's attempts, its retries, the calls its open breaker refused and the
    breaker's state, per second, in the model's session counters (no attempt for a refusal)."""
    clock = VirtualClock()
    model = MemorySharedModel(SharedConfig(servers=1, service_ms=10), clock=clock)
    policy = {
        "max_attempts": 2, "backoff_base_ms": 0, "backoff_cap_ms": 0,
        "breaker": {"kind": "consecutive", "failure_threshold": 1, "cooldown_ms": 1500},
    }  # fmt: skip
    client, _ = _client(model, clock, policy, session=42)
    model.trigger(Trigger("down", 500))
    client.call(1)  # 2 attempts, both 503: the breaker opens
    client.call(2)  # refused: no attempt
    offered_before = sum(s.offered for s in model.counters())
    assert offered_before == 2
    clock.sleep(1.6)  # past the cooldown and the trigger: the probe succeeds
    client.call(3)
    rows = {r["second"]: r for r in model.session_seconds(["42"], 0, 2)["42"]}
    assert rows[0]["offered"] == 2 and rows[0]["retries"] == 1 and rows[0]["fast"] == 1
    assert rows[0]["state"] == "open" and rows[0]["error"] == 2
    assert rows[1]["offered"] == 1 and rows[1]["state"] == "half_open" and rows[1]["ok"] == 1
    # The refusal reached no server: the class counters hold the three attempts only.
    assert sum(s.offered for s in model.counters()) == 3


def test_a_guarded_call_sleeps_until_the_answer_and_a_client_timeout_is_a_timeout_outcome():
    clock = VirtualClock()
    model = MemorySharedModel(
        SharedConfig(servers=1, service_ms=100, max_queue_ms=1000), clock=clock
    )
    model.decide()  # the server is busy until 100 ms
    client, events = _client(
        model, clock, {"max_attempts": 2, "backoff_base_ms": 0, "attempt_timeout_ms": 150}
    )
    result = client.call(1)
    attempts = [e for e in events if e.kind == "attempt"]
    assert [a.error for a in attempts] == ["timeout", None]
    assert attempts[0].latency_ms == 150 and attempts[0].data["outcome"] == "timeout"
    # attempt 1 would finish at 200 ms: the client gives up at 150; the retry waits for the
    # server until 200 ms (the dead work), then is served in 100 ms: 150 ms, within the timeout
    assert (result.outcome, result.end_ms) == ("success", 300)
    (second,) = model.counters()
    assert (second.timeout, second.calls, second.retries, second.calls_ok) == (1, 2, 1, 2)
    assert second.wasted_us == 100 * MS


def test_the_policy_deadline_is_sent_along_only_when_propagating():
    for propagate, expected in ((False, "timeout"), (True, "skipped")):
        clock = VirtualClock()
        model = MemorySharedModel(
            SharedConfig(servers=1, service_ms=100, max_queue_ms=1000), clock=clock
        )
        model.decide()
        model.decide()
        client, events = _client(
            model, clock, {"max_attempts": 1, "deadline_ms": 150}, propagate=propagate
        )
        client.call(1)
        (attempt,) = [e for e in events if e.kind == "attempt"]
        assert attempt.data["outcome"] == ("ok" if not propagate else expected)
        (second,) = model.counters()
        assert second.wasted_us == 0


def test_propagating_the_attempt_timeout_spares_the_server_the_dead_work():
    clock = VirtualClock()
    model = MemorySharedModel(
        SharedConfig(servers=1, service_ms=100, max_queue_ms=1000), clock=clock
    )
    model.decide()
    model.decide()
    client, events = _client(
        model, clock, {"max_attempts": 1, "attempt_timeout_ms": 150}, propagate=True
    )
    client.call(1)
    (attempt,) = [e for e in events if e.kind == "attempt"]
    assert (attempt.error, attempt.data["outcome"], attempt.latency_ms) == ("503", "skipped", 0)
    assert model.state()["free_us"] == [200 * MS]


# -- validation -----------------------------------------------------------------------------------


def test_out_of_range_settings_are_refused_naming_the_field_and_range():
    problems = [
        str(p) for p in validate_shared({"servers": 65, "service_ms": 0, "max_queue_ms": -1})
    ]
    assert problems == [
        "shared.servers: must be between 1 and 64 servers (got 65)",
        "shared.service_ms: must be between 1 and 2000 ms (got 0)",
        "shared.max_queue_ms: must be between 0 and 10000 ms (got -1)",
    ]
    with pytest.raises(ValidationError, match=r"shared\.servers"):
        parse_shared({"servers": "8"})
    assert parse_shared({}) == SharedConfig()
    assert SharedConfig().to_dict() == {
        k.split(".")[1]: LIMITS[k].default
        for k in (
            "shared.servers",
            "shared.service_ms",
            "shared.max_queue_ms",
            "shared.rate_per_s",
            "shared.rate_burst",
            "shared.queue_limit",
            "shared.concurrency_limit",
            "shared.concurrency",
            "shared.concurrency_max",
            "shared.limit_latency_ms",
            "shared.codel_target_ms",
            "shared.codel_interval_ms",
            "shared.discipline",
            "shared.lifo_after_ms",
        )
    }
    assert not SharedConfig().defended


def test_the_server_s_defences_out_of_range_are_refused_naming_the_field_and_range():
    problems = [
        str(p)
        for p in validate_shared(
            {
                "rate_per_s": 0,
                "rate_burst": 0,
                "queue_limit": 0,
                "concurrency_limit": 1001,
                "codel_target_ms": 6000,
                "codel_interval_ms": 5,
            }
        )
    ]
    assert problems == [
        "shared.rate_per_s: must be null (off) or between 0.1 and 100000 attempts/s (got 0)",
        "shared.rate_burst: must be between 1 and 10000 attempts (got 0)",
        "shared.queue_limit: must be null (off) or between 1 and 100000 attempts (got 0)",
        "shared.concurrency_limit: must be null (off) or between 1 and 1000 attempts (got 1001)",
        "shared.codel_target_ms: must be null (off) or between 1 and 5000 ms (got 6000)",
        "shared.codel_interval_ms: must be between 10 and 10000 ms (got 5)",
    ]
    on = parse_shared({"rate_per_s": 50, "queue_limit": 3, "codel_target_ms": 20})
    assert on.defended and on.counts_in_flight and on.rate_per_s == 50


def test_triggers_are_validated_with_the_model_s_server_count():
    assert [str(p) for p in validate_trigger({"kind": "capacity", "servers": 8}, servers=8)] == [
        "trigger.servers: must be between 0 and 7 servers (fewer than the 8 the shared "
        "dependency has; got 8)"
    ]
    assert [str(p) for p in validate_trigger({"kind": "melt", "factor": 50})] == [
        "trigger.kind: must be one of down, slow, capacity (got 'melt')",
        "trigger.factor: must be between 1 and 20 (got 50)",
    ]
    assert str(validate_trigger({})[0]).startswith("trigger.kind: is required")
    assert parse_trigger({"kind": "slow", "factor": 2}) == Trigger("slow", 8000, 2, 0)


# -- Redis: one round trip, and exact across processes -------------------------------------------


def test_every_attempt_is_one_round_trip_and_keys_share_one_hash_tag(redis_client):
    import redis

    class CountingRedis(redis.Redis):
        def execute_command(self, *args, **options):
            self.commands.append(str(args[0]))
            return super().execute_command(*args, **options)

    client = CountingRedis.from_url(REDIS_URL)
    client.commands = []
    model = RedisSharedModel(client, uuid.uuid4().hex[:10])
    model.configure(SharedConfig())
    model.trigger(Trigger("slow", 1000))
    client.commands = []
    for attempt in (1, 2, 3):
        model.decide(timeout_us=1000, deadline_us=5000, attempt=attempt)
    assert client.commands == ["EVALSHA"] * 3
    slots = {redis.cluster.key_slot(k.encode()) for k in model.all_keys()}
    assert len(slots) == 1 and all(
        k.startswith(f"{{shared:{model.model_id}}}") for k in model.all_keys()
    )
    model.clear()
    client.close()


def test_state_reads_every_servers_free_at_time_on_a_decoding_client_too(redis_client):
    """The free-at times live packed in one binary field; a client with decode_responses (the
    store accepts either kind) still reads the model's state."""
    import redis

    decoding = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    config = SharedConfig(servers=64, service_ms=5, max_queue_ms=1000)
    model = RedisSharedModel(decoding, uuid.uuid4().hex[:10], server_time=False)
    memory = MemorySharedModel(config)
    model.configure(config)
    for t in range(70):  # every server busy once, six of them twice
        assert model.decide(t * 10) == memory.decide(t * 10)
    model.trigger(Trigger("capacity", 1000, servers=3), now_us=800)
    memory.trigger(Trigger("capacity", 1000, servers=3), now_us=800)
    assert model.state() == memory.state()
    assert len(model.state()["free_us"]) == 64
    model.clear()
    decoding.close()


def test_an_unconfigured_model_refuses_attempts(redis_client):
    import redis

    model = RedisSharedModel(redis_client, uuid.uuid4().hex[:10])
    with pytest.raises(redis.ResponseError, match="not configured"):
        model.decide()
    with pytest.raises(ValueError, match="model_id"):
        RedisSharedModel(redis_client, "a{b}")


def test_two_processes_of_callers_never_overlap_on_a_server_and_keep_fifo(redis_client):
    model = RedisSharedModel(redis_client, uuid.uuid4().hex[:10])
    model.configure(SharedConfig(servers=3, service_ms=4, max_queue_ms=60))
    worker = ROOT / "tests" / "engine" / "shared_worker.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), REDIS_URL, model.model_id, "12", "25", str(i)],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    decisions = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        decisions += json.loads(out)
    assert len(decisions) == 2 * 12 * 25
    served = [d for d in decisions if d["server"] >= 0]
    assert len(served) > 100 and any(d["wait_us"] > 0 for d in served)  # there was a queue
    by_server: dict[int, list] = {}
    for d in served:
        by_server.setdefault(d["server"], []).append((d["start_us"], d["finish_us"]))
    for intervals in by_server.values():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end  # no two attempts on one server at overlapping times
    ordered = sorted(served, key=lambda d: (d["arrival_us"], d["start_us"]))
    starts = [d["start_us"] for d in ordered]
    assert starts == sorted(starts)  # FIFO: a later arrival never starts earlier
    totals = {name: 0 for name in ("offered", "ok", "shed", "timeout")}
    for second in model.counters():
        for name in totals:
            totals[name] += getattr(second, name)
    outcomes = [d["outcome"] for d in decisions]
    assert totals == {
        "offered": len(decisions),
        "ok": outcomes.count("ok"),
        "shed": outcomes.count("shed"),
        "timeout": outcomes.count("timeout"),
    }
    model.clear()
