"""The shared dependency's explicit queue (LIFO and adaptive LIFO, live): which waiting
attempt a freed server takes, what a caller that stops waiting hears, that a waiting attempt
asks again no later than it could hear its answer, both implementations reply for reply, and
the live model against the virtual-time server with the same policy."""

from __future__ import annotations

import heapq
import random
import uuid

import pytest

from labs.engine import MemorySharedModel, SharedConfig, Trigger, VirtualClock
from labs.engine.redis import RedisSharedModel
from labs.engine.server import QueueServer, ServerPolicy
from labs.engine.shared import SharedDependency
from labs.engine.validate import validate_shared

MS = 1000  # microseconds


@pytest.fixture(params=["memory", "redis"])
def make(request):
    """A model of each implementation with a given configuration (Redis on caller time)."""
    made = []

    def build(config):
        if request.param == "memory":
            return MemorySharedModel(config)
        client = request.getfixturevalue("redis_client")
        model = RedisSharedModel(client, uuid.uuid4().hex[:10], server_time=False)
        model.configure(config)
        made.append(model)
        return model

    yield build
    for model in made:
        model.clear()


def test_lifo_gives_a_freed_server_the_newest_waiting_attempt(make):
    model = make(SharedConfig(servers=1, service_ms=100, max_queue_ms=1000, discipline="lifo"))
    assert model.decide(0).outcome == "ok"  # 0 to 100 ms
    b = model.decide(10 * MS)
    c = model.decide(20 * MS)
    assert (b.outcome, c.outcome) == ("waiting", "waiting")
    assert b.ticket and c.ticket and b.ticket != c.ticket
    # each may be taken when the server frees (b, alone when it arrived, too)
    assert b.answer_us == c.answer_us == 100 * MS
    # b asks at 100 ms: c, the newest, took the server; b now waits behind it
    again = model.poll(b.ticket, 100 * MS)
    assert (again.outcome, again.answer_us) == ("waiting", 200 * MS)
    heard = model.poll(c.ticket, 100 * MS)
    assert (heard.outcome, heard.start_us, heard.answer_us, heard.wait_us) == (
        "ok", 100 * MS, 200 * MS, 80 * MS,
    )  # fmt: skip
    heard = model.poll(b.ticket, 200 * MS)
    assert (heard.outcome, heard.start_us, heard.wait_us) == ("ok", 200 * MS, 190 * MS)
    assert model.state()["waiting"] == 0


@pytest.mark.parametrize(("lifo_after_ms", "first"), [(50, "c"), (100, "b")])
def test_adaptive_lifo_is_fifo_until_the_oldest_has_waited_past_its_threshold(
    make, lifo_after_ms, first
):
    model = make(
        SharedConfig(
            servers=1, service_ms=100, max_queue_ms=1000,
            discipline="adaptive_lifo", lifo_after_ms=lifo_after_ms,
        )
    )  # fmt: skip
    model.decide(0)
    waiting = {"b": model.decide(10 * MS), "c": model.decide(20 * MS)}
    # at 100 ms the oldest (b) has waited 90 ms: past 50 ms the newest goes first
    taken = model.poll(waiting[first].ticket, 100 * MS)
    assert (taken.outcome, taken.start_us) == ("ok", 100 * MS)


def test_a_caller_that_stops_waiting_hears_timeout_and_a_server_taking_it_later_wastes_it(make):
    model = make(SharedConfig(servers=1, service_ms=100, max_queue_ms=1000, discipline="lifo"))
    model.decide(0)
    b = model.decide(10 * MS, timeout_us=50 * MS)
    assert b.answer_us == 60 * MS  # its give-up comes before the server frees
    heard = model.poll(b.ticket, 60 * MS)
    assert (heard.outcome, heard.answer_us) == ("timeout", 60 * MS)
    model.decide(150 * MS)  # the server took the abandoned attempt at 100 ms: busy to 200 ms
    assert model.state()["free_us"] == [200 * MS]
    (second,) = model.counters()
    assert (second.timeout, second.wasted_us, second.ok) == (1, 100 * MS, 1)


def test_a_propagated_deadline_skips_a_waiting_attempt_without_taking_a_server(make):
    model = make(SharedConfig(servers=1, service_ms=100, max_queue_ms=1000, discipline="lifo"))
    model.decide(0)
    b = model.decide(10 * MS, deadline_us=40 * MS)
    heard = model.poll(b.ticket, b.answer_us)
    assert (heard.outcome, heard.answer_us) == ("skipped", 50 * MS)
    c = model.decide(120 * MS)
    assert (c.outcome, c.start_us) == ("ok", 120 * MS)  # the server was free from 100 ms


def test_an_attempt_waiting_past_the_longest_wait_is_dropped_when_a_server_reaches_it(make):
    model = make(SharedConfig(servers=1, service_ms=100, max_queue_ms=50, discipline="lifo"))
    model.decide(0)
    b = model.decide(10 * MS)
    assert b.outcome == "waiting"  # LIFO cannot know its wait at arrival
    heard = model.poll(b.ticket, 100 * MS)
    assert (heard.outcome, heard.reason, heard.answer_us) == ("shed", "queue_wait", 100 * MS)


def test_the_queue_limit_sheds_an_attempt_that_would_wait_behind_that_many(make):
    model = make(
        SharedConfig(servers=1, service_ms=100, max_queue_ms=1000, discipline="lifo", queue_limit=2)
    )
    model.decide(0)
    assert [model.decide(t * MS).outcome for t in (1, 2, 3)] == ["waiting", "waiting", "shed"]


def test_lifo_with_an_arrival_time_defence_is_refused_naming_the_field():
    problems = [
        str(p) for p in validate_shared({"discipline": "lifo", "codel_target_ms": 5, "servers": 2})
    ]
    assert problems == [
        "shared.discipline: must be fifo (first come, first served) while CoDel is on: it "
        "decides on the wait an attempt has at its arrival, which only a FIFO queue knows "
        "then (got lifo)"
    ]
    assert [str(p) for p in validate_shared({"discipline": "stack"})] == [
        "shared.discipline: must be one of fifo, lifo, adaptive_lifo (got 'stack')"
    ]
    assert [str(p) for p in validate_shared({"lifo_after_ms": 0})] == [
        "shared.lifo_after_ms: must be between 1 and 10000 ms (got 0)"
    ]


def _run(model, arrivals, *, until_us):
    """Every caller arrives at its instant and asks again at each instant a reply names, in
    time order (ties: arrival order); returns each caller's final decision and the instant
    it heard it."""
    events = [(t, i, None) for i, (t, _kwargs) in enumerate(arrivals)]
    heapq.heapify(events)
    final = {}
    while events:
        t, i, ticket = heapq.heappop(events)
        if t > until_us:
            break
        reply = model.decide(t, **arrivals[i][1]) if ticket is None else model.poll(ticket, t)
        if reply.outcome == "waiting":
            assert reply.answer_us > t, (i, reply)  # a look is never for now or the past
            heapq.heappush(events, (reply.answer_us, i, reply.ticket))
        else:
            final[i] = (reply, t)
    return final


def _arrivals(rng, n, gap_us):
    t, out = 0, []
    for _ in range(n):
        t += int(rng.expovariate(1 / gap_us))
        out.append(
            (
                t,
                {
                    "timeout_us": rng.choice([None, 80 * MS, 300 * MS]),
                    "deadline_us": rng.choice([None, None, None, 60 * MS]),
                    "attempt": rng.choice([1, 2]),
                    "session": rng.choice([None, "1", "2"]),
                },
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("discipline", ["lifo", "adaptive_lifo"])
def test_a_waiting_attempt_asks_again_no_later_than_its_answer(seed, discipline):
    """The instant a waiting reply names is a lower bound: the caller asking then never
    hears of an answer already past (honest timing), under overload too."""
    rng = random.Random(seed)
    config = SharedConfig(
        servers=rng.randint(1, 4), service_ms=rng.choice([5, 20, 40]),
        max_queue_ms=rng.choice([50, 200, 1000]), discipline=discipline,
        lifo_after_ms=rng.choice([10, 100]),
    )  # fmt: skip
    model = MemorySharedModel(config)
    capacity_gap = config.service_ms * MS / config.servers
    final = _run(model, _arrivals(rng, 600, capacity_gap * 0.7), until_us=10**12)
    assert len(final) == 600
    outcomes = set()
    for i, (reply, heard_at) in final.items():
        outcomes.add(reply.outcome)
        assert reply.answer_us >= heard_at, (i, reply, heard_at)
    assert {"ok", "waiting"} & outcomes == {"ok"}
    assert outcomes & {"shed", "timeout", "skipped"}, outcomes  # overload reached the queue


@pytest.mark.parametrize("seed", range(6))
def test_memory_and_redis_agree_reply_for_reply_with_a_queue(redis_client, seed):
    """The explicit queue's rules and state agree between the two implementations, with
    triggers and the discipline changed midway (a FIFO class finishing a LIFO queue)."""
    rng = random.Random(500 + seed)

    def settings():
        return SharedConfig(
            servers=rng.randint(1, 4),
            service_ms=rng.choice([5, 20, 45]),
            max_queue_ms=rng.choice([40, 400]),
            rate_per_s=rng.choice([None, None, 300.0]),
            queue_limit=rng.choice([None, 3, 20]),
            discipline=rng.choice(["lifo", "adaptive_lifo", "adaptive_lifo", "fifo"]),
            lifo_after_ms=rng.choice([5, 50]),
        )

    config = settings()
    memory = MemorySharedModel(config, keep_s=3)
    redis_model = RedisSharedModel(redis_client, uuid.uuid4().hex[:10], server_time=False, keep_s=3)
    redis_model.configure(config)
    events: list[tuple[int, int, int]] = []  # (instant, order, ticket: 0 for an arrival)
    t, order, seen = 0, 0, set()
    for step in range(900):
        if events and (rng.random() < 0.5 or not step % 7):
            t, _, ticket = heapq.heappop(events)
            reply = memory.poll(ticket, t)
            assert reply == redis_model.poll(ticket, t), step
        else:
            t += rng.choice([0, 1, 500, 4_000, 15_000])
            if rng.random() < 0.02:
                config = settings()
                memory.configure(config)
                redis_model.configure(config)
                continue
            if rng.random() < 0.02:
                trig = Trigger(rng.choice(["down", "slow"]), rng.choice([50, 300]), factor=3)
                assert memory.trigger(trig, t) == redis_model.trigger(trig, t), step
                continue
            kwargs = {
                "timeout_us": rng.choice([None, 30_000, 300_000]),
                "deadline_us": rng.choice([None, None, 20_000]),
                "attempt": rng.choice([1, 2]),
                "session": rng.choice([None, "1", "2"]),
            }
            reply = memory.decide(t, **kwargs)
            assert reply == redis_model.decide(t, **kwargs), step
        seen.add((reply.outcome, reply.reason))
        if reply.outcome == "waiting":
            order += 1
            heapq.heappush(events, (max(t, reply.answer_us), order, reply.ticket))
    assert memory.counters() == redis_model.counters()
    assert memory.state() == redis_model.state()
    last = t // 1_000_000 + 2
    assert memory.session_seconds(["1", "2"], 0, last) == redis_model.session_seconds(
        ["1", "2"], 0, last
    )
    assert {"waiting", "ok"} <= {outcome for outcome, _ in seen}, seen
    redis_model.clear()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("discipline", ["lifo", "adaptive_lifo"])
def test_the_live_model_serves_as_the_virtual_time_server_with_the_same_policy(seed, discipline):
    """The same seeded arrivals, with a latency spike, through the live model (callers asking
    again as its replies say) and through :class:`QueueServer` with the same policy: the
    same outcomes, second by second."""
    rng = random.Random(900 + seed)
    config = SharedConfig(
        servers=4, service_ms=20, max_queue_ms=300, discipline=discipline, lifo_after_ms=30
    )
    arrivals = []
    t = 0
    for _ in range(1500):
        t += int(rng.expovariate(1 / (20 * MS / 4 / 0.9)))  # 90 % of capacity
        arrivals.append((t, {"timeout_us": 200 * MS}))
    spike = Trigger("slow", 1500, factor=3)
    live = MemorySharedModel(config)
    live.trigger(spike, 1_000_000)
    final = _run(live, arrivals, until_us=10**12)
    server = QueueServer(
        config, ServerPolicy(discipline=discipline, lifo_after_ms=30, queue_limit=None)
    )
    server.at(1_000_000, server.trigger, spike)
    replies = {}
    for i, (at, kwargs) in enumerate(arrivals):
        server.at(at, lambda i=i, kw=kwargs: server.submit(
            lambda r, i=i: replies.__setitem__(i, r), timeout_us=kw["timeout_us"]
        ))  # fmt: skip
    server.run()
    live_outcomes = {i: d.outcome for i, (d, _) in final.items()}
    virtual_outcomes = {i: r.outcome for i, r in replies.items()}
    assert live_outcomes == virtual_outcomes
    per_second = {}
    for s in live.counters():
        per_second[s.second] = {
            name: getattr(s, name) for name in ("ok", "shed", "timeout") if getattr(s, name)
        }
    virtual = {
        sec: {name: row[name] for name in ("ok", "shed", "timeout") if row.get(name)}
        for sec, row in server.counters().items()
    }
    assert per_second == {sec: row for sec, row in virtual.items() if row or sec in per_second}
    assert set(live_outcomes.values()) >= {"ok", "timeout"}


@pytest.mark.parametrize("start", [0.0, 1_764_900_000.123457])
def test_a_guarded_call_waits_in_the_queue_until_its_answer(start):
    """SharedDependency asks again at each instant the model names and returns when the
    answer is due: the caller's clock reads the model's answer time. On wall-clock times
    (1.7e9 s) a float instant may round to a microsecond before the one named: it still
    asks at the named one (once looped for ever, asking a microsecond early)."""
    clock = VirtualClock(start=start)
    model = MemorySharedModel(
        SharedConfig(servers=1, service_ms=100, max_queue_ms=1000, discipline="lifo"),
        clock=clock,
    )
    dep = SharedDependency(model, clock=clock)
    ends = {}

    def caller(name):
        result = dep.attempt(None)
        ends[name] = (round(clock.now(), 3), result.ok, round(result.latency_ms))

    for name, delay in (("a", 0), ("b", 0.01), ("c", 0.02)):
        clock.spawn(lambda name=name: caller(name), at=start + delay)
    clock.run()
    # a: 0-100 ms; c (the newest) 100-200 ms; b 200-300 ms
    ends = {k: (round(t - start, 3), ok, ms) for k, (t, ok, ms) in ends.items()}
    assert ends == {"a": (0.1, True, 100), "c": (0.2, True, 180), "b": (0.3, True, 290)}


def test_the_virtual_time_server_takes_its_queue_order_from_its_policy():
    with pytest.raises(ValueError, match="ServerPolicy"):
        QueueServer(SharedConfig(discipline="lifo"))
    QueueServer(SharedConfig(), ServerPolicy(discipline="lifo"))
